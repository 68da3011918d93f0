"""Three-way merge of a ref into a branch, and revert of a commit.

**Merge** ``source`` into branch ``into``:

1. Resolve ``source`` to a commit S and read the destination's base D.
2. If S is D or an ancestor of D, the source is already merged: nothing is written and
   the result says so (``merged=False``, ``commit_id == D``).
3. Otherwise the merge base B is the nearest common ancestor of D and S
   (:func:`~lsmstore.versioning.history.merge_base`; the empty tree when none), and
   ``merge_trees(B, D, S, strategy)`` builds the merged tree, per key:

   ====================================  =========================================
   destination vs base / source vs base  result
   ====================================  =========================================
   both unchanged, or changed the same   destination (= source)
   only the source changed / added /     source's change
   deleted
   only the destination changed          destination's
   both changed differently, both        conflict: :class:`MergeConflictError`
   added differently, one changed and    listing the keys (nothing is written);
   the other deleted                     ``source-wins`` / ``dest-wins`` settle it
   ====================================  =========================================

4. A merge commit with parents ``[D, S]`` is written, then the branch's base moves from
   D to it with ``set_base(expected_base=D)``: the destination's staged changes (L1, L2)
   stay staged on top of the new base, so they still win over merged values.

When D is an ancestor of S the merged tree is S's tree, and a merge commit is still
written (as lakeFS does): the destination's own history keeps a record of the merge
and the staged changes stay where they are.  There is no fast-forward.

A **squash merge** (``squash=True``, lakeFS's ``squash_merge``) builds the same tree
but commits it with the single parent ``[D]``: the destination's history shows one
commit and S is not its ancestor.  Merging S again then finds the same changes on
both sides; a squash merge whose tree equals D's writes nothing (``merged=False``).

If the destination's base moves meanwhile (a commit or another merge), the merge starts
over from the new base after a bounded, jittered backoff; a conflict on that retry is
reported like any other.

**Revert** commit C on branch ``branch``: a three-way merge with base C, destination
the branch's base and source C's parent (``parent`` chooses which, for a merge commit),
committed with the single parent ``[D]``.  Keys changed since C conflict like in a
merge.  A revert that changes nothing raises :class:`NothingToCommitError`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from lsmstore.errors import (
    ConflictError,
    InvalidInputError,
    MergeConflictError,
    NothingToCommitError,
    RefNotFoundError,
    UnavailableError,
)
from lsmstore.graveler import merge as trees
from lsmstore.graveler.commit import next_generation, write_commit
from lsmstore.graveler.merge import merge_trees
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.refexpr import resolve
from lsmstore.refstore.base import Ref
from lsmstore.types import STRATEGIES, Commit, MergeResult, Strategy
from lsmstore.validate import key_text
from lsmstore.versioning.context import RepoContext
from lsmstore.versioning.history import is_ancestor, merge_base
from lsmstore.versioning.refs import get_branch

DEFAULT_COMMITTER = "lsmstore"
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_BACKOFF_S = 0.05
DEFAULT_BACKOFF_MAX_S = 2.0


@dataclass(frozen=True, slots=True)
class _Retry:
    backoff_s: float
    backoff_max_s: float
    sleep: Callable[[float], Awaitable[None]]
    rng: Callable[[], float]

    async def wait(self, attempt: int) -> None:
        delay = min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1))
        await self.sleep(delay * (0.5 + 0.5 * self.rng()))


async def _set_base(ctx: RepoContext, branch: str, expected: str, new: str) -> bool:
    """Move the branch's base; False when it is no longer ``expected``."""
    try:
        await ctx.refstore.set_base(ctx.name, branch, expected_base=expected, new_base=new)
        return True
    except ConflictError as e:
        if isinstance(e.found, Ref) and not e.found.is_branch:
            raise
        return False
    except UnavailableError as e:
        if not e.outcome_unknown:
            raise
        return (await ctx.refstore.get_ref(ctx.name, branch)).base == new


async def _commit_onto(ctx: RepoContext, branch: str, dest: str, commit: Commit) -> str | None:
    """Write ``commit`` and move the branch's base from ``dest`` to it: the commit's id,
    or None when the base is no longer ``dest`` (the caller starts over)."""
    commit_id = await write_commit(ctx.objects, commit)
    ctx.remember(commit_id, commit)
    return commit_id if await _set_base(ctx, branch, dest, commit_id) else None


def _merged(
    commit_id: str,
    commit: Commit,
    source: str,
    dest: str,
    base: str | None,
    result: trees.MergeResult,
    attempt: int,
) -> MergeResult:
    """The result of a merge or revert that committed ``commit`` onto the branch."""
    return MergeResult(
        commit_id,
        commit,
        True,
        source,
        dest,
        base,
        result.conflicts_resolved,
        result.ranges_read,
        result.ranges_written,
        result.ranges_reused,
        attempt,
    )


def _check(strategy: object, max_attempts: int) -> None:
    if strategy not in STRATEGIES:
        raise InvalidInputError(
            f"unknown merge strategy {strategy!r}: expected None, 'source-wins' or 'dest-wins'"
        )
    if max_attempts < 1:
        raise InvalidInputError(f"max_attempts must be >= 1, got {max_attempts}")


def _conflict(e: MergeConflictError, what: str) -> MergeConflictError:
    """The tree-level conflict, reworded in terms of refs and commits (``what``)."""
    keys = e.keys
    more = " or more" if len(keys) >= trees.MAX_CONFLICTS else ""
    first = key_text(keys[0], 64) if keys else "?"
    return MergeConflictError(
        f"{what}: {len(keys)}{more} conflicting key{'s' if len(keys) != 1 else ''}, first {first}",
        keys=keys,
    )


