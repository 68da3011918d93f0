"""The merged view: newest L1 -> oldest L1 -> L2 -> base, tombstones, skipping by key
range and bloom filter, listing with prefix/after/limit/delimiter."""

from __future__ import annotations

import asyncio
import gc
import random
import weakref
from pathlib import Path
from typing import Any

import pytest
from helpers.staging import BRANCH, REPO, DirectCache, commit_tree, embedded_refstore, rec

from lsmstore import layout
from lsmstore.errors import InvalidInputError
from lsmstore.graveler.commit import read_commit
from lsmstore.graveler.record import Record
from lsmstore.graveler.source import CachedSource
from lsmstore.refstore.base import Ref, RefStore
from lsmstore.staging.files import encode_staging_file, new_file_id
from lsmstore.staging.reader import (
    WARM_READERS,
    BranchView,
    Files,
    SidecarCache,
    Snapshot,
    prefix_end,
)
from lsmstore.staging.refcache import RefCache
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore


async def stage(objects: ObjectStore, level: str, records: list[Record]) -> str:
    fid = new_file_id()
    sst, meta, _ = encode_staging_file(sorted(records), 0.01)
    await objects.put(layout.staging_key(BRANCH, level, fid, ".meta"), meta)  # type: ignore[arg-type]
    await objects.put(layout.staging_key(BRANCH, level, fid), sst)  # type: ignore[arg-type]
    return fid


def files_of(objects: ObjectStore) -> Files:
    cache = DirectCache()
    return Files(objects, cache, CachedSource(objects, cache), SidecarCache(1000))


async def layered(objects: ObjectStore) -> Ref:
    """base: k0..k9=base; L2: k1,k2 (k2 deleted); L1 old: k3, new k11; L1 new: k1, k3 deleted."""
    base = await commit_tree(objects, [rec(f"k{i}", b"base") for i in range(10)])
    l2 = await stage(objects, "L2", [rec("k1", b"l2"), rec("k2", None)])
    old = await stage(objects, "L1", [rec("k3", b"old"), rec("k11", b"old")])
    new = await stage(objects, "L1", [rec("k1", b"new"), rec("k3", None)])
    return Ref("branch", base, (l2,), (old, new))


async def test_lookup_newest_layer_wins() -> None:
    objects = MemoryStore()
    ref = await layered(objects)
    snap = await Snapshot.load(ref, files_of(objects), BRANCH)
    expect = {
        b"k0": (b"base", False),
        b"k1": (b"new", True),
        b"k2": (None, True),  # tombstone in L2 hides the base
        b"k3": (None, True),  # newer tombstone hides the older L1 value
        b"k11": (b"old", True),
        b"k9": (b"base", False),
        b"zz": (None, False),
    }
    for key, (value, staged) in expect.items():
        got, was_staged = await snap.lookup(key)
        assert (None if got is None else got.value, was_staged) == (value, staged), key
    # listing agrees
    assert [(e.key, e.size) for e in [e async for e in snap.list()]] == [
        (b"k0", 4),
        (b"k1", 3),
        (b"k11", 3),
        *[(b"k%d" % i, 4) for i in range(4, 10)],
    ]


