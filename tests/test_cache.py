"""FileCache: RAM and disk tiers, single flight, corruption recovery, invalidation."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from lsmstore.cache import FileCache
from lsmstore.errors import CorruptFileError, ObjectNotFoundError, UnavailableError
from lsmstore.storage.base import PutMode
from lsmstore.storage.local import LocalStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore


def counting() -> FaultyStore:
    return FaultyStore(MemoryStore())


async def fill(store: FaultyStore, sizes: dict[str, int]) -> None:
    for key, size in sizes.items():
        await store.put(key, key.encode()[:1] * size)


def disk_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def parsed(data: bytes, name: str) -> tuple[str, bytes]:
    return (name, data)


async def test_ram_hits_do_not_touch_the_store() -> None:
    store, cache = counting(), FileCache(ram_bytes=1000)
    await store.put("a", b"alpha")
    first = await cache.get(store, "a", parsed, kind="t")
    assert first == ("a", b"alpha")
    for _ in range(5):
        assert await cache.get(store, "a", parsed, kind="t") is first
    assert cache.peek(store, "a", "t") is first
    assert cache.peek(store, "b", "t") is None
    assert store.calls["get"] == 1
    s = cache.stats
    assert (s.hits_ram, s.misses, s.fetches, s.bytes_ram) == (6, 1, 1, 5)


async def test_kinds_are_separate_entries() -> None:
    store, cache = counting(), FileCache()
    await store.put("a", b"alpha")
    assert await cache.get_bytes(store, "a") == b"alpha"
    assert await cache.get(store, "a", lambda d, n: len(d), kind="len") == 5
    assert cache.peek(store, "a") == b"alpha" and cache.peek(store, "a", "len") == 5


async def test_ram_bound_and_lru_order() -> None:
    store, cache = counting(), FileCache(ram_bytes=300)
    await fill(store, {"a": 100, "b": 100, "c": 100, "d": 100, "big": 301})
    for key in "abc":
        await cache.get_bytes(store, key)
    await cache.get_bytes(store, "a")  # a is now the most recently used
    await cache.get_bytes(store, "d")  # evicts b, the least recently used
    assert [k for k in "abcd" if cache.peek(store, k) is not None] == ["a", "c", "d"]
    assert (cache.stats.evictions_ram, cache.stats.bytes_ram) == (1, 300)
    assert await cache.get_bytes(store, "big") == b"b" * 301  # larger than the tier
    assert cache.peek(store, "big") is None
    assert cache.stats.bytes_ram == 300
    await cache.get_bytes(store, "b")
    assert store.count("get", prefix="b") == 3  # b refetched; big twice (never kept)


async def test_single_flight() -> None:
    store, cache = counting(), FileCache()
    await store.put("k", b"v" * 100)
    gate = store.hold("get")
    calls = 0

    def parse(data: bytes, name: str) -> list[bytes]:
        nonlocal calls
        calls += 1
        return [data]

    tasks = [asyncio.create_task(cache.get(store, "k", parse)) for _ in range(100)]
    await gate.entered.wait()  # the one load reached the store after every task joined it
    assert cache.stats.misses == 100 and not any(t.done() for t in tasks)
    gate.release()
    results = await asyncio.gather(*tasks)
    assert store.calls["get"] == 1 and calls == 1
    assert all(r is results[0] for r in results)
    assert (cache.stats.misses, cache.stats.fetches) == (100, 1)


async def test_a_cancelled_caller_does_not_cancel_the_load() -> None:
    store, cache = counting(), FileCache()
    await store.put("k", b"v")
    gate = store.hold("get")
    first = asyncio.create_task(cache.get_bytes(store, "k"))
    second = asyncio.create_task(cache.get_bytes(store, "k"))
    await gate.entered.wait()
    first.cancel()
    gate.release()
    assert await second == b"v"
    assert first.cancelled() and store.calls["get"] == 1


async def test_missing_object_is_not_cached() -> None:
    store, cache = counting(), FileCache()
    for _ in range(2):
        with pytest.raises(ObjectNotFoundError):
            await cache.get_bytes(store, "k")
    await store.put("k", b"now here")
    assert await cache.get_bytes(store, "k") == b"now here"
    assert store.calls["get"] == 3


async def test_store_failure_is_not_cached() -> None:
    store, cache = counting(), FileCache()
    await store.put("k", b"v")
    store.fail("get")
    with pytest.raises(UnavailableError):
        await cache.get_bytes(store, "k")
    assert await cache.get_bytes(store, "k") == b"v"


async def test_parse_error_on_store_bytes_surfaces(tmp_path: Path) -> None:
    store, cache = counting(), FileCache(disk_dir=tmp_path)
    await store.put("bad.sst", b"garbage")

    def strict(data: bytes, name: str) -> bytes:
        if data != b"good":
            raise CorruptFileError(name, "bad magic")
        return data

    for _ in range(2):
        with pytest.raises(CorruptFileError, match=r"bad\.sst: bad magic"):
            await cache.get(store, "bad.sst", strict, kind="sst")
    await cache.drain()
    assert store.calls["get"] == 2 and disk_files(tmp_path) == []  # nothing kept anywhere
    await store.put("bad.sst", b"good", PutMode.OVERWRITE)
    assert await cache.get(store, "bad.sst", strict, kind="sst") == b"good"


async def test_disk_tier_survives_a_restart(tmp_path: Path) -> None:
    store = counting()
    await fill(store, {"a": 1000, "b": 2000})
    cache = FileCache(disk_dir=tmp_path)
    await cache.get_bytes(store, "a")
    await cache.get_bytes(store, "b")
    await cache.aclose()
    assert cache.stats.bytes_disk == sum(p.stat().st_size for p in disk_files(tmp_path))
    (tmp_path / "ff").mkdir(exist_ok=True)
    (tmp_path / "ff" / "ffff.tmp-123").write_bytes(b"a crashed write")

    restarted = FileCache(disk_dir=tmp_path)
    assert await restarted.get_bytes(store, "b") == b"b" * 2000
    assert await restarted.get_bytes(store, "a") == b"a" * 1000
    assert store.calls["get"] == 2  # only the first cache fetched
    assert restarted.stats.hits_disk == 2 and restarted.stats.fetches == 0
    assert not (tmp_path / "ff" / "ffff.tmp-123").exists()


async def test_disk_bound_evicts_least_recently_used(tmp_path: Path) -> None:
    store = counting()
    await fill(store, {"a": 1000, "b": 1000, "c": 1000, "d": 1000})
    cache = FileCache(ram_bytes=0, disk_dir=tmp_path, disk_bytes=3 * 1024 + 100)
    for key in "abc":
        await cache.get_bytes(store, key)
        await cache.drain()
    await cache.get_bytes(store, "a")  # a disk hit: a becomes most recently used
    await cache.get_bytes(store, "d")
    await cache.drain()
    assert cache.stats.evictions_disk == 1
    files = disk_files(tmp_path)
    assert len(files) == 3 and sum(p.stat().st_size for p in files) <= cache.disk_bytes
    assert cache.stats.bytes_disk == sum(p.stat().st_size for p in files)
    before = store.calls["get"]
    for key in "acd":
        await cache.get_bytes(store, key)
    assert store.calls["get"] == before  # a, c, d came from disk
    await cache.get_bytes(store, "b")
    assert store.calls["get"] == before + 1  # b was evicted


async def test_existing_disk_dir_over_the_bound_is_trimmed(tmp_path: Path) -> None:
    store = counting()
    await fill(store, {f"k{i}": 1000 for i in range(5)})
    big = FileCache(disk_dir=tmp_path)
    for i in range(5):
        await big.get_bytes(store, f"k{i}")
    await big.aclose()
    small = FileCache(disk_dir=tmp_path, disk_bytes=2500)
    await small.get_bytes(store, "k4")  # the first use indexes the directory
    await small.drain()
    assert len(disk_files(tmp_path)) == 2 and small.stats.bytes_disk <= 2500


async def test_corrupt_disk_file_is_refetched(tmp_path: Path) -> None:
    store = counting()
    await store.put("k", b"precious bytes")
    first = FileCache(disk_dir=tmp_path)
    await first.get_bytes(store, "k")
    await first.drain()
    [path] = disk_files(tmp_path)
    blob = bytearray(path.read_bytes())
    blob[-3] ^= 0x01  # one flipped bit in the payload
    path.write_bytes(bytes(blob))
    cache = FileCache(disk_dir=tmp_path)
    assert await cache.get_bytes(store, "k") == b"precious bytes"
    assert (cache.stats.hits_disk, cache.stats.fetches) == (0, 1)
    await cache.drain()
    [path] = disk_files(tmp_path)
    assert path.read_bytes().endswith(b"precious bytes")  # rewritten whole
    assert await FileCache(disk_dir=tmp_path).get_bytes(store, "k") == b"precious bytes"
    assert store.calls["get"] == 2


async def test_truncated_disk_file_is_refetched(tmp_path: Path) -> None:
    store = counting()
    await store.put("k", b"x" * 5000)
    first = FileCache(disk_dir=tmp_path)
    await first.get_bytes(store, "k")
    await first.drain()
    [path] = disk_files(tmp_path)
    os.truncate(path, 100)
    assert await FileCache(disk_dir=tmp_path).get_bytes(store, "k") == b"x" * 5000
    assert store.calls["get"] == 2


async def test_parse_rejecting_disk_bytes_refetches(tmp_path: Path) -> None:
    """Disk bytes with a good checksum that ``parse`` rejects are dropped and refetched."""
    store = counting()
    await store.put("k", b"old format")
    first = FileCache(disk_dir=tmp_path)
    await first.get_bytes(store, "k")
    await first.drain()
    await store.put("k", b"new format", PutMode.OVERWRITE)

    def new_only(data: bytes, name: str) -> bytes:
        if not data.startswith(b"new"):
            raise CorruptFileError(name, "unsupported version")
        return data

    cache = FileCache(disk_dir=tmp_path)
    assert await cache.get(store, "k", new_only, kind="v") == b"new format"
    assert (cache.stats.hits_disk, cache.stats.fetches) == (0, 1)
    await cache.drain()
    again = FileCache(disk_dir=tmp_path)
    assert await again.get(store, "k", new_only, kind="v") == b"new format"
    assert again.stats.hits_disk == 1  # the refetched bytes replaced the disk copy


async def test_invalidate_drops_both_tiers(tmp_path: Path) -> None:
    store, cache = counting(), FileCache(disk_dir=tmp_path)
    await store.put("k", b"v1")
    await cache.get_bytes(store, "k")
    await cache.get(store, "k", parsed, kind="t")
    await cache.drain()
    cache.invalidate(store, "k")
    await cache.drain()
    assert cache.peek(store, "k") is None and cache.peek(store, "k", "t") is None
    assert disk_files(tmp_path) == [] and cache.stats.bytes_disk == cache.stats.bytes_ram == 0
    await store.put("k", b"v2", PutMode.OVERWRITE)
    assert await cache.get_bytes(store, "k") == b"v2"


async def test_invalidate_during_a_load_keeps_nothing(tmp_path: Path) -> None:
    store, cache = counting(), FileCache(disk_dir=tmp_path)
    await store.put("k", b"v1")
    gate = store.hold("get")
    task = asyncio.create_task(cache.get_bytes(store, "k"))
    await gate.entered.wait()
    cache.invalidate(store, "k")
    gate.release()
    assert await task == b"v1"  # the caller still gets its answer...
    await cache.drain()
    assert cache.peek(store, "k") is None and disk_files(tmp_path) == []  # ...nothing is kept


async def test_same_key_in_two_stores_is_two_entries(tmp_path: Path) -> None:
    one, two = LocalStore(tmp_path / "one"), LocalStore(tmp_path / "two")
    await one.put("k", b"1")
    await two.put("k", b"2")
    cache = FileCache(disk_dir=tmp_path / "cache")
    assert [await cache.get_bytes(s, "k") for s in (one, two)] == [b"1", b"2"]


async def test_big_objects_parse_in_a_thread() -> None:
    store, cache = counting(), FileCache(parse_in_thread_bytes=1000)
    await fill(store, {"small": 999, "big": 1000})
    loop_thread = threading.get_ident()

    def where(data: bytes, name: str) -> bool:
        return threading.get_ident() == loop_thread

    assert await cache.get(store, "small", where, kind="w") is True
    assert await cache.get(store, "big", where, kind="w") is False


async def test_refetch_after_a_drop_keeps_the_new_disk_file(tmp_path: Path) -> None:
    """A dropped file's removal and its rewrite run in order (they once raced)."""

    def new_only(data: bytes, name: str) -> bytes:
        if not data.startswith(b"new"):
            raise CorruptFileError(name, "unsupported version")
        return data

    keys = [f"k{i}" for i in range(20)]
    for trial in range(10):
        root = tmp_path / str(trial)
        store, first = counting(), FileCache(disk_dir=root)
        for key in keys:
            await store.put(key, b"old" * 1000)
            await first.get_bytes(store, key)
        await first.drain()
        for key in keys:
            await store.put(key, b"new" * 1000, PutMode.OVERWRITE)
        cache = FileCache(disk_dir=root)
        await asyncio.gather(*(cache.get(store, k, new_only, kind="v") for k in keys))
        await cache.drain()
        files = disk_files(root)
        assert len(files) == len(keys)
        assert cache.stats.bytes_disk == sum(p.stat().st_size for p in files)
        assert all(p.read_bytes().endswith(b"new") for p in files)
