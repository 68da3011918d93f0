"""Metarange encoding, the empty tree, sources and TreeReader over real stores."""

from __future__ import annotations

import hashlib

import pytest
from helpers.lakefs_sst import decode_range_data as decode_lakefs_range_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmstore import layout
from lsmstore.cache import FileCache
from lsmstore.errors import CorruptFileError, InvalidInputError, ObjectNotFoundError
from lsmstore.graveler.apply import write_tree
from lsmstore.graveler.ids import file_id
from lsmstore.graveler.metarange import (
    EMPTY_METARANGE_ID,
    Metarange,
    decode_range_entry,
    encode_range_data,
    metarange_records,
    store_metarange,
    write_metarange,
)
from lsmstore.graveler.ranges import RangeInfo, RangePolicy, fnv1a64
from lsmstore.graveler.record import Record
from lsmstore.graveler.source import CachedSource, DirectSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import write_sst
from lsmstore.graveler.tree import TreeReader
from lsmstore.graveler.value import encode_value
from lsmstore.storage.local import LocalStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore

MINUS_ONE = b"\xff" * 9 + b"\x01"  # int64 -1 on the protobuf wire
TINY = RangePolicy(min_bytes=120, max_bytes=600, raggedness=6)
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rid(n: int) -> str:
    return hashlib.sha256(b"%d" % n).hexdigest()


def infos(bounds: list[tuple[bytes, bytes]]) -> list[RangeInfo]:
    return [RangeInfo(rid(i), lo, hi, i + 1, 100 * (i + 1)) for i, (lo, hi) in enumerate(bounds)]


def rec(key: bytes) -> Record:
    return Record(key, b"id-" + key, b"value-" + key)


@SETTINGS
@given(
    st.binary(min_size=1, max_size=40),
    st.binary(max_size=40),
    st.integers(0, 2**63),
    st.integers(1, 2**40),
)
def test_range_data_round_trip(lo: bytes, suffix: bytes, size: int, count: int) -> None:
    info = RangeInfo(rid(count), lo, lo + suffix, count, size)
    data = encode_range_data(info)
    # lakeFS's RangeData message, as an independent decoding of the wire format reads it
    assert decode_lakefs_range_data(data) == {
        "min_key": info.min_key,
        "max_key": info.max_key,
        "estimated_size": info.size,
        "count": info.count,
    }
    entry = Record(info.max_key, info.id.encode(), data)
    assert decode_range_entry(entry, "m") == info


def test_documented_example() -> None:
    # The worked example of docs/format.md ("Metaranges").
    info = RangeInfo("ab" * 32, b"data/a.csv", b"data/b.csv", 2, 60)
    data = encode_range_data(info)
    assert data == bytes.fromhex(
        "0a0a" + b"data/a.csv".hex() + "120a" + b"data/b.csv".hex() + "183c" + "2002"
    )
    assert encode_value(info.id.encode(), data)[:3] == bytes.fromhex("80 01 61")
    assert fnv1a64(b"data/a.csv") == 0x192172BE3DB33903


def test_legacy_range_data_is_still_read() -> None:
    # Metaranges written before the protobuf form: 0x01, then varints (docs/format.md).
    legacy = bytes.fromhex("010a" + b"data/a.csv".hex() + "0a" + b"data/b.csv".hex() + "3c02")
    entry = Record(b"data/b.csv", ("ab" * 32).encode(), legacy)
    assert decode_range_entry(entry, "m") == RangeInfo(
        "ab" * 32, b"data/a.csv", b"data/b.csv", 2, 60
    )


def test_lakefs_encoding_of_a_range_reads_the_same() -> None:
    # What Go's proto.Marshal gives for RangeData (fields in number order, defaults omitted),
    # built here byte by byte: the reader takes it, unknown fields included.
    def field(n: int, wire: int, payload: bytes) -> bytes:
        return bytes((n << 3 | wire,)) + payload

    go = (
        field(1, 2, b"\x01a")
        + field(2, 2, b"\x01c")
        + field(3, 0, b"\xac\x02")  # 300
        + field(4, 0, b"\x07")
        + field(9, 0, b"\x01")  # a field added later: ignored, as protobuf does
    )
    info = decode_range_entry(Record(b"c", rid(1).encode(), go), "m")
    assert info == RangeInfo(rid(1), b"a", b"c", 7, 300)


def test_metarange_sst_layout() -> None:
    ranges = infos([(b"a", b"c"), (b"d", b"d"), (b"f", b"k")])
    mid, data = write_metarange(ranges)
    reader = SSTReader(data, "m")
    entries = list(reader)
    assert [e.key for e in entries] == [b"c", b"d", b"k"]  # keyed by each range's last key
    assert [e.identity for e in entries] == [r.id.encode("ascii") for r in ranges]
    # The stored value is encode_value(range ID, range data).
    assert [reader.get(e.key) for e in entries] == entries
    assert mid == file_id(metarange_records(ranges))
    assert Metarange.from_reader(mid, reader).ranges == tuple(ranges)


