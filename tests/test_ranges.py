"""Range splitting policy, FNV-1a, and RangeWriter output read back from a real store."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmstore import layout
from lsmstore.errors import InvalidInputError, UnavailableError
from lsmstore.graveler.ids import file_id
from lsmstore.graveler.ranges import (
    RangeInfo,
    RangePolicy,
    RangeWriter,
    fnv1a64,
    record_size,
)
from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.storage.local import LocalStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TINY = RangePolicy(min_bytes=120, max_bytes=600, raggedness=6)
# min never binds (every record is larger), max never binds: pure content-defined cuts.
PURE_CDC = RangePolicy(min_bytes=1, max_bytes=1 << 40, raggedness=16)


def rec(key: bytes, value: bytes = b"v") -> Record:
    return Record(key, b"id:" + value, value)


def records_of(keys: set[bytes] | list[bytes]) -> list[Record]:
    return [rec(k, k[::-1]) for k in sorted(keys)]


async def write(store: MemoryStore | LocalStore, records: list[Record], policy: RangePolicy):
    async with RangeWriter(store, policy) as w:
        for r in records:
            await w.add(r)
        ranges = await w.finish()
    return ranges, w


async def read_range(store: MemoryStore | LocalStore, info: RangeInfo) -> list[Record]:
    key = layout.range_key(info.id)
    return list(SSTReader(await store.get(key), key))


# --- FNV-1a and the policy ---------------------------------------------------------


def test_fnv1a64_reference_vectors() -> None:
    # Published FNV-1a 64 test vectors (Fowler/Noll/Vo reference code).
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


def test_policy_validation() -> None:
    with pytest.raises(InvalidInputError):
        RangePolicy(min_bytes=10, max_bytes=5)
    with pytest.raises(InvalidInputError):
        RangePolicy(min_bytes=-1, max_bytes=5)
    with pytest.raises(InvalidInputError):
        RangePolicy(min_bytes=0, max_bytes=0)
    with pytest.raises(InvalidInputError):
        RangePolicy(raggedness=0)
    assert RangePolicy() == RangePolicy(1 << 20, 10 << 20, 50_000)


def test_cuts_after_min_max_and_hash() -> None:
    policy = RangePolicy(min_bytes=100, max_bytes=1000, raggedness=4)
    hit = next(k for k in (b"k%d" % i for i in range(100)) if fnv1a64(k) % 4 == 0)
    miss = next(k for k in (b"k%d" % i for i in range(100)) if fnv1a64(k) % 4 != 0)
    assert not policy.cuts_after(hit, 99)  # never below min
    assert policy.cuts_after(hit, 100)
    assert not policy.cuts_after(miss, 999)
    assert policy.cuts_after(miss, 1000)  # always at max
    info = RangeInfo("0" * 64, b"a", hit, 3, 150)
    assert policy.is_closed(info)
    assert not policy.is_closed(RangeInfo("0" * 64, b"a", miss, 3, 150))


# --- RangeWriter ---------------------------------------------------------------------


@SETTINGS
@given(st.sets(st.binary(min_size=1, max_size=12), max_size=400))
async def test_ranges_cover_input_exactly(keys: set[bytes]) -> None:
    store = MemoryStore()
    records = records_of(keys)
    ranges, writer = await write(store, records, TINY)
    got: list[Record] = []
    for i, info in enumerate(ranges):
        content = await read_range(store, info)
        assert content, "no range is empty"
        assert info.id == file_id(content)
        assert (info.min_key, info.max_key, info.count) == (
            content[0].key,
            content[-1].key,
            len(content),
        )
        assert info.size == sum(record_size(r) for r in content)
        if i:
            assert ranges[i - 1].max_key < info.min_key  # sorted, non-overlapping
        if i < len(ranges) - 1:
            assert TINY.is_closed(info)
            # Cut at the first key where the policy allows it: no earlier prefix qualifies.
            size = 0
            for r in content[:-1]:
                size += record_size(r)
                assert not TINY.cuts_after(r.key, size)
        got.extend(content)
    assert got == records
    assert writer.ranges_written == len(ranges)
    assert writer.records_written == len(records)


@SETTINGS
@given(st.sets(st.binary(min_size=1, max_size=12), min_size=1, max_size=300))
async def test_same_records_same_ids(keys: set[bytes]) -> None:
    records = records_of(keys)
    first, _ = await write(MemoryStore(), records, TINY)
    second, _ = await write(MemoryStore(), records, TINY)
    assert first == second


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(min_value=0, max_value=2**32),
    st.booleans(),
    st.integers(min_value=0, max_value=10**6),
)
async def test_one_key_changes_at_most_two_range_ids(seed: int, insert: bool, where: int) -> None:
    rng = random.Random(seed)
    keys = sorted({rng.randbytes(rng.randint(4, 10)) for _ in range(3000)})
    before, _ = await write(MemoryStore(), records_of(keys), PURE_CDC)
    if insert:
        extra = rng.randbytes(rng.randint(1, 11))
        changed = sorted(set(keys) | {extra})
    else:
        changed = keys[: where % len(keys)] + keys[where % len(keys) + 1 :]
    after, _ = await write(MemoryStore(), records_of(changed), PURE_CDC)
    old, new = {r.id for r in before}, {r.id for r in after}
    assert len(before) > 100
    assert len(old - new) <= 2
    assert len(new - old) <= 2


async def test_store_on_disk_and_existing_objects_are_fine(tmp_path) -> None:
    store = LocalStore(str(tmp_path))
    records = records_of({b"k%04d" % i for i in range(200)})
    first, _ = await write(store, records, TINY)
    again, w2 = await write(store, records, TINY)  # every put finds the object: fine
    assert first == again and w2.ranges_written == len(first)
    for info in first:
        assert (tmp_path / layout.range_key(info.id)).is_file()


async def test_existing_ids_are_not_uploaded() -> None:
    store = FaultyStore(MemoryStore())
    records = records_of({b"k%04d" % i for i in range(200)})
    ranges, _ = await write(store, records, TINY)
    puts = store.calls["put"]
    async with RangeWriter(store, TINY, existing={r.id for r in ranges}) as w:
        for r in records:
            await w.add(r)
        assert await w.finish() == ranges
    assert store.calls["put"] == puts
    assert w.ranges_written == 0 and w.ranges_reused == len(ranges)


async def test_uploads_in_flight_are_bounded() -> None:
    store = FaultyStore(MemoryStore())
    gate = store.hold("put", times=None)
    records = records_of({b"k%04d" % i for i in range(300)})
    writer = RangeWriter(store, TINY, max_in_flight=3)
    fed = 0

    async def feed() -> None:
        nonlocal fed
        for r in records:
            await writer.add(r)
            fed += 1

    task = asyncio.create_task(feed())
    await gate.entered.wait()
    for _ in range(50):
        await asyncio.sleep(0.01)
    assert not task.done(), "add() waits while 3 uploads are held"
    assert gate.hits <= 3
    gate.release()
    await task
    ranges = await writer.finish()
    assert fed == len(records) and len(ranges) > 3
    assert store.calls["put"] == len(ranges)


async def test_a_writer_holds_the_records_of_ranges_in_flight_only() -> None:
    """Memory stays bounded however many ranges are written (an import streams millions
    of records through one writer): a stored range is remembered by its RangeInfo."""
    records = records_of({b"k%05d" % i for i in range(5000)})
    per_range = TINY.max_bytes // min(record_size(r) for r in records) + 1
    held = []
    async with RangeWriter(MemoryStore(), TINY, max_in_flight=2) as writer:
        for r in records:
            await writer.add(r)
            held.append(writer.held_records)
        ranges = await writer.finish()
    assert len(ranges) > 100 and writer.held_records == 0
    assert max(held) <= 3 * per_range  # two ranges in flight and the one being filled
    assert [r.count for r in ranges] and sum(r.count for r in ranges) == len(records)


async def test_bad_input_is_rejected() -> None:
    writer = RangeWriter(MemoryStore(), TINY)
    with pytest.raises(InvalidInputError, match="tombstone"):
        await writer.add(tombstone(b"a"))
    await writer.add(rec(b"b"))
    with pytest.raises(InvalidInputError, match="increasing"):
        await writer.add(rec(b"a"))
    with pytest.raises(InvalidInputError, match="increasing"):
        await writer.add(rec(b"b"))
    with pytest.raises(InvalidInputError, match="wait for a cut"):
        await writer.add_range(RangeInfo("0" * 64, b"c", b"d", 1, 20))
    with pytest.raises(InvalidInputError):
        RangeWriter(MemoryStore(), TINY, max_in_flight=0)


async def test_upload_failure_surfaces_and_cancels_the_rest() -> None:
    store = FaultyStore(MemoryStore())
    store.fail("put", times=1)
    records = records_of({b"k%04d" % i for i in range(300)})
    with pytest.raises(UnavailableError):
        async with RangeWriter(store, TINY, max_in_flight=2) as w:
            for r in records:
                await w.add(r)
            await w.finish()