async def test_files_excluded_by_sidecar_are_not_fetched() -> None:
    inner = MemoryStore()
    objects = FaultyStore(inner)
    rng = random.Random(1)
    # 20 L1 files over the same key range, disjoint keys: key range cannot skip, bloom can
    ids = []
    keys_of = []
    for i in range(20):
        keys = [b"key%06d-%d" % (n, i) for n in rng.sample(range(10**6), 200)]
        keys_of.append(keys)
        ids.append(await stage(objects, "L1", [rec(k, b"v%d" % i) for k in keys]))
    # plus 5 files outside the key range
    for i in range(5):
        ids.append(await stage(objects, "L1", [rec(b"zzz%d" % i, b"far")]))
    snap = await Snapshot.load(Ref("branch", "", (), tuple(ids)), files_of(objects), BRANCH)

    def sst_gets() -> int:
        return sum(1 for op, k in objects.log if op == "get" and k.endswith(".sst"))

    for i in (0, 7, 19):
        before = sst_gets()
        got, staged = await snap.lookup(keys_of[i][5])
        assert got is not None and got.value == b"v%d" % i and staged
        # its own file, plus another only on a bloom false positive (1% each)
        assert 1 <= sst_gets() - before <= 2
    before = sst_gets()
    misses = [b"key%06d-x" % n for n in range(0, 10**6, 10**4)]  # in range, absent
    for key in misses:
        got, _ = await snap.lookup(key)
        assert got is None
    # 100 misses x 20 candidate files: ~1% false positives, never a fetch per file
    assert sst_gets() - before < 0.05 * len(misses) * 20
    before = sst_gets()
    assert (await snap.lookup(b"zzz3"))[0] is not None  # key range skips the other 24 files
    assert sst_gets() - before == 1


async def test_sidecars_fetched_once_and_in_parallel(tmp_path: Path) -> None:
    objects = FaultyStore(MemoryStore())
    rs = await embedded_refstore(tmp_path)
    for i in range(8):
        fid = await stage(objects, "L1", [rec(f"k{i}", b"v")])
        await rs.append_l1(REPO, BRANCH, fid)
    files = files_of(objects)
    view = BranchView(REPO, BRANCH, files, RefCache(rs))
    gate = objects.hold("get", times=8, match=lambda k: k.endswith(".meta"))
    task = asyncio.create_task(view.lookup(b"k3"))
    await gate.entered.wait()
    assert gate.hits == 8  # all eight sidecar fetches are in flight at once
    gate.release()
    got, _ = await task
    assert got is not None and got.value == b"v"
    await view.lookup(b"k4")
    assert files.sidecars.fetches == 8  # the second read fetched no sidecar
    await rs.aclose()


async def test_cold_read_fetches_the_metarange_while_sidecars_load(tmp_path: Path) -> None:
    """Commit -> metarange is one chain, the sidecars another: the metarange fetch
    does not wait for the sidecars (time to the first answer of a cold read)."""
    objects = FaultyStore(MemoryStore())
    ref = await layered(objects)
    metarange_key = layout.range_key((await read_commit(objects, ref.base)).metarange_id)
    sidecars = objects.hold("get", times=None, match=lambda k: k.endswith(".meta"))
    metarange = objects.hold("get", match=lambda k: k == metarange_key)
    task = asyncio.create_task(Snapshot.load(ref, files_of(objects), BRANCH))
    await asyncio.wait_for(metarange.entered.wait(), 60)  # with every sidecar still held
    assert sidecars.hits == 3 and not task.done()
    sidecars.release()
    metarange.release()
    snap = await task
    assert snap.metarange is not None and (await snap.lookup(b"k5"))[0] == rec("k5", b"base")


async def listing(snap: Snapshot, **kw: object) -> list[str]:
    return [(e.key.decode() + (" P" if e.common_prefix else "")) async for e in snap.list(**kw)]  # type: ignore[arg-type]