def test_find_and_index() -> None:
    mr = Metarange(rid(0), infos([(b"b", b"d"), (b"f", b"h"), (b"m", b"m")]))
    assert mr.find(b"a") is None  # before the first range
    assert mr.find(b"b") == mr.ranges[0] and mr.find(b"d") == mr.ranges[0]
    assert mr.find(b"e") is None  # in a gap between ranges
    assert mr.find(b"g") == mr.ranges[1]
    assert mr.find(b"m") == mr.ranges[2]
    assert mr.find(b"n") is None  # after the last
    assert [mr.index(k) for k in (b"a", b"d", b"e", b"m", b"z")] == [0, 0, 1, 2, 3]
    assert list(mr) == list(mr.ranges) and len(mr) == 3 and mr.count == 6


def test_overlapping_ranges_are_rejected() -> None:
    with pytest.raises(InvalidInputError, match="overlap"):
        write_metarange(infos([(b"a", b"c"), (b"c", b"d")]))


def test_empty_tree() -> None:
    assert EMPTY_METARANGE_ID == hashlib.sha256(b"").hexdigest() == file_id([])
    assert write_metarange([]) == (EMPTY_METARANGE_ID, b"")


async def test_empty_tree_is_never_stored_or_fetched() -> None:
    store = FaultyStore(MemoryStore())
    assert await store_metarange(store, []) == EMPTY_METARANGE_ID
    tree = TreeReader(DirectSource(store), EMPTY_METARANGE_ID)
    assert await tree.get(b"a") is None
    assert [r async for r in tree] == []
    assert await tree.ranges() == []
    assert sum(store.calls.values()) == 0


def corrupt_metarange(records: list[Record]) -> bytes:
    return write_sst(records)


@pytest.mark.parametrize(
    ("records", "problem"),
    [
        ([Record(b"c", b"not-hex", encode_range_data(infos([(b"a", b"c")])[0]))], "range ID"),
        ([Record(b"c", rid(0).encode(), b"\x02junk")], "malformed"),  # field number 0
        ([Record(b"c", rid(0).encode(), b"\x01\x01a\x01c\x05")], "malformed"),  # truncated
        ([Record(b"c", rid(0).encode(), b"\x0a\x05ab")], "malformed"),  # truncated bytes
        ([Record(b"c", rid(0).encode(), b"\x0a\x01a\x12\x01c\x20")], "malformed"),  # no count
        ([Record(b"c", rid(0).encode(), b"\x0b\x01a")], "malformed"),  # wire type 3
        (
            [Record(b"c", rid(0).encode(), b"\x0a\x01a\x12\x01c\x20" + b"\xff" * 9 + b"\x01")],
            "incons",
        ),
        ([Record(b"c", rid(0).encode(), b"\x0a\x01a\x12\x01c")], "incons"),  # count 0
        ([Record(b"c", rid(0).encode(), b"\x12\x01c\x20\x01")], "incons"),  # no min_key
        ([Record(b"c", rid(0).encode(), encode_range_data(infos([(b"a", b"b")])[0]))], "incons"),
        (
            [
                Record(b"c", rid(0).encode(), encode_range_data(infos([(b"a", b"c")])[0])),
                Record(
                    b"e", rid(1).encode(), encode_range_data(RangeInfo(rid(1), b"b", b"e", 1, 1))
                ),
            ],
            "overlap",
        ),
    ],
)
def test_corrupt_metarange_entries(records: list[Record], problem: str) -> None:
    reader = SSTReader(corrupt_metarange(records), "_lsm/ranges/x")
    with pytest.raises(CorruptFileError, match=problem) as info:
        Metarange.from_reader(rid(9), reader)
    assert info.value.name == "_lsm/ranges/x"


# --- TreeReader --------------------------------------------------------------------------


@SETTINGS
@given(
    st.dictionaries(st.binary(min_size=1, max_size=8), st.binary(max_size=20), max_size=300),
    st.lists(st.binary(max_size=9), max_size=20),
)
async def test_get_and_seek_match_a_dict(content: dict[bytes, bytes], probes: list[bytes]) -> None:
    store = MemoryStore()
    records = [Record(k, b"i" + v, v) for k, v in sorted(content.items())]
    tree = TreeReader(DirectSource(store), await write_tree(store, records, TINY))
    for key in probes + list(content)[:20]:
        got = await tree.get(key)
        if key in content:
            assert got == Record(key, b"i" + content[key], content[key])
        else:
            assert got is None
        assert [r async for r in tree.seek(key)] == [r for r in records if r.key >= key]
        for stop in probes[:5]:
            assert [r async for r in tree.seek(key, stop)] == [
                r for r in records if key <= r.key < stop
            ]
    assert [r async for r in tree] == records


