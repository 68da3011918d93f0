"""Reading a ref in parallel: a plan of key-interval partitions, and the read of one.

:func:`plan_scan` runs where the job is planned (the Spark driver).  It resolves the
ref, reads the base commit's metarange and -- on a branch -- the sidecars of its staged
files, and cuts the key space into partitions: consecutive committed ranges grouped up
to ``partition_bytes`` (by the ranges' estimated sizes), each partition owning the keys
from just after the previous group's last key up to its own last key (the last one is
unbounded).  A prefix keeps only the ranges the metarange says can hold it.  Each staged
file goes to every partition whose interval meets its key range.

:func:`scan_partition` runs on an executor: it opens the namespace's object store itself
(``file://`` or ``s3://``; no server in between), reads the partition's committed ranges
in order and its staged files, and merges them with the reader's precedence (L1 newest
first, then L2, then the base; the newest record of a key wins and tombstones hide it).

Plans and partitions are plain picklable values.  A plan is a snapshot: files it names
may be compacted or committed away while the job runs -- a read then fails with
``ObjectNotFoundError`` after the grace period (``compaction_grace_s``), and the job is
re-run; committed ranges are immutable and stay while the commit is kept.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass

from lsmstore import layout, refexpr
from lsmstore.graveler.commit import read_commit
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.graveler.ranges import RangeInfo
from lsmstore.graveler.record import Record, RecordTuple, as_record
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.namespace import location_of
from lsmstore.refstore.base import RefStore
from lsmstore.staging.files import SIDECAR_SUFFIX, SST_SUFFIX, decode_sidecar
from lsmstore.staging.merge import amerge_newest
from lsmstore.staging.reader import prefix_end
from lsmstore.storage.base import ObjectStore
from lsmstore.versioning.context import RepoContext

#: Default target of one partition: estimated bytes of committed records.
PARTITION_BYTES = 64 * 1024 * 1024
#: Staged files (or ranges) fetched at once.
FETCH_CONCURRENCY = 8


@dataclass(frozen=True)
class StagedFile:
    """One staged SST (object key in the namespace) and its key range."""

    key: str
    first_key: bytes
    last_key: bytes
    entries: int


@dataclass(frozen=True)
class ScanPartition:
    """Keys ``lo <= key < hi`` (``None``: unbounded) of committed ``ranges`` (in key
    order) under ``staged`` files (newest first)."""

    index: int
    namespace: str
    ranges: tuple[str, ...]
    staged: tuple[StagedFile, ...]
    lo: bytes | None
    hi: bytes | None
    estimated_bytes: int = 0


@dataclass(frozen=True)
class ScanPlan:
    repo: str
    namespace: str
    commit_id: str
    branch: str | None  # set when staged files are merged in
    partitions: tuple[ScanPartition, ...]
    committed_records: int  # in the selected ranges (an estimate with a prefix)


def _after(key: bytes) -> bytes:
    """The least key greater than ``key``."""
    return key + b"\x00"


async def _staged_files(
    objects: ObjectStore, branch: str, l1: Sequence[str], l2: Sequence[str]
) -> list[StagedFile]:
    """The branch's staged files, newest first (L1 newest first, then L2)."""
    wanted: list[tuple[layout.Level, str]] = [("L1", f) for f in reversed(l1)]
    wanted += [("L2", f) for f in l2]
    limit = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def one(level: layout.Level, entry: str) -> StagedFile:
        meta_key = layout.staging_key(branch, level, entry, SIDECAR_SUFFIX)
        async with limit:
            sc = decode_sidecar(await objects.get(meta_key), meta_key)
        key = layout.staging_key(branch, level, entry, SST_SUFFIX)
        return StagedFile(key, sc.first_key, sc.last_key, sc.entries)

    return list(await asyncio.gather(*(one(lv, f) for lv, f in wanted)))


def _groups(ranges: Sequence[RangeInfo], target: int) -> list[list[RangeInfo]]:
    groups: list[list[RangeInfo]] = []
    size = 0
    for r in ranges:
        if not groups or size >= target:
            groups.append([])
            size = 0
        groups[-1].append(r)
        size += r.size
    return groups


