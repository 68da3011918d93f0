"""Diffs: between two committed states, and of a branch's staged changes.

:func:`diff_refs` compares the trees of two commits; ranges with equal IDs on both
sides are skipped without being read.  :func:`diff_uncommitted` compares a branch's
staged changes (L1 over L2, newest wins) with its base tree: it reads the staged files
and, for each staged key in order, only the base range that may hold the key.

Both yield :class:`~lsmstore.graveler.diff.Change` in key order: ``added`` (only on the
right / staged), ``removed`` (only on the left / base: deleted by a staged tombstone),
``changed`` (both, different identities).  A staged record equal to the base record,
or a tombstone of a key the base lacks, is no change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from lsmstore.graveler.diff import diff_trees
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.graveler.tree import TreeCursor
from lsmstore.refexpr import resolve
from lsmstore.types import Change
from lsmstore.versioning.context import RepoContext
from lsmstore.versioning.refs import get_branch
from lsmstore.versioning.staged import merged, open_staged


async def diff_commits(ctx: RepoContext, left: str, right: str) -> AsyncIterator[Change]:
    """Changes from commit ``left`` to commit ``right`` (both commit IDs)."""
    lc, rc = await ctx.commit(left), await ctx.commit(right)
    async for change in diff_trees(ctx.source, lc.metarange_id, rc.metarange_id):
        yield change


async def diff_refs(ctx: RepoContext, left: str, right: str) -> AsyncIterator[Change]:
    """Changes from the committed state ``left`` names to the one ``right`` names."""
    lr, rr = await resolve(ctx, left), await resolve(ctx, right)
    async for change in diff_commits(ctx, lr.commit_id, rr.commit_id):
        yield change


async def diff_uncommitted(
    ctx: RepoContext, branch: str, *, start: bytes = b""
) -> AsyncIterator[Change]:
    """What committing ``branch`` now would change (its staged state vs its base), from
    key ``start`` on: a page after a given key seeks the staged files there instead of
    walking the changes before it."""
    ref = await get_branch(ctx, branch)
    tree = (await ctx.commit(ref.base)).metarange_id if ref.base else EMPTY_METARANGE_ID
    readers = await open_staged(ctx, branch, ref)
    base = TreeCursor(ctx.source, (await ctx.source.metarange(tree)).ranges)
    for staged in merged(readers, start):
        old = await base.lookup(staged.key)
        if staged.value is None:
            if old is not None:
                yield Change(staged.key, "removed", old, None)
        elif old is None:
            yield Change(staged.key, "added", None, staged)
        elif old.identity != staged.identity:
            yield Change(staged.key, "changed", old, staged)
