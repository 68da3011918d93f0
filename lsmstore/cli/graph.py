"""An ASCII commit graph for ``lsmstore log --graph`` (in the manner of ``git log --graph``).

Commits come newest first in topological order (a commit before its parents).  Each
lane holds the commit it is waiting for; a commit prints ``*`` in its lane, a merge
opens a lane for its second parent (``|\\``), and a lane whose parent another lane
already waits for closes into it (``|/``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


class Graph:
    def __init__(self) -> None:
        self.lanes: list[str] = []

    def rows(self, commit_id: str, parents: Sequence[str]) -> Iterator[tuple[str, bool]]:
        """The graph text of one commit: ``(text, is_commit_row)`` pairs; the commit row
        comes first, connector rows after it."""
        lanes = self.lanes
        if commit_id not in lanes:
            lanes.append(commit_id)
        i = lanes.index(commit_id)
        # Other lanes that waited for this commit close here (branches that forked off it).
        closing = [j for j, c in enumerate(lanes) if c == commit_id and j != i]
        yield " ".join("*" if j == i else "|" for j in range(len(lanes))), True
        for j in reversed(closing):
            del lanes[j]
            yield _row(len(lanes), "/", 2 * j - 1), False
        i = lanes.index(commit_id)
        if not parents:
            del lanes[i]
            return
        first, *others = parents
        if first in lanes:  # joins a lane that already waits for the parent
            k = lanes.index(first)
            del lanes[i]
            yield _row(len(lanes), "/", 2 * max(i, k) - 1), False
            i = lanes.index(first)
        else:
            lanes[i] = first
        for n, p in enumerate(others):
            if p in lanes:
                continue
            at = i + 1 + n
            lanes.insert(at, p)
            yield _row(len(lanes) - 1, "\\", 2 * at - 1), False


def _row(lanes: int, mark: str, column: int) -> str:
    """``lanes`` vertical bars (one every second column) and ``mark`` at ``column``."""
    cells = [" "] * max(2 * lanes - 1, column + 1)
    for k in range(lanes):
        cells[2 * k] = "|"
    cells[column] = mark
    return "".join(cells).rstrip()
