"""The merged view of a branch: newest L1 -> ... -> oldest L1 -> L2 -> base tree.

A :class:`Snapshot` is one ref value with its staging files' sidecars at hand; all reads
through it see exactly that value.  :class:`BranchView` makes a snapshot per read from
a ref fetched after the read began (:mod:`lsmstore.staging.refcache`), so a read sees
every write acknowledged before it began, by any process.

Skipping: a staging file whose sidecar (key range, bloom filter) excludes a key is not
fetched.  Sidecars are kept decoded in RAM (:class:`SidecarCache`); SSTs and commits go
through the shared file cache.  Files a read needs that are not cached are fetched in
parallel.  A file garbage-collected under a reader (ObjectNotFoundError) makes the read
fetch the ref again and retry once.

Listing merges every layer in key order, newest record per key, and drops tombstones in
memory: staging files are whole SSTs held in the cache, so a run of tombstones costs no
request per tombstone; and an L2 file's covered spans over the snapshot's base
(:mod:`lsmstore.compaction.coverage`) are skipped with one seek of L2 and the base
each, so a prefix whose keys are nearly all deleted does not cost a walk over the
deleted keys.  ``delimiter`` folds keys into common prefixes (like ``ls``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from lsmstore import layout
from lsmstore.errors import InvalidInputError, ObjectNotFoundError
from lsmstore.graveler.commit import read_commit
from lsmstore.graveler.metarange import Metarange
from lsmstore.graveler.record import Record
from lsmstore.graveler.source import RangeSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.tree import TreeReader
from lsmstore.layout import Level
from lsmstore.refstore.base import Ref
from lsmstore.staging.files import (
    SIDECAR_SUFFIX,
    SST_SUFFIX,
    BloomProbe,
    Sidecar,
    bloom_data,
    bloom_shape,
    decode_sidecar,
)
from lsmstore.staging.merge import amerge_newest
from lsmstore.staging.refcache import RefCache
from lsmstore.storage.base import ObjectStore
from lsmstore.tasks import retrieve_exception
from lsmstore.types import Entry

T = TypeVar("T")


class FileCacheLike(Protocol):
    """What the reader needs of ``lsmstore.cache.FileCache``."""

    async def get(
        self, store: ObjectStore, key: str, parse: Callable[[bytes, str], T], *, kind: str = ...
    ) -> T: ...


def _parse_sidecar(data: bytes, name: str) -> Sidecar:
    return decode_sidecar(data, name)


#: Decoded data blocks kept per staging-file reader: 4096 blocks of 4 KiB hold a whole
#: 16 MiB file (L2 files aim at 8 MiB), so a warm point read is a dict hit and a bisect.
STAGING_BLOCK_CACHE = 4096


#: Readers a :class:`Snapshot` keeps for warm point reads (files and ranges together).
WARM_READERS = 16


def _parse_sst(data: bytes, name: str) -> SSTReader:
    return SSTReader(data, name, block_cache_size=STAGING_BLOCK_CACHE)


class SidecarCache:
    """Decoded sidecars by object key, LRU-bounded by count; shared by a store's readers."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[tuple[str, str], Sidecar] = OrderedDict()
        self.fetches = 0

    def peek(self, store: ObjectStore, key: str) -> Sidecar | None:
        return self._items.get((store.url, key))

    def put(self, store: ObjectStore, key: str, sc: Sidecar) -> None:
        k = (store.url, key)
        self._items[k] = sc
        self._items.move_to_end(k)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)


@dataclass(frozen=True, slots=True)
class StagingFile:
    id: str
    level: Level
    sidecar: Sidecar
    key: str  # object key of the SST