async def test_list_prefix_after_limit_delimiter() -> None:
    objects = MemoryStore()
    base = await commit_tree(
        objects, [rec(k, b"b") for k in ["a/1", "a/2", "a/x/1", "a/x/2", "b/1", "c"]]
    )
    l1 = await stage(objects, "L1", [rec("a/3", b"s"), rec("a/x/1", None), rec("a/y/1", b"s")])
    snap = await Snapshot.load(Ref("branch", base, (), (l1,)), files_of(objects), BRANCH)
    assert await listing(snap) == ["a/1", "a/2", "a/3", "a/x/2", "a/y/1", "b/1", "c"]
    assert await listing(snap, prefix=b"a/") == ["a/1", "a/2", "a/3", "a/x/2", "a/y/1"]
    assert await listing(snap, prefix=b"a/", delimiter=b"/") == [
        "a/1",
        "a/2",
        "a/3",
        "a/x/ P",
        "a/y/ P",
    ]
    assert await listing(snap, delimiter=b"/") == ["a/ P", "b/ P", "c"]
    assert await listing(snap, prefix=b"a/", after=b"a/2", limit=2) == ["a/3", "a/x/2"]
    assert await listing(snap, prefix=b"a/", after=b"a/x/", delimiter=b"/") == ["a/y/ P"]
    assert await listing(snap, prefix=b"a/", after=b"a/3", delimiter=b"/", limit=1) == ["a/x/ P"]
    assert await listing(snap, after=b"b/1") == ["c"]
    assert await listing(snap, limit=0) == []
    assert await listing(snap, prefix=b"zz") == []
    with pytest.raises(InvalidInputError):
        await listing(snap, limit=-1)


async def test_listing_many_tombstones_costs_no_request_per_tombstone() -> None:
    objects = FaultyStore(MemoryStore())
    base = await commit_tree(objects, [rec(b"k%05d" % i, b"v") for i in range(2000)], 20_000, 10**9)
    # delete all but the last 3 keys in one staging file
    dead = await stage(objects, "L1", [rec(b"k%05d" % i, None) for i in range(1997)])
    snap = await Snapshot.load(Ref("branch", base, (), (dead,)), files_of(objects), BRANCH)
    calls = sum(objects.calls.values())
    assert await listing(snap, limit=2) == ["k01997", "k01998"]
    used = objects.log[calls:]
    assert all(op == "get" for op, _ in used)
    staging = [k for _, k in used if k.startswith(layout.STAGING)]
    ranges = [k for _, k in used if k.startswith(layout.RANGES)]
    # the staging file once, the metarange and each base range once: nothing per tombstone
    assert len(staging) == 1
    assert len(ranges) == len(set(ranges)) < 20


def test_prefix_end() -> None:
    assert prefix_end(b"a/") == b"a0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") is None


async def test_refstore_is_read_per_read(tmp_path: Path) -> None:
    """A read sees a write acknowledged by another writer just before it (a fresh ref)."""
    objects = MemoryStore()
    rs: RefStore = await embedded_refstore(tmp_path)
    view = BranchView(REPO, BRANCH, files_of(objects), RefCache(rs))
    assert (await view.lookup(b"a"))[0] is None
    fid = await stage(objects, "L1", [rec("a", b"1")])
    await rs.append_l1(REPO, BRANCH, fid)
    got, _ = await view.lookup(b"a")
    assert got is not None and got.value == b"1"
    await rs.aclose()


async def test_file_collected_under_a_read_is_retried_on_a_fresh_ref(tmp_path: Path) -> None:
    objects = FaultyStore(MemoryStore())
    rs = await embedded_refstore(tmp_path)
    old = await stage(objects, "L1", [rec("k", b"v"), rec("m", b"w")])
    await rs.append_l1(REPO, BRANCH, old)
    view = BranchView(REPO, BRANCH, files_of(objects), RefCache(rs))
    gate = objects.hold("get", match=lambda k: k.endswith(f"{old}.sst"))
    gate2 = objects.hold("get", match=lambda k: k.endswith(f"{old}.sst"))
    read = asyncio.create_task(view.lookup(b"k"))
    listing_task = asyncio.create_task(anext(aiter(view.list())))
    await gate.entered.wait()
    await gate2.entered.wait()  # both the read and the listing hold the old ref
    # meanwhile a compaction moves the file into L2 and the old file is collected
    new = await stage(objects, "L2", [rec("k", b"v"), rec("m", b"w")])
    await rs.swap_compacted(REPO, BRANCH, base="", l2_old=[], l1_prefix=[old], l2_new=[new])
    for suffix in (".sst", ".meta"):
        await objects.delete(layout.staging_key(BRANCH, "L1", old, suffix))
    gate.release()
    gate2.release()
    got, staged = await read
    assert got is not None and got.value == b"v" and staged
    assert (await listing_task).key == b"k"
    await rs.aclose()