async def test_reader_on_disk_and_missing_range(tmp_path) -> None:
    store = LocalStore(str(tmp_path))
    records = [rec(b"k%04d" % i) for i in range(400)]
    mid = await write_tree(store, records, TINY)
    tree = TreeReader(DirectSource(store), mid)
    ranges = await tree.ranges()
    assert len(ranges) > 5 and await tree.get(b"k0123") == rec(b"k0123")
    victim = ranges[3]
    (tmp_path / layout.range_key(victim.id)).unlink()
    with pytest.raises(ObjectNotFoundError, match=victim.id):
        await tree.get(victim.min_key)
    with pytest.raises(ObjectNotFoundError, match=victim.id):
        _ = [r async for r in tree]
    assert await tree.get(b"k0000") == rec(b"k0000")  # other ranges still read
    with pytest.raises(ObjectNotFoundError, match="0" * 64):
        await TreeReader(DirectSource(store), "0" * 64).get(b"a")
    with pytest.raises(InvalidInputError):
        TreeReader(DirectSource(store), "not-an-id")


async def test_corrupt_range_bytes(tmp_path) -> None:
    store = LocalStore(str(tmp_path))
    mid = await write_tree(store, [rec(b"k%04d" % i) for i in range(100)], TINY)
    info = (await TreeReader(DirectSource(store), mid).ranges())[0]
    path = tmp_path / layout.range_key(info.id)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError):
        await TreeReader(DirectSource(store), mid).get(info.min_key)


async def test_tombstone_in_committed_range_is_corruption() -> None:
    store = MemoryStore()
    info = RangeInfo(rid(1), b"a", b"b", 2, 40)
    await store.put(layout.range_key(info.id), write_sst([rec(b"a"), Record(b"b", b"", None)]))
    mid = await store_metarange(store, [info])
    tree = TreeReader(DirectSource(store), mid)
    with pytest.raises(CorruptFileError, match="tombstone"):
        await tree.get(b"b")
    with pytest.raises(CorruptFileError, match="tombstone"):
        _ = [r async for r in tree]


async def test_metarange_read_once_per_reader() -> None:
    store = FaultyStore(MemoryStore())
    mid = await write_tree(store, [rec(b"k%04d" % i) for i in range(300)], TINY)
    tree = TreeReader(DirectSource(store), mid)
    for i in range(0, 300, 7):
        assert await tree.get(b"k%04d" % i) is not None
    assert store.count("get", prefix=layout.range_key(mid)) == 1


async def test_seek_stops_early_without_leaking_prefetch() -> None:
    store = MemoryStore()
    records = [rec(b"k%04d" % i) for i in range(300)]
    tree = TreeReader(DirectSource(store), await write_tree(store, records, TINY))
    got = []
    async for r in tree.seek(b"k0100"):
        got.append(r)
        if len(got) == 5:
            break
    assert got == records[100:105]


async def test_seek_with_a_stop_fetches_no_range_from_the_stop_on() -> None:
    store = FaultyStore(MemoryStore())
    records = [rec(b"k%04d" % i) for i in range(300)]
    tree = TreeReader(DirectSource(store), await write_tree(store, records, TINY))
    ranges = await tree.ranges()
    assert len(ranges) > 4
    mid = await tree.metarange()
    for start, stop in [(b"k0100", b"k0103"), (ranges[1].min_key, ranges[3].min_key)]:
        store.log.clear()
        assert [r async for r in tree.seek(start, stop)] == [
            r for r in records if start <= r.key < stop
        ]
        fetched = {k for op, k in store.log if op == "get"} - {layout.range_key(mid.id)}
        wanted = {layout.range_key(r.id) for r in ranges if r.max_key >= start and r.min_key < stop}
        assert fetched == wanted, (start, stop)


async def test_cached_source_fetches_each_file_once(tmp_path) -> None:
    store = FaultyStore(LocalStore(str(tmp_path)))
    records = [rec(b"k%04d" % i) for i in range(400)]
    mid = await write_tree(store, records, TINY)
    source = CachedSource(store, FileCache())
    n_ranges = len(await TreeReader(source, mid).ranges())
    for _ in range(2):
        tree = TreeReader(source, mid)  # a new reader: the parsed metarange is shared
        for r in records:
            assert await tree.get(r.key) == r
        assert [r async for r in tree.seek(b"k0200")] == records[200:]
    assert store.count("get", prefix=layout.RANGES) == 1 + n_ranges
    assert (await source.metarange(mid)) is (await source.metarange(mid))
    missing = "f" * 64
    with pytest.raises(ObjectNotFoundError, match=missing):
        await source.reader(missing)
