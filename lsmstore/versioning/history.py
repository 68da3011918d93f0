"""Walking commit history: log, ancestry and merge bases.

Every function reads immutable commit objects only (through the context's commit
cache); none touches the RefStore.  Generations order the walks: a commit's generation
is greater than each of its parents', so visiting commits by decreasing generation
reaches every descendant of a commit before the commit itself.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator

from lsmstore import validate
from lsmstore.types import LogEntry
from lsmstore.versioning.context import RepoContext


async def log(
    ctx: RepoContext,
    head: str,
    *,
    after: str | None = None,
    limit: int | None = None,
    first_parent: bool = True,
) -> AsyncIterator[LogEntry]:
    """History from commit ``head``, newest first, at most ``limit`` entries.

    ``first_parent`` (default): ``head``, its first parent, that commit's first parent...
    (the branch's own line, as ``main~N`` walks it).  Otherwise every ancestor once, by
    decreasing generation (ties: newer creation time, then ID).

    ``after`` is the ID of the last entry of a previous page: the listing continues just
    past it.  In first-parent mode that is ``after``'s first parent (``after`` is not
    checked to be on the line: pass IDs this function returned); otherwise the walk
    skips entries up to and including ``after``.
    """
    validate.check_optional_int(limit, "log limit", min_value=0)
    if limit == 0:
        return
    produced = 0
    if first_parent:
        cid: str | None = head
        if after is not None:
            parents = (await ctx.commit(after)).parents
            cid = parents[0] if parents else None
        while cid is not None:
            commit = await ctx.commit(cid)
            yield LogEntry(cid, commit)
            produced += 1
            if limit is not None and produced >= limit:
                return
            cid = commit.parents[0] if commit.parents else None
        return
    skipping = after is not None
    async for entry in ancestors(ctx, head):
        if skipping:
            skipping = entry.id != after
            continue
        yield entry
        produced += 1
        if limit is not None and produced >= limit:
            return


async def ancestors(ctx: RepoContext, head: str) -> AsyncIterator[LogEntry]:
    """``head`` and every ancestor once, by decreasing generation."""
    first = await ctx.commit(head)
    heap: list[tuple[int, int, str]] = [(-first.generation, -first.created_at, head)]
    seen = {head}
    while heap:
        _, _, cid = heapq.heappop(heap)
        commit = await ctx.commit(cid)
        yield LogEntry(cid, commit)
        for p in commit.parents:
            if p not in seen:
                seen.add(p)
                parent = await ctx.commit(p)
                heapq.heappush(heap, (-parent.generation, -parent.created_at, p))


_LEFT, _RIGHT = 1, 2


async def merge_base(ctx: RepoContext, left: str, right: str) -> str | None:
    """The nearest common ancestor of commits ``left`` and ``right`` (either may be
    the answer), or None when their histories never meet.

    Commits are visited by decreasing generation, each carrying the sides it is
    reachable from; the first commit reached from both sides is the answer (with
    several equally near candidates, as after criss-cross merges, the one of highest
    generation, then the smallest ID).
    """
    if left == right:
        return left
    lc, rc = await ctx.commit(left), await ctx.commit(right)
    flags: dict[str, int] = {left: _LEFT, right: _RIGHT}
    heap: list[tuple[int, str]] = [(-lc.generation, left), (-rc.generation, right)]
    heapq.heapify(heap)
    while heap:
        _, cid = heapq.heappop(heap)
        side = flags[cid]
        if side == _LEFT | _RIGHT:
            return cid
        for p in (await ctx.commit(cid)).parents:
            before = flags.get(p)
            if before is None:
                flags[p] = side
                heapq.heappush(heap, (-(await ctx.commit(p)).generation, p))
            else:
                flags[p] = before | side
    return None


async def is_ancestor(ctx: RepoContext, ancestor: str, descendant: str) -> bool:
    """True when ``ancestor`` is ``descendant`` or reachable from it through parents."""
    if ancestor == descendant:
        return True
    target = await ctx.commit(ancestor)
    head = await ctx.commit(descendant)
    if head.generation <= target.generation:
        return False
    heap: list[tuple[int, str]] = [(-head.generation, descendant)]
    seen = {descendant}
    while heap:
        neg_gen, cid = heapq.heappop(heap)
        if cid == ancestor:
            return True
        if -neg_gen <= target.generation:
            continue  # nothing below this generation can lead to the target
        for p in (await ctx.commit(cid)).parents:
            if p not in seen:
                seen.add(p)
                heapq.heappush(heap, (-(await ctx.commit(p)).generation, p))
    return False