class Files:
    """Fetches one repository's files: staging sidecars and SSTs, commits, base trees."""

    def __init__(
        self,
        objects: ObjectStore,
        cache: FileCacheLike,
        source: RangeSource,
        sidecars: SidecarCache,
    ) -> None:
        self.objects = objects
        self.cache = cache
        self.source = source
        self.sidecars = sidecars
        self._peek: Callable[..., Any] | None = getattr(cache, "peek", None)
        self._trees: OrderedDict[str, TreeReader | None] = OrderedDict()

    async def staging_files(
        self, branch: str, level: Level, ids: Sequence[str]
    ) -> list[StagingFile]:
        """The sidecars of ``ids`` (in the given order), fetching missing ones in parallel."""
        out: list[StagingFile | None] = []
        missing: list[tuple[int, str, str]] = []
        for i, fid in enumerate(ids):
            key = layout.staging_key(branch, level, fid, SIDECAR_SUFFIX)
            sc = self.sidecars.peek(self.objects, key)
            if sc is None:
                missing.append((i, fid, key))
                out.append(None)
            else:
                out.append(StagingFile(fid, level, sc, key[: -len(SIDECAR_SUFFIX)] + SST_SUFFIX))
        if missing:
            found = await asyncio.gather(
                *(
                    self.cache.get(self.objects, key, _parse_sidecar, kind="meta")
                    for _, _, key in missing
                )
            )
            self.sidecars.fetches += len(missing)
            for (i, fid, key), sc in zip(missing, found, strict=True):
                self.sidecars.put(self.objects, key, sc)
                out[i] = StagingFile(fid, level, sc, key[: -len(SIDECAR_SUFFIX)] + SST_SUFFIX)
        return [f for f in out if f is not None]

    def peek_sst(self, f: StagingFile) -> SSTReader | None:
        if self._peek is None:
            return None
        found: SSTReader | None = self._peek(self.objects, f.key, kind="sst")
        return found

    def peek_range(self, range_id: str) -> SSTReader | None:
        """The parsed committed range ``range_id`` if the file cache holds it in RAM
        (the entry :class:`~lsmstore.graveler.source.CachedSource` fills), else None.
        A range read through here keeps up to :data:`STAGING_BLOCK_CACHE` decoded
        blocks, like a staging file."""
        if self._peek is None:
            return None
        found: SSTReader | None = self._peek(self.objects, layout.RANGES + range_id, kind="sst")
        if found is not None:
            found.grow_block_cache(STAGING_BLOCK_CACHE)
        return found

    async def sst(self, f: StagingFile) -> SSTReader:
        reader = self.peek_sst(f)
        if reader is None:
            reader = await self.cache.get(self.objects, f.key, _parse_sst, kind="sst")
        return reader

    async def tree(self, base: str) -> TreeReader | None:
        """The base tree of a commit id (None for ``""``: no commit yet)."""
        if not base:
            return None
        if base in self._trees:
            self._trees.move_to_end(base)
            return self._trees[base]
        commit = await read_commit(self.objects, base, cache=self.cache)
        tree = TreeReader(self.source, commit.metarange_id)
        self._trees[base] = tree
        while len(self._trees) > 256:
            self._trees.popitem(last=False)
        return tree


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: none)."""
    p = prefix.rstrip(b"\xff")
    if not p:
        return None
    return p[:-1] + bytes((p[-1] + 1,))


def _l2_chain(files: Sequence[tuple[StagingFile, SSTReader]], start: bytes) -> Iterator[Record]:
    for _, reader in files:
        yield from reader.seek(start)


class Snapshot:
    """One ref value with its staging files resolved: a consistent read-only view."""

    __slots__ = (
        "_plan",
        "_ranges",
        "_readers",
        "_shapes",
        "_warm",
        "files",
        "l1",
        "l2",
        "metarange",
        "ref",
        "staging",
        "tree",
    )

    def __init__(
        self,
        ref: Ref,
        files: Files,
        l1: list[StagingFile],
        l2: list[StagingFile],
        tree: TreeReader | None,
        metarange: Metarange | None = None,
    ) -> None:
        self.ref = ref
        self.files = files
        self.l1 = l1  # newest first
        self.l2 = l2  # in key order (non-overlapping)
        self.staging = l1 + l2  # the order a point read consults them
        self.tree = tree
        self.metarange = metarange  # the tree's, once loaded
        # what a warm point read tests per staging file, in order; filters of one
        # shape share the key's bit positions (index into _shapes)
        shapes: dict[tuple[int, int], int] = {}
        self._shapes: list[Any] = []
        self._plan: list[tuple[bytes, bytes, Any, int, StagingFile]] = []
        for f in self.staging:
            sc = f.sidecar
            bloom = sc.bloom
            dims = (bloom.num_slices, bloom.bits_per_slice)
            i = shapes.get(dims)
            if i is None:
                i = shapes[dims] = len(self._shapes)
                self._shapes.append(bloom_shape(bloom))
            self._plan.append((sc.first_key, sc.last_key, bloom.bitarray, i, f))
        # The readers a warm point read found in the file cache, per staging file (by
        # its place in the plan) and per committed range: peeked once per snapshot
        # instead of once per read (the cache's key tuple, LRU move and counter cost
        # ~0.4 us a read).  A snapshot lives until the branch's ref changes -- a quiet
        # branch's for hours --, so it keeps at most WARM_READERS of them (then forgets
        # them all and starts again): the files beyond the cache's eviction it holds
        # are that many, not every file and range it ever read.
        self._readers: list[SSTReader | None] = [None] * len(self._plan)
        self._ranges: dict[str, SSTReader] = {}
        self._warm = 0

    @classmethod
    async def load(cls, ref: Ref, files: Files, branch: str) -> Snapshot:
        """Fetch what a read of ``ref`` needs, independent pieces in parallel: the
        sidecars of L1 and L2, and the base commit followed by its metarange (which
        does not wait for the sidecars)."""

        async def base() -> tuple[TreeReader | None, Metarange | None]:
            tree = await files.tree(ref.base)
            return tree, (await tree.metarange() if tree is not None else None)

        l1, l2, (tree, metarange) = await asyncio.gather(
            files.staging_files(branch, "L1", ref.l1[::-1]),
            files.staging_files(branch, "L2", ref.l2),
            base(),
        )
        l2.sort(key=lambda f: f.sidecar.first_key)
        return cls(ref, files, l1, l2, tree, metarange)

    # --- point reads ------------------------------------------------------------------

    def lookup_cached(self, key: bytes) -> tuple[Record | None, bool] | None:
        """What :meth:`lookup` returns, when every file it needs is in RAM; else None
        (then call :meth:`lookup`).  No await: a warm read does not yield."""
        shapes = self._shapes
        positions: list[Sequence[int] | None] = [None] * len(shapes)
        data = bloom_data(key)
        readers = self._readers
        for n, (first, last, bits, si, f) in enumerate(self._plan):
            if key < first or key > last:
                continue
            pos = positions[si]
            if pos is None:
                pos = positions[si] = shapes[si].positions(data)
            for p in pos:
                if not bits[p]:
                    break
            else:  # every bit set: the file may hold the key
                reader = readers[n]
                if reader is None:
                    reader = self.files.peek_sst(f)
                    if reader is None:
                        return None
                    self._keep()
                    readers[n] = reader
                rec = reader.get(key)
                if rec is not None:
                    return rec, True
        if self.tree is None:
            return None, False
        mr = self.metarange
        if mr is None:
            return None
        info = mr.find(key)
        if info is None:
            return None, False
        reader = self._ranges.get(info.id)
        if reader is None:
            reader = self.files.peek_range(info.id)
            if reader is None:
                return None
            self._keep()
            self._ranges[info.id] = reader
        rec = reader.get(key)
        if rec is not None and rec.value is None:
            return None  # a corrupt range: lookup() raises the error
        return rec, False

    def _keep(self) -> None:
        """Make room for one more warm reader (see ``__init__``)."""
        if self._warm >= WARM_READERS:
            readers = self._readers
            readers[:] = [None] * len(readers)  # in place: lookup_cached holds the list
            self._ranges.clear()
            self._warm = 0
        self._warm += 1

    async def lookup(self, key: bytes) -> tuple[Record | None, bool]:
        """``(record, staged)``: the newest record of ``key`` (a tombstone is returned
        as such) and whether it came from a staging file.  ``(None, False)``: absent."""
        probe = BloomProbe(key)
        files = self.files
        for f in self.staging:
            sc = f.sidecar
            if key < sc.first_key or key > sc.last_key or not probe.test(sc.bloom):
                continue
            reader = files.peek_sst(f)
            if reader is None:
                reader = await files.sst(f)
            rec = reader.get(key)
            if rec is not None:
                return rec, True
        if self.tree is not None:
            if self.metarange is None:
                self.metarange = await self.tree.metarange()
            return await self.tree.get(key), False
        return None, False

    # --- listing ----------------------------------------------------------------------

    def covered(self, start: bytes, end: bytes | None) -> list[tuple[bytes, bytes | None]]:
        """The covered spans ``(lo, stop)`` (``lo <= key < stop``, None: no bound) of
        this snapshot's L2 files over its base that meet ``[start, end)``, in key
        order (lsmstore.compaction.coverage): L2 and the base hold nothing live in
        them.  A span reaching past its file's last key is cut at the next L2 file's
        first key (the file vouches for no other file)."""
        base = self.ref.base
        l2 = self.l2
        out: list[tuple[bytes, bytes | None]] = []
        for i, f in enumerate(l2):
            sc = f.sidecar
            if not sc.covered or sc.base != base or not sc.overlaps(start, end):
                continue
            after = l2[i + 1].sidecar.first_key if i + 1 < len(l2) else None
            for lo, stop in sc.covered:
                bound: bytes | None = stop or None
                if after is not None and (bound is None or after < bound):
                    bound = after
                if (bound is None or bound > start) and (end is None or lo < end):
                    out.append((lo, bound))
        return out

    async def scan(self, start: bytes, end: bytes | None) -> AsyncIterator[Record]:
        """Every newest record with ``start <= key < end``: tombstones included, except
        those of L2 inside covered spans (:meth:`covered`), which are skipped whole."""
        files = self.files
        l1 = [f for f in self.l1 if f.sidecar.overlaps(start, end)]
        spans = self.covered(start, end)
        if spans:
            l1_readers = await asyncio.gather(*(files.sst(f) for f in l1))
            async for rec in amerge_newest(
                [*(r.seek(start) for r in l1_readers), self._uncovered(start, end, spans)]
            ):
                if end is not None and rec.key >= end:
                    return
                yield rec
            return
        l2 = [f for f in self.l2 if f.sidecar.overlaps(start, end)]
        readers = await asyncio.gather(*(files.sst(f) for f in itertools.chain(l1, l2)))
        sources: list[Iterable[Record] | AsyncIterator[Record]] = [
            r.seek(start) for r in readers[: len(l1)]
        ]
        if l2:
            sources.append(_l2_chain(list(zip(l2, readers[len(l1) :], strict=True)), start))
        if self.tree is not None:
            sources.append(self.tree.seek(start))
        async for rec in amerge_newest(sources):
            if end is not None and rec.key >= end:
                return
            yield rec

    async def _uncovered(
        self, start: bytes, end: bytes | None, spans: Sequence[tuple[bytes, bytes | None]]
    ) -> AsyncIterator[Record]:
        """L2 merged over the base, newest record per key in ``[start, end)``, outside
        ``spans`` (covered spans in key order): each stretch between two spans is a
        fresh seek of both, so a span costs no record read, and an L2 file is fetched
        only when a stretch meets it."""
        files = self.files
        pos = start
        last: list[tuple[bytes | None, bytes | None]] = [(None, None)]
        for lo, after in itertools.chain(spans, last):
            stop = end if lo is None else (lo if end is None or lo < end else end)
            if stop is None or pos < stop:
                sources: list[Iterable[Record] | AsyncIterator[Record]] = []
                l2 = [f for f in self.l2 if f.sidecar.overlaps(pos, stop)]
                if l2:
                    readers = await asyncio.gather(*(files.sst(f) for f in l2))
                    sources.append(_l2_chain(list(zip(l2, readers, strict=True)), pos))
                if self.tree is not None:
                    sources.append(self.tree.seek(pos, stop))
                async with contextlib.aclosing(amerge_newest(sources)) as merged:
                    async for rec in merged:
                        if stop is not None and rec.key >= stop:
                            break
                        yield rec
            if lo is None or after is None or (end is not None and after >= end):
                return
            pos = max(pos, after)

    async def list(
        self,
        prefix: bytes = b"",
        *,
        after: bytes | None = None,
        limit: int | None = None,
        delimiter: bytes | None = None,
    ) -> AsyncIterator[Entry]:
        """Live keys starting with ``prefix``, in key order, strictly after ``after``, at
        most ``limit`` entries; with ``delimiter``, keys holding it past the prefix are
        folded into one common-prefix entry each (counted against ``limit``)."""
        if limit is not None and limit < 0:
            raise InvalidInputError(f"list limit must be >= 0, got {limit}")
        if delimiter is not None and not delimiter:
            raise InvalidInputError("list delimiter must be non-empty")
        end = prefix_end(prefix) if prefix else None
        start = prefix
        if after is not None and after >= start:
            start = after + b"\x00"
        count = 0
        if limit == 0:
            return
        plen = len(prefix)
        while True:
            restart: bytes | None = None
            async for rec in self.scan(start, end):
                if rec.value is None:
                    continue
                key = rec.key
                if delimiter is not None:
                    i = key.find(delimiter, plen)
                    if i >= 0:
                        cp = key[: i + len(delimiter)]
                        if after is None or cp > after:
                            yield Entry(cp, common_prefix=True)
                            count += 1
                            if limit is not None and count >= limit:
                                return
                        restart = prefix_end(cp)
                        break
                yield Entry(key, len(rec.value), rec.identity, False, rec.value)
                count += 1
                if limit is not None and count >= limit:
                    return
            if restart is None:
                return
            start = restart


class BranchView:
    """Reads of one branch, each through a snapshot of a ref fetched after it began."""

    def __init__(self, repo: str, branch: str, files: Files, refs: RefCache) -> None:
        self.repo = repo
        self.branch = branch
        self.files = files
        self.refs = refs
        self._last: Snapshot | None = None
        self._loading: tuple[Ref, asyncio.Future[Snapshot]] | None = None

    async def snapshot(self, ref: Ref | None = None) -> Snapshot:
        """A snapshot of ``ref`` -- a value of this branch the caller fetched through
        :attr:`refs` after its read began -- or of a value fetched now."""
        if ref is None:
            ref = await self.refs.get(self.repo, self.branch)
        last = self._last
        if last is not None and (last.ref is ref or last.ref == ref):
            return last
        return await self._load(ref)

    async def _load(self, ref: Ref) -> Snapshot:
        """:meth:`Snapshot.load` of ``ref``; the reads that wait on one ref fetch wake
        together and would each load the same value (O(L1) each), so concurrent loads
        of an equal ref share one task (shielded: one reader cancelled does not cancel
        the others' load)."""
        loading = self._loading
        if loading is not None and (loading[0] is ref or loading[0] == ref):
            return await asyncio.shield(loading[1])
        task = asyncio.ensure_future(Snapshot.load(ref, self.files, self.branch))
        task.add_done_callback(retrieve_exception)
        self._loading = (ref, task)
        try:
            snap = await asyncio.shield(task)
        finally:
            if self._loading is not None and self._loading[1] is task:
                self._loading = None
        self._last = snap
        return snap

    async def retrying(self, op: Callable[[Snapshot], Awaitable[T]]) -> T:
        """Run ``op`` on a fresh snapshot; on ObjectNotFoundError (a file collected under
        us), once more on a snapshot of a ref fetched after the failure."""
        snap = await self.snapshot()
        try:
            return await op(snap)
        except ObjectNotFoundError:
            self._last = None
            return await op(await self.snapshot())

    async def lookup(self, key: bytes, ref: Ref | None = None) -> tuple[Record | None, bool]:
        """:meth:`Snapshot.lookup` on a fresh snapshot; ``ref`` as in :meth:`snapshot`."""
        if ref is None:
            ref = await self.fresh_ref()
        found = self.lookup_cached(ref, key)
        return found if found is not None else await self.lookup_at(ref, key)

    # The hot path of ``get`` is the three steps of :meth:`lookup` inlined in the
    # caller's coroutine: one await for the ref, and none more when the files the key
    # needs are in RAM.

    def fresh_ref(self) -> asyncio.Future[Ref]:
        """The future of a ref value fetched after this call (read-your-writes)."""
        return self.refs.get(self.repo, self.branch)

    def lookup_cached(self, ref: Ref, key: bytes) -> tuple[Record | None, bool] | None:
        """:meth:`Snapshot.lookup_cached` on the snapshot of ``ref`` if it is at hand;
        None: call :meth:`lookup_at`."""
        snap = self._last
        if snap is None:
            return None
        if snap.ref is not ref:
            if snap.ref != ref:
                return None
            # The same value fetched again: keep the newest object, so the reads
            # sharing its fetch compare identities, not the file lists.
            snap.ref = ref
        return snap.lookup_cached(key)

    async def lookup_at(self, ref: Ref, key: bytes) -> tuple[Record | None, bool]:
        """:meth:`Snapshot.lookup` on the snapshot of ``ref`` (loaded if need be); a
        file collected under the read makes it retry once on a fresh snapshot."""
        snap = self._last
        if snap is None or (snap.ref is not ref and snap.ref != ref):
            snap = await self._load(ref)
        try:
            return await snap.lookup(key)
        except ObjectNotFoundError:
            self._last = None
            return await (await self.snapshot()).lookup(key)

    async def list(
        self,
        prefix: bytes = b"",
        *,
        after: bytes | None = None,
        limit: int | None = None,
        delimiter: bytes | None = None,
        ref: Ref | None = None,
    ) -> AsyncIterator[Entry]:
        """Like :meth:`Snapshot.list` (``ref`` as in :meth:`snapshot`); a file collected
        mid-listing makes it resume after the last entry on a fresh snapshot (once)."""
        snap = await self.snapshot(ref)
        last: bytes | None = after
        count = 0
        retried = False
        while True:
            try:
                async for e in snap.list(
                    prefix,
                    after=last,
                    limit=None if limit is None else limit - count,
                    delimiter=delimiter,
                ):
                    last = e.key
                    count += 1
                    yield e
                return
            except ObjectNotFoundError:
                if retried:
                    raise
                retried = True
                self._last = None
                snap = await self.snapshot()
