"""Retention rules and the commits they keep (lakeFS's garbage collection rules).

Rules are days per branch with a default, as lakeFS writes them::

    {"default_retention_days": 21,
     "branches": [{"branch_id": "main", "retention_days": 28}]}

A commit is *kept* when it is the head (base) of a branch or the target of a tag, or
when it is an ancestor of a branch head created within that branch's retention period
(an ancestor of a tag within the default period), reached through kept commits only:
the walk from a head stops at the first commit older than the period, as lakeFS's
does (ancestors are never younger than their descendants).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from lsmstore.errors import InvalidInputError, ObjectNotFoundError, RefNotFoundError
from lsmstore.refstore.names import check_ref_name
from lsmstore.types import Commit

DAY = 86_400.0


@dataclass(frozen=True)
class Retention:
    default_days: float = 21.0
    branches: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for days in (self.default_days, *self.branches.values()):
            if (
                isinstance(days, bool)
                or not isinstance(days, int | float)
                or not math.isfinite(days)
                or days < 0
            ):
                raise InvalidInputError(f"retention days must be a number >= 0, not {days!r}")
        for b in self.branches:
            check_ref_name(b)

    def days(self, branch: str | None) -> float:
        """The retention of ``branch`` (``None``: a tag -> the default)."""
        if branch is None:
            return self.default_days
        return self.branches.get(branch, self.default_days)

    @classmethod
    def parse(cls, text: str) -> Retention:
        """Rules in lakeFS's JSON form (module docstring); InvalidInputError if malformed."""
        try:
            doc = json.loads(text)
            branches = {
                str(b["branch_id"]): float(b["retention_days"]) for b in doc.get("branches", [])
            }
            return cls(float(doc.get("default_retention_days", 21)), branches)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise InvalidInputError(f"malformed retention rules: {e}") from None

    def to_json(self) -> str:
        return json.dumps(
            {
                "default_retention_days": self.default_days,
                "branches": [
                    {"branch_id": b, "retention_days": d} for b, d in sorted(self.branches.items())
                ],
            }
        )


async def kept_commits(
    heads: Iterable[tuple[str, float]],
    load: Callable[[str], Awaitable[Commit]],
    now: float,
) -> set[str]:
    """The commits kept from ``heads`` (commit id, retention days) at time ``now``.

    Each head is kept; a parent is kept when its ``created_at`` is within the retention
    of some head whose walk reaches it, and the walk continues only from kept commits.
    A parent that is missing (collected under earlier, shorter rules) ends its walk.
    """
    best: dict[str, float] = {}  # commit -> the earliest cutoff it was reached with
    stack: list[tuple[str, float]] = []
    for commit_id, days in heads:
        if not commit_id:
            continue
        cutoff = now - days * DAY
        if best.get(commit_id, math.inf) > cutoff:
            best[commit_id] = cutoff
            stack.append((commit_id, cutoff))
    while stack:
        commit_id, cutoff = stack.pop()
        if best.get(commit_id, math.inf) < cutoff:
            continue  # reached again with an earlier cutoff, expanded from there
        try:
            commit = await load(commit_id)
        except (ObjectNotFoundError, RefNotFoundError):
            continue
        for p in commit.parents:
            try:
                parent = await load(p)
            except (ObjectNotFoundError, RefNotFoundError):
                continue
            if parent.created_at >= cutoff and best.get(p, math.inf) > cutoff:
                best[p] = cutoff
                stack.append((p, cutoff))
    return set(best)