async def test_warm_reads_agree_with_lookup_and_peek_the_cache_once_per_file() -> None:
    """``lookup_cached`` answers what ``lookup`` answers; a snapshot asks the file cache
    for a file's reader once, then keeps it (a warm read costs no cache lookup)."""
    from lsmstore.cache import FileCache

    objects = MemoryStore()
    ref = await layered(objects)
    cache = FileCache()
    files = Files(objects, cache, CachedSource(objects, cache), SidecarCache(1000))
    keys = [b"k0", b"k1", b"k2", b"k3", b"k11", b"k9", b"zz"]
    snap = await Snapshot.load(ref, files, BRANCH)
    expect = [await snap.lookup(k) for k in keys]  # fetches every file a key needs
    snap = Snapshot(snap.ref, files, snap.l1, snap.l2, snap.tree, snap.metarange)
    first = [snap.lookup_cached(k) for k in keys]
    hits = cache.stats.hits_ram
    again = [snap.lookup_cached(k) for k in keys]
    assert first == again == expect
    assert cache.stats.hits_ram == hits  # the snapshot kept the readers it peeked


class _Peeked:
    """A reader handed out by :class:`_ReloadingCache` (a new object each time)."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def get(self, key: bytes) -> Record | None:
        found: Record | None = self._reader.get(key)
        return found

    def grow_block_cache(self, n: int) -> None:
        self._reader.grow_block_cache(n)


class _ReloadingCache:
    """A file cache whose every peek hands out a new reader object, as one does that
    evicted a file and loaded it again; it keeps none of them."""

    def __init__(self) -> None:
        self._parsed: dict[tuple[str, str], Any] = {}
        self.handed: list[weakref.ref[_Peeked]] = []

    async def get(self, store: ObjectStore, key: str, parse: Any, *, kind: str = "raw") -> Any:
        if (key, kind) not in self._parsed:
            self._parsed[key, kind] = parse(await store.get(key), key)
        return self._parsed[key, kind]

    def peek(self, store: ObjectStore, key: str, kind: str = "raw") -> _Peeked | None:
        reader = self._parsed.get((key, kind))
        if reader is None:
            return None
        peeked = _Peeked(reader)
        self.handed.append(weakref.ref(peeked))
        return peeked


async def test_a_snapshot_keeps_a_bounded_number_of_warm_readers() -> None:
    """A snapshot lives as long as its ref (a quiet branch's, for hours): the readers it
    keeps for warm reads are bounded in number, not every file and range it ever read
    once the file cache has let them go."""
    objects = MemoryStore()
    base = await commit_tree(
        objects, [rec(f"b{i:04d}", b"base" * 10) for i in range(600)], max_bytes=500
    )
    l2 = [await stage(objects, "L2", [rec(f"s{i:03d}", b"l2")]) for i in range(60)]
    cache = _ReloadingCache()
    files = Files(objects, cache, CachedSource(objects, cache), SidecarCache(1000))
    snap = await Snapshot.load(Ref("branch", base, tuple(l2), ()), files, BRANCH)
    assert snap.metarange is not None and len(snap.metarange.ranges) > 2 * WARM_READERS
    keys = [f"b{i:04d}".encode() for i in range(0, 600, 7)] + [
        f"s{i:03d}".encode() for i in range(60)
    ]
    for key in keys:
        found = await snap.lookup(key)
        assert found[0] is not None
        assert snap.lookup_cached(key) == snap.lookup_cached(key) == found
    gc.collect()
    assert sum(ref() is not None for ref in cache.handed) <= WARM_READERS
