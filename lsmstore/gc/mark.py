"""The mark phase: what a repository's storage namespace holds, and what of it is live.

A mark first **lists** the namespace's collectable objects -- commits
(``_lsm/commits/``), ranges and metaranges (``_lsm/ranges/``), staging files
(``_lsm/staging/``), object data (``data/``) and the objects layer's garbage-candidate
records (``_lsm/gc-data/``, :mod:`lsmstore.gc.data`) -- and only **then** reads
the references, so an object written after the listing is never a candidate of this mark.
Live ("reachable") are:

* the commits :func:`~lsmstore.gc.retention.kept_commits` keeps from the branches'
  heads and the tags' targets, their metaranges, and the ranges those list;
* the staging files named by a ref or a workspace (qualified entries resolved), listed
  between two reads of the repository's move count (:func:`lsmstore.gc.staging.
  referenced_files`);
* every ``data/`` object an object entry in a kept range or a live staging file points
  at (relative addresses; entries that are not object entries reference nothing).

``candidates`` are the listed objects that are not live.  A candidate record is never
live (nothing refers to it): the data it names is judged by reachability like any
listed ``data/`` object (the full listing also finds data whose record a crash lost),
and the record goes with the same two-mark rule, in the sweep right after the data.

A namespace whose repository no longer exists contributes its staging files only
(:func:`mark_orphaned_staging`): the rest of a storage namespace belongs to its owner.
Reading ranges is the expensive part; ``read_ranges`` lets a caller spread it (the Spark
job reads them on executors).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from lsmstore import layout
from lsmstore.errors import CorruptFileError, ObjectNotFoundError
from lsmstore.gc.retention import Retention, kept_commits
from lsmstore.gc.staging import referenced_files
from lsmstore.graveler.commit import read_commit
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.namespace import outside_nested
from lsmstore.objects.entry import decode_entry
from lsmstore.refstore.base import RefStore, Repository
from lsmstore.staging.files import SIDECAR_SUFFIX, SST_SUFFIX, new_file_id
from lsmstore.storage.base import ObjectStore
from lsmstore.types import Commit

#: The object areas a mark lists (everything else of a namespace is never collected).
AREAS = (layout.COMMITS, layout.RANGES, layout.STAGING, layout.DATA, layout.DATA_GC)
READ_CONCURRENCY = 8
#: Tries to read the live staging files while compactions replace them.
STAGING_ATTEMPTS = 5

ReadRanges = Callable[[list[str]], Awaitable[set[str]]]


@dataclass
class Mark:
    """One mark of one namespace (the candidates are what matters for a sweep)."""

    mark_id: str
    repo: str
    namespace: str
    started: float
    listed: int = 0
    kept_commits: int = 0
    live: int = 0
    candidates: set[str] = field(default_factory=set)


def data_keys(records: Iterable[tuple[bytes, bytes | None]]) -> set[str]:
    """The ``data/`` keys object entries among ``(key, value)`` records point at."""
    out: set[str] = set()
    for _key, value in records:
        if value is None:
            continue
        try:
            entry = decode_entry(value, "")
        except CorruptFileError:
            continue  # a raw value: references nothing
        if entry.is_relative() and entry.address.startswith(layout.DATA):
            out.add(entry.address)
    return out


async def read_ranges_locally(objects: ObjectStore, range_ids: list[str]) -> set[str]:
    """The ``data/`` keys the entries of ``range_ids`` point at, read here."""
    limit = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(rid: str) -> set[str]:
        key = layout.range_key(rid)
        async with limit:
            data = await objects.get(key)
        return await asyncio.to_thread(
            lambda: data_keys((r.key, r.value) for r in SSTReader(data, key))
        )

    out: set[str] = set()
    for s in await asyncio.gather(*(one(r) for r in range_ids)):
        out |= s
    return out


async def list_keys(objects: ObjectStore, areas: Iterable[str] = AREAS) -> set[str]:
    """The keys of ``areas``, except those of a namespace nested inside one (another
    repository's: :func:`lsmstore.namespace.outside_nested`)."""
    keys: set[str] = set()
    for prefix in areas:
        async for meta in objects.list(prefix):
            keys.add(meta.key)
    return outside_nested(keys)


async def _heads(refstore: RefStore, repo: str, retention: Retention) -> list[tuple[str, float]]:
    heads: list[tuple[str, float]] = []
    after: str | None = None
    while page := await refstore.list_refs(repo, after=after, limit=1000):
        for name, ref in page:
            heads.append((ref.base, retention.days(name if ref.is_branch else None)))
        after = page[-1][0]
    return heads


async def _live_staging(
    refstore: RefStore, repo: str, objects: ObjectStore
) -> tuple[set[str], set[str]]:
    """Keys of the live staging files and the data keys their entries point at."""
    for attempt in range(STAGING_ATTEMPTS):
        held = await referenced_files(refstore, repo)
        if held is None:
            raise RuntimeError(f"{repo}: workspaces kept moving files; mark again later")
        keys: set[str] = set()
        ssts: list[str] = []
        for branch, files in held.items():
            for level, fid in files:
                sst = layout.staging_key(branch, level, fid, SST_SUFFIX)
                keys |= {sst, layout.staging_key(branch, level, fid, SIDECAR_SUFFIX)}
                ssts.append(sst)
        try:
            data = await _data_of_files(objects, ssts)
        except ObjectNotFoundError:
            if attempt + 1 == STAGING_ATTEMPTS:
                raise
            continue  # compacted or committed meanwhile: the refs name other files now
        return keys, data
    raise AssertionError("unreachable")


async def _data_of_files(objects: ObjectStore, keys: list[str]) -> set[str]:
    limit = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(key: str) -> set[str]:
        async with limit:
            data = await objects.get(key)
        return await asyncio.to_thread(
            lambda: data_keys((r.key, r.value) for r in SSTReader(data, key))
        )

    out: set[str] = set()
    for s in await asyncio.gather(*(one(k) for k in keys)):
        out |= s
    return out


async def mark_repository(
    refstore: RefStore,
    repo: Repository,
    objects: ObjectStore,
    retention: Retention,
    *,
    clock: Callable[[], float] = time.time,
    read_ranges: ReadRanges | None = None,
) -> Mark:
    """List ``repo``'s namespace, then find what is live (module docstring)."""
    started = clock()
    mark = Mark(new_file_id(clock), repo.name, repo.storage_namespace, started)
    listed = await list_keys(objects)
    mark.listed = len(listed)

    staging_live, data_live = await _live_staging(refstore, repo.name, objects)
    commits: dict[str, Commit] = {}

    async def load(cid: str) -> Commit:
        c = commits.get(cid)
        if c is None:
            c = commits[cid] = await read_commit(objects, cid)
        return c

    kept = await kept_commits(await _heads(refstore, repo.name, retention), load, started)
    mark.kept_commits = len(kept)
    live = set(staging_live)
    source = DirectSource(objects)
    range_ids: set[str] = set()
    for cid in kept:
        live.add(layout.commit_key(cid))
        mr_id = (await load(cid)).metarange_id
        if mr_id == EMPTY_METARANGE_ID:
            continue
        live.add(layout.range_key(mr_id))
        for info in await source.metarange(mr_id):
            range_ids.add(info.id)
    live |= {layout.range_key(r) for r in range_ids}
    reader = read_ranges or (lambda ids: read_ranges_locally(objects, ids))
    data_live |= await reader(sorted(range_ids))
    live |= data_live
    mark.live = len(live)
    mark.candidates = listed - live
    return mark


async def mark_orphaned_staging(
    repo: str, namespace: str, objects: ObjectStore, *, clock: Callable[[], float] = time.time
) -> Mark:
    """A namespace whose repository is gone: every staging file is a candidate."""
    started = clock()
    mark = Mark(new_file_id(clock), repo, namespace, started)
    mark.candidates = await list_keys(objects, (layout.STAGING,))
    mark.listed = len(mark.candidates)
    return mark