async def _merge_trees(
    ctx: RepoContext,
    base_tree: str,
    dest_tree: str,
    source_tree: str,
    strategy: Strategy | None,
    what: str,
) -> trees.MergeResult:
    """:func:`merge_trees` in ``ctx``; a conflict is reworded in terms of ``what``."""
    try:
        return await merge_trees(
            ctx.source,
            ctx.objects,
            base_tree,
            dest_tree,
            source_tree,
            strategy=strategy,
            policy=ctx.policy,
            encoder=ctx.range_encoder,
        )
    except MergeConflictError as e:
        raise _conflict(e, what) from None


async def _tree(ctx: RepoContext, commit_id: str | None) -> str:
    return (await ctx.commit(commit_id)).metarange_id if commit_id else EMPTY_METARANGE_ID


async def merge(
    ctx: RepoContext,
    source: str,
    into: str,
    *,
    strategy: Strategy | None = None,
    message: str | None = None,
    committer: str = DEFAULT_COMMITTER,
    metadata: Mapping[str, str] | None = None,
    squash: bool = False,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: Callable[[], float] = random.random,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff_s: float = DEFAULT_BACKOFF_S,
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
) -> MergeResult:
    """Merge the commit ``source`` names into branch ``into`` (module docstring)."""
    _check(strategy, max_attempts)
    retry = _Retry(backoff_s, backoff_max_s, sleep, rng)
    now = clock or ctx.clock
    src = (await resolve(ctx, source)).commit_id
    text = message if message is not None else f"Merge '{source}' into '{into}'"
    for attempt in range(1, max_attempts + 1):
        dest = (await get_branch(ctx, into)).base
        if not dest:
            raise RefNotFoundError(f"{ctx.name}/{into} has no commit to merge into")
        if await is_ancestor(ctx, src, dest):
            return MergeResult(dest, None, False, src, dest, src, attempts=attempt)
        base = await merge_base(ctx, dest, src)
        dest_tree = await _tree(ctx, dest)
        result = await _merge_trees(
            ctx,
            await _tree(ctx, base),
            dest_tree,
            await _tree(ctx, src),
            strategy,
            f"{ctx.name}: merging {source!r} (commit {src[:12]}) into branch {into!r} "
            f"(commit {dest[:12]})",
        )
        dc, sc = await ctx.commit(dest), await ctx.commit(src)
        if squash and result.metarange_id == dest_tree:
            return MergeResult(dest, None, False, src, dest, base, attempts=attempt)
        commit = Commit(
            result.metarange_id,
            (dest,) if squash else (dest, src),
            committer,
            text,
            int(now()),
            dict(metadata or {}),
            dc.generation + 1 if squash else next_generation((dc, sc)),
        )
        commit_id = await _commit_onto(ctx, into, dest, commit)
        if commit_id is not None:
            return _merged(commit_id, commit, src, dest, base, result, attempt)
        if attempt < max_attempts:
            await retry.wait(attempt)
    raise ConflictError(
        f"{ctx.name}/{into}: merge of {source!r} gave up after {max_attempts} attempts: "
        "the branch's base kept moving"
    )


async def revert(
    ctx: RepoContext,
    branch: str,
    target: str,
    *,
    parent: int = 1,
    strategy: Strategy | None = None,
    message: str | None = None,
    committer: str = DEFAULT_COMMITTER,
    metadata: Mapping[str, str] | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: Callable[[], float] = random.random,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff_s: float = DEFAULT_BACKOFF_S,
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
) -> MergeResult:
    """Undo the changes of commit ``target`` on ``branch`` with a new commit."""
    _check(strategy, max_attempts)
    retry = _Retry(backoff_s, backoff_max_s, sleep, rng)
    now = clock or ctx.clock
    reverted = (await resolve(ctx, target)).commit_id
    rc = await ctx.commit(reverted)
    if rc.parents and not 1 <= parent <= len(rc.parents):
        raise InvalidInputError(
            f"commit {reverted[:12]} has {len(rc.parents)} parents: parent {parent} is not one"
        )
    if not rc.parents and parent != 1:
        raise InvalidInputError(f"commit {reverted[:12]} has no parents: parent {parent}")
    before = rc.parents[parent - 1] if rc.parents else None
    text = message if message is not None else f"Revert {reverted[:12]}: {rc.message}"
    for attempt in range(1, max_attempts + 1):
        dest = (await get_branch(ctx, branch)).base
        if not dest:
            raise RefNotFoundError(f"{ctx.name}/{branch} has no commit to revert on")
        dest_tree = await _tree(ctx, dest)
        result = await _merge_trees(
            ctx,
            rc.metarange_id,
            dest_tree,
            await _tree(ctx, before),
            strategy,
            f"{ctx.name}: reverting {target!r} (commit {reverted[:12]}) on branch "
            f"{branch!r} (commit {dest[:12]}): keys changed since",
        )
        if result.metarange_id == dest_tree:
            raise NothingToCommitError(
                f"{ctx.name}/{branch}: reverting {reverted[:12]} changes nothing"
            )
        dc = await ctx.commit(dest)
        commit = Commit(
            result.metarange_id,
            (dest,),
            committer,
            text,
            int(now()),
            dict(metadata or {}),
            dc.generation + 1,
        )
        commit_id = await _commit_onto(ctx, branch, dest, commit)
        if commit_id is not None:
            return _merged(commit_id, commit, before or "", dest, reverted, result, attempt)
        if attempt < max_attempts:
            await retry.wait(attempt)
    raise ConflictError(
        f"{ctx.name}/{branch}: revert of {target!r} gave up after {max_attempts} attempts: "
        "the branch's base kept moving"
    )