def partition_plan(
    namespace: str,
    ranges: Sequence[RangeInfo],
    staged: Sequence[StagedFile],
    *,
    prefix: bytes = b"",
    partition_bytes: int = PARTITION_BYTES,
    min_partitions: int = 1,
) -> tuple[list[ScanPartition], int]:
    """The partitions for ``ranges`` (a metarange, key order) under ``staged`` files:
    groups of up to ``partition_bytes``, smaller when that makes fewer than
    ``min_partitions`` (so every core gets a share; a range is never split)."""
    end = prefix_end(prefix) if prefix else None
    chosen = [r for r in ranges if r.max_key >= prefix and (end is None or r.min_key < end)]
    total = sum(r.size for r in chosen)
    target = min(partition_bytes, -(-total // max(1, min_partitions)))
    groups = _groups(chosen, max(1, target)) or [[]]
    parts: list[ScanPartition] = []
    lo: bytes | None = prefix or None
    for i, group in enumerate(groups):
        last = i == len(groups) - 1
        hi = end if last else _after(group[-1].max_key)
        if end is not None and hi is not None and hi > end:
            hi = end
        mine = tuple(
            f
            for f in staged
            if (lo is None or f.last_key >= lo) and (hi is None or f.first_key < hi)
        )
        parts.append(
            ScanPartition(
                i, namespace, tuple(r.id for r in group), mine, lo, hi, sum(r.size for r in group)
            )
        )
        lo = hi
    return parts, sum(r.count for r in chosen)


async def plan_scan(
    refstore: RefStore,
    objects: ObjectStore,
    repo: str,
    ref: str,
    *,
    prefix: bytes = b"",
    partition_bytes: int = PARTITION_BYTES,
    min_partitions: int = 1,
) -> ScanPlan:
    """Resolve ``ref`` in ``repo`` and cut its keys into partitions (module docstring).

    A bare branch name includes the branch's staged files; any other expression (tag,
    commit, ``main~1``) reads the commit alone.  RepositoryNotFoundError,
    RefNotFoundError, InvalidRefExpressionError as the client raises them.
    """
    info = await refstore.get_repository(repo)
    ctx = RepoContext(repo, refstore, objects, default_branch=info.default_branch)
    found = await refexpr.resolve(ctx, ref)
    staged: list[StagedFile] = []
    branch = found.branch
    commit_id = found.commit_id
    if branch is not None:
        value = found.ref if found.ref is not None else await refstore.get_ref(repo, branch)
        commit_id = value.base
        staged = await _staged_files(objects, branch, value.l1, value.l2)
    ranges: Sequence[RangeInfo] = ()
    if commit_id:
        commit = await read_commit(objects, commit_id)
        if commit.metarange_id != EMPTY_METARANGE_ID:
            ranges = (await DirectSource(objects).metarange(commit.metarange_id)).ranges
    parts, count = partition_plan(
        location_of(info),
        ranges,
        staged,
        prefix=prefix,
        partition_bytes=partition_bytes,
        min_partitions=min_partitions,
    )
    return ScanPlan(repo, location_of(info), commit_id, branch, tuple(parts), count)


async def _committed_blocks(
    objects: ObjectStore, range_ids: Sequence[str], lo: bytes | None
) -> AsyncIterator[tuple[Sequence[bytes], Sequence[RecordTuple]]]:
    """The decoded blocks of consecutive ranges from ``lo`` -- ``(keys, records)``, the
    first block's starting at ``lo`` --, fetching the next range while the current one
    is read."""
    if not range_ids:
        return

    async def fetch(rid: str) -> SSTReader:
        key = layout.range_key(rid)
        return SSTReader(await objects.get(key), key)

    nxt = asyncio.ensure_future(fetch(range_ids[0]))
    try:
        for i in range(len(range_ids)):
            reader = await nxt
            if i + 1 < len(range_ids):
                nxt = asyncio.ensure_future(fetch(range_ids[i + 1]))
            for start, (keys, records) in reader.blocks(lo or b""):
                yield (keys[start:], records[start:]) if start else (keys, records)
    finally:
        if not nxt.done():
            nxt.cancel()


async def _committed(
    objects: ObjectStore, range_ids: Sequence[str], lo: bytes | None
) -> AsyncIterator[Record]:
    """The records of consecutive ranges from ``lo`` (:func:`_committed_blocks`)."""
    async for _, records in _committed_blocks(objects, range_ids, lo):
        for rec in records:
            yield as_record(rec)


async def scan_partition(objects: ObjectStore, part: ScanPartition) -> AsyncIterator[Record]:
    """The live records of ``part`` in key order (module docstring)."""
    limit = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def fetch(f: StagedFile) -> SSTReader:
        async with limit:
            return SSTReader(await objects.get(f.key), f.key)

    readers = await asyncio.gather(*(fetch(f) for f in part.staged))
    staged: list[Iterator[Record]] = [r.seek(part.lo or b"") for r in readers]
    hi = part.hi
    async for rec in amerge_newest([*staged, _committed(objects, part.ranges, part.lo)]):
        if hi is not None and rec.key >= hi:
            break
        if rec.value is not None:
            yield rec


async def scan_partition_chunks(
    objects: ObjectStore, part: ScanPartition, rows: int
) -> AsyncIterator[list[RecordTuple]]:
    """:func:`scan_partition` in lists of ``rows`` records (the last one shorter), as
    plain record tuples.  A partition without staged files is read a decoded block at
    a time, with no Python step per record but the tombstone filter (committed ranges
    hold none; a foreign file might)."""
    chunk: list[RecordTuple] = []
    if part.staged:
        async for rec in scan_partition(objects, part):
            chunk.append(rec)
            if len(chunk) >= rows:
                yield chunk
                chunk = []
    else:
        hi = part.hi
        async for keys, records in _committed_blocks(objects, part.ranges, part.lo):
            if not keys:  # lo is past this block's keys
                continue
            if hi is not None and keys[-1] >= hi:  # the partition ends in this block
                chunk += [r for r in records[: bisect_left(keys, hi)] if r[2] is not None]
                break
            chunk += [r for r in records if r[2] is not None]
            while len(chunk) >= rows:
                yield chunk[:rows]
                chunk = chunk[rows:]
    while len(chunk) > rows:
        yield chunk[:rows]
        chunk = chunk[rows:]
    if chunk:
        yield chunk
