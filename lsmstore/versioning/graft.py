"""Grafting: committed ranges written outside staging become one commit on a branch.

A bulk write -- a Spark job's direct write (:mod:`lsmstore.spark.direct`), an import
from an object-store prefix (:mod:`lsmstore.operations.imports`) -- skips staging: it
cuts its sorted records into committed ranges (:class:`~lsmstore.graveler.ranges.
RangeWriter`, the repository's range policy) and hands over the ranges.  This module
builds the commit's tree from them (:func:`job_tree`) and commits it
(:func:`commit_ranges`):

* when no job range overlaps a base range (a fresh branch, or keys between the base's
  ranges -- the usual import), the metarange lists the base's ranges and the job's
  side by side: nothing is read or encoded again;
* otherwise the job's ranges are read as one sorted change stream and merged onto the
  base with :func:`~lsmstore.graveler.apply.apply_changes` (base ranges the job does not
  touch are reused by ID; job ranges that come out unchanged are not written again).

``replace`` names key prefixes the job *replaces* (lakeFS's import: the imported paths
replace the destination prefixes): a base key under one of them that the job does not
write is deleted.  When the base has a key under one, the tree is built by the second
way, with a tombstone for each such key.

The commit's parent is the base; the branch's base moves to it with ``set_base`` (a
compare-and-swap; staged changes stay staged on top, as after a merge).  If a commit
moved the base meanwhile, the tree is built again on the new base.

Ranges are content-addressed and may be shared with other commits, so an abandoned job
deletes none: they are garbage for :mod:`lsmstore.gc`, which deletes them two marks a
grace period apart -- so a job must commit within half the grace period of its first
range (:func:`lsmstore.spark.stage.check_job_age`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence

from lsmstore import layout
from lsmstore.errors import ConflictError, UnavailableError
from lsmstore.graveler.apply import apply_changes
from lsmstore.graveler.commit import next_generation, write_commit
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID, store_metarange
from lsmstore.graveler.ranges import RangeInfo, RangePolicy
from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.source import DirectSource, RangeSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.tree import TreeReader
from lsmstore.refstore.base import Ref, RefStore
from lsmstore.storage.base import ObjectStore
from lsmstore.types import Commit
from lsmstore.versioning.context import RepoContext

ATTEMPTS = 10


def side_by_side(base: Sequence[RangeInfo], job: Sequence[RangeInfo]) -> list[RangeInfo] | None:
    """The base's and the job's ranges in one key order, or None when a job range
    overlaps a base range (both lists sorted and disjoint within themselves)."""
    merged = sorted([*base, *job], key=lambda r: r.min_key)
    for a, b in itertools.pairwise(merged):
        if b.min_key <= a.max_key:
            return None
    return merged


def prefix_end(prefix: bytes) -> bytes | None:
    """The least key above every key starting with ``prefix`` (None: no such key)."""
    p = prefix.rstrip(b"\xff")
    return p[:-1] + bytes([p[-1] + 1]) if p else None


def outer_prefixes(prefixes: Sequence[bytes]) -> list[bytes]:
    """``prefixes`` sorted, without those inside another one."""
    out: list[bytes] = []
    for p in sorted(set(prefixes)):
        if not out or not p.startswith(out[-1]):
            out.append(p)
    return out


async def _keys_under(
    source: RangeSource, tree: str, prefixes: Sequence[bytes]
) -> AsyncGenerator[bytes, None]:
    """The keys of ``tree`` under ``prefixes`` (disjoint, sorted), in key order."""
    reader = TreeReader(source, tree)
    for p in prefixes:
        async for rec in reader.seek(p, prefix_end(p)):
            if not rec.key.startswith(p):
                break
            yield rec.key


async def _replacing(
    job: AsyncIterator[Record], removed: AsyncIterator[bytes]
) -> AsyncIterator[Record]:
    """The job's records, with a tombstone for each ``removed`` key the job does not
    write (both sorted)."""
    gone = await anext(removed, None)
    async for rec in job:
        while gone is not None and gone < rec.key:
            yield tombstone(gone)
            gone = await anext(removed, None)
        if gone == rec.key:
            gone = await anext(removed, None)
        yield rec
    while gone is not None:
        yield tombstone(gone)
        gone = await anext(removed, None)


async def _records(objects: ObjectStore, ranges: Sequence[RangeInfo]) -> AsyncIterator[Record]:
    for r in ranges:
        key = layout.range_key(r.id)
        for rec in SSTReader(await objects.get(key), key):
            yield rec


async def job_tree(
    objects: ObjectStore,
    base_tree: str,
    ranges: Sequence[RangeInfo],
    policy: RangePolicy,
    *,
    replace: Sequence[bytes] = (),
    source: RangeSource | None = None,
) -> str:
    """The metarange ID of ``base_tree`` with the job's ranges (sorted, disjoint)
    applied, base keys under ``replace`` that the job does not write removed (module
    docstring)."""
    prefixes = outer_prefixes(replace)
    if not ranges and not prefixes:
        return base_tree
    source = source or DirectSource(objects)
    base = await source.metarange(base_tree)
    doomed = _keys_under(source, base_tree, prefixes)
    first_doomed = await anext(doomed, None)
    await doomed.aclose()
    if first_doomed is None:
        merged = side_by_side(base.ranges, ranges)
        if merged is not None:
            return base_tree if not ranges else await store_metarange(objects, merged)
    result = await apply_changes(
        source,
        objects,
        base_tree,
        _replacing(_records(objects, ranges), _keys_under(source, base_tree, prefixes)),
        policy,
        known_ranges=[r.id for r in ranges],
    )
    return result.metarange_id


async def commit_ranges(
    refstore: RefStore,
    objects: ObjectStore,
    repo: str,
    branch: str,
    ranges: Sequence[RangeInfo],
    *,
    message: str,
    policy: RangePolicy,
    committer: str,
    metadata: dict[str, str] | None = None,
    replace: Sequence[bytes] = (),
    source: RangeSource | None = None,
    before_swap: Callable[[str], Awaitable[None]] | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[str, Commit]:
    """Commit the job's ranges (sorted, disjoint) onto the branch's base (module
    docstring); the commit's id and the commit.  ``before_swap(commit_id)`` runs before
    each compare-and-swap (an import takes its point of no return there) and may raise
    to stop."""
    ctx = RepoContext(repo, refstore, objects, policy=policy, source=source)
    for _ in range(ATTEMPTS):
        ref: Ref = await refstore.get_ref(repo, branch)
        if not ref.is_branch:
            raise ConflictError(f"{repo}/{branch} is not a branch", found=ref)
        parents: tuple[str, ...] = ()
        base_tree = EMPTY_METARANGE_ID
        generation = 1
        if ref.base:
            base = await ctx.commit(ref.base)
            parents, base_tree, generation = (ref.base,), base.metarange_id, next_generation([base])
        tree = await job_tree(
            objects, base_tree, ranges, policy, replace=replace, source=ctx.source
        )
        commit = Commit(tree, parents, committer, message, int(clock()), metadata or {}, generation)
        commit_id = await write_commit(objects, commit)
        if before_swap is not None:
            await before_swap(commit_id)
        try:
            await refstore.set_base(repo, branch, expected_base=ref.base, new_base=commit_id)
            return commit_id, commit
        except ConflictError as e:
            if isinstance(e.found, Ref) and not e.found.is_branch:
                raise
        except UnavailableError as e:
            if not e.outcome_unknown:
                raise
            if (await refstore.get_ref(repo, branch)).base == commit_id:
                return commit_id, commit
    raise UnavailableError(f"{repo}/{branch}: the base kept moving; direct commit not made")


__all__ = ["commit_ranges", "job_tree", "side_by_side"]
