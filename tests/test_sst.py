"""write_sst + SSTReader: round trips, lookups, seeks, block caching, other writers' settings."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import tempfile
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
import rocksdict
from helpers.rocksdb_files import rocksdb_sst
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmstore.errors import EntryTooLargeError, InvalidInputError
from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import MAX_ENTRY_BYTES, write_sst


def as_read(rec: Record) -> Record:
    """What the reader returns for a written record (tombstones lose their identity)."""
    return tombstone(rec.key) if rec.value is None else rec


def make_records(n: int, *, seed: int = 1, tombstone_every: int = 0) -> list[Record]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = b"k/%08d/" % (i * 3) + bytes(rng.randrange(256) for _ in range(rng.randrange(8)))
        if tombstone_every and i % tombstone_every == 0:
            out.append(tombstone(key))
        else:
            out.append(Record(key, rng.randbytes(32), rng.randbytes(rng.randrange(300))))
    return out


def check_file(records: list[Record], reader: SSTReader) -> None:
    expected = [as_read(r) for r in records]
    assert list(reader) == expected
    assert reader.num_entries == len(records)
    assert reader.first_key == records[0].key
    assert reader.last_key == records[-1].key
    for rec in expected:
        assert reader.get(rec.key) == rec


# --- round trips ------------------------------------------------------------------------

record_lists = st.dictionaries(
    st.binary(min_size=1, max_size=40),
    st.one_of(
        st.none(),
        st.tuples(st.binary(max_size=40), st.binary(max_size=600)),
    ),
    min_size=1,
    max_size=300,
).map(
    lambda d: [tombstone(k) if v is None else Record(k, v[0], v[1]) for k, v in sorted(d.items())]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists, probes=st.lists(st.binary(max_size=41), max_size=30))
def test_round_trip(records: list[Record], probes: list[bytes]) -> None:
    reader = SSTReader(write_sst(records), "rt.sst", block_cache_size=2)
    check_file(records, reader)
    by_key = {r.key: as_read(r) for r in records}
    keys = [r.key for r in records]
    for probe in probes:
        assert reader.get(probe) == by_key.get(probe)
        assert list(reader.seek(probe)) == [by_key[k] for k in keys if k >= probe]


def test_get_absent_keys_before_between_and_after() -> None:
    records = make_records(3000, tombstone_every=7)
    reader = SSTReader(write_sst(records), "absent.sst")
    assert len(reader._index_keys) > 20  # many blocks
    assert reader.get(b"") is None
    assert reader.get(b"a") is None  # before the first key
    assert reader.get(records[0].key[:-1] if len(records[0].key) > 1 else b"") is None
    assert reader.get(b"zzz") is None  # after the last key
    assert reader.get(records[-1].key + b"\x00") is None
    for a, b in itertools.pairwise(records):
        between = a.key + b"\x00"
        if between < b.key:
            assert reader.get(between) is None
    assert reader.get(records[0].key) == as_read(records[0])  # a tombstone
    assert reader.get(records[0].key).is_tombstone  # type: ignore[union-attr]


def test_seek_at_every_position() -> None:
    records = make_records(1500, seed=2, tombstone_every=5)
    expected = [as_read(r) for r in records]
    reader = SSTReader(write_sst(records), "seek.sst", block_cache_size=4)
    assert list(reader.seek()) == expected
    assert list(reader.seek(b"")) == expected
    for i, rec in enumerate(records):
        it = reader.seek(rec.key)
        assert next(it) == expected[i]
        if i % 97 == 0:  # full tails are quadratic: check some completely
            assert [expected[i], *it] == expected[i:]
        between = rec.key + b"\x00"
        nxt = next(reader.seek(between), None)
        assert nxt == (expected[i + 1] if i + 1 < len(expected) else None)
    assert list(reader.seek(b"\xff" * 50)) == []


def test_large_file_many_blocks_and_big_values() -> None:
    records = make_records(20000, seed=3, tombstone_every=13)
    records[100] = Record(records[100].key, b"id", os.urandom(1 << 20))  # 1 MiB value
    records[101] = Record(records[101].key, b"x" * 200, b"y" * 70000)  # long identity
    data = write_sst(records)
    reader = SSTReader(data, "large.sst", block_cache_size=8)
    assert len(reader._index_keys) > 500
    check_file(records, reader)
    assert reader.size == len(data)
    assert reader.properties["rocksdb.comparator"] == b"leveldb.BytewiseComparator"


def test_single_record_and_binary_keys() -> None:
    for rec in (
        Record(b"\x00", b"", b""),
        tombstone(b"\xff" * 300),
        Record(b"only", b"i", b"v"),
    ):
        reader = SSTReader(write_sst([rec]), "one.sst")
        check_file([rec], reader)
        assert reader.first_key == reader.last_key == rec.key


def test_lookups_agree_whatever_the_cache_state() -> None:
    records = make_records(4000, seed=4, tombstone_every=3)
    data = write_sst(records)
    rng = random.Random(5)
    for cache_size in (0, 1, 3, 10_000):
        reader = SSTReader(data, "cache.sst", block_cache_size=cache_size)
        for _ in range(3000):
            rec = records[rng.randrange(len(records))]
            op = rng.randrange(3)
            if op == 0:
                assert reader.get(rec.key) == as_read(rec)
            elif op == 1:  # keys differ in their number part: no key extends another
                assert reader.get(rec.key + b"\x00\x00") is None
            else:
                i = records.index(rec)
                assert list(reader.seek(rec.key))[:3] == [as_read(r) for r in records[i : i + 3]]
        assert len(reader._cache) <= max(1, cache_size)


def test_cached_blocks_hold_records_the_collector_does_not_track() -> None:
    """Decoded blocks stay in the reader's cache as tuples of plain tuples, which
    CPython's cyclic collector stops tracking (a Record, a tuple subclass, it never
    does), so a warm cache adds nothing to a full collection; get and seek still
    return Records."""
    import gc

    records = make_records(3000, seed=8, tombstone_every=4)
    reader = SSTReader(write_sst(records), "gc.sst", block_cache_size=10_000)
    assert list(reader) == [as_read(r) for r in records]
    for _ in range(2):  # the first touch keeps a block raw, the second decodes it
        for r in records:
            got = reader.get(r.key)
            assert type(got) is Record and got == as_read(r)
    assert all(type(r) is Record for r in islice(reader.seek(records[10].key), 50))
    # A collection untracks a tuple whose items are untracked by then; a block nests
    # three levels (block -> records -> record), so three passes untrack every level
    # whatever the order the collector walks them in.
    for _ in range(3):
        gc.collect()
    blocks = [e for e in reader._cache.values() if isinstance(e, tuple)]
    assert blocks and sum(len(recs) for _, recs in blocks) == len(records)
    assert not any(gc.is_tracked(t) for _, recs in blocks for t in recs)
    assert not any(gc.is_tracked(b) for b in blocks)


def test_may_contain_range() -> None:
    reader = SSTReader(write_sst([Record(b"b", b"", b"1"), Record(b"d", b"", b"2")]), "r.sst")
    assert reader.may_contain_range(b"a", b"b")
    assert reader.may_contain_range(b"c", b"c")  # inside, though absent
    assert reader.may_contain_range(b"d", b"z")
    assert reader.may_contain_range(b"a", b"z")
    assert not reader.may_contain_range(b"a", b"az")
    assert not reader.may_contain_range(b"d\x00", b"z")


def test_reader_accepts_other_buffers() -> None:
    records = make_records(50)
    data = write_sst(records)
    check_file(records, SSTReader(bytearray(data), "ba.sst"))
    check_file(records, SSTReader(memoryview(data), "mv.sst"))


# --- writer input checks and temp files ---------------------------------------------------


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_writer_rejects_bad_input_and_leaves_no_temp_file(private_tmp: Path) -> None:
    with pytest.raises(InvalidInputError, match="no records"):
        write_sst([])
    with pytest.raises(InvalidInputError, match=r"b'a' follows b'b'"):
        write_sst([Record(b"b", b"", b""), Record(b"a", b"", b"")])
    with pytest.raises(InvalidInputError, match="strictly increasing"):
        write_sst([Record(b"a", b"", b""), tombstone(b"a")])
    with pytest.raises(InvalidInputError, match="non-empty"):
        write_sst([Record(b"", b"", b"")])

    def failing() -> Any:
        yield Record(b"a", b"", b"")
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError):
        write_sst(failing())
    assert list(private_tmp.iterdir()) == []
    write_sst(make_records(10))
    assert list(private_tmp.iterdir()) == []


def test_writer_output_is_what_the_format_document_says() -> None:
    reader = SSTReader(write_sst(make_records(2000)), "settings.sst")
    props = reader.properties
    assert props["rocksdb.block.based.table.index.type"] == bytes(4)  # binary search
    assert props["rocksdb.compression"] == b"Snappy"
    data = write_sst(make_records(10))
    assert int.from_bytes(data[-12:-8], "little") == 5  # format_version
    assert data[-53] == 4  # xxh3 checksums
    assert data[-8:] == (0x88E241B785F4CFF7).to_bytes(8, "little")


# --- files written by RocksDB with other (supported) settings -----------------------------


C = rocksdict.ChecksumType
Z = rocksdict.DBCompressionType
TWO_LEVEL = rocksdict.BlockBasedIndexType.two_level_index_search()
SUPPORTED = {
    "format2-crc32c": {"format_version": 2, "checksum": C.crc32c()},
    "format3-xxhash32": {"format_version": 3, "checksum": C.xxhash()},
    "format4-xxhash64": {"format_version": 4, "checksum": C.xxhash64()},
    "format6-context-checksums": {"format_version": 6},
    "format6-crc32c-zstd": {"format_version": 6, "checksum": C.crc32c(), "compression": Z.zstd()},
    "uncompressed": {"compression": Z.none()},
    "lz4": {"compression": Z.lz4()},
    "lz4hc": {"compression": Z.lz4hc()},
    "zstd": {"compression": Z.zstd()},
    "restart-interval-1": {"restart_interval": 1},
    "restart-interval-3": {"restart_interval": 3, "block_size": 512},
    "restart-interval-64": {"restart_interval": 64, "block_size": 16384},
    "index-delta-values": {"index_restart_interval": 8, "block_size": 256},
    "index-delta-values-format3": {"format_version": 3, "index_restart_interval": 4},
    "tiny-blocks": {"block_size": 64},
    # Two-level (partitioned) indexes, as Pebble writes once an index outgrows 4 KiB:
    # small metadata blocks make many partitions.
    "two-level-format2-crc32c": {
        "format_version": 2,
        "checksum": C.crc32c(),
        "index_type": TWO_LEVEL,
        "metadata_block_size": 256,
        "block_size": 256,
    },
    "two-level-format5": {"index_type": TWO_LEVEL, "metadata_block_size": 128, "block_size": 128},
    "two-level-format6-zstd": {
        "format_version": 6,
        "index_type": TWO_LEVEL,
        "metadata_block_size": 200,
        "block_size": 300,
        "compression": Z.zstd(),
    },
    "two-level-delta-values": {
        "index_type": TWO_LEVEL,
        "metadata_block_size": 512,
        "index_restart_interval": 4,
        "block_size": 128,
    },
    "two-level-partitioned-filters": {
        "index_type": TWO_LEVEL,
        "metadata_block_size": 256,
        "block_size": 256,
        "bloom_bits": 10,
        "partition_filters": True,
    },
    "two-level-one-partition": {"index_type": TWO_LEVEL},
    "full-bloom-filter": {"bloom_bits": 10},
}


@pytest.mark.parametrize("opts", SUPPORTED.values(), ids=SUPPORTED.keys())
def test_reads_rocksdb_files_with_other_settings(tmp_path: Path, opts: dict[str, Any]) -> None:
    records = make_records(1200, seed=6, tombstone_every=4)
    data = rocksdb_sst(records, tmp_path / "x.sst", **opts)
    reader = SSTReader(data, "other.sst", block_cache_size=3)
    check_file(records, reader)
    assert list(reader.seek(records[600].key + b"\x00")) == [as_read(r) for r in records[601:]]
    if opts.get("index_type") is TWO_LEVEL:
        assert reader.properties["rocksdb.block.based.table.index.type"] == b"\x02\x00\x00\x00"
        partitions = reader.properties["rocksdb.index.partitions"][0]
        assert partitions > 1 or "metadata_block_size" not in opts


# --- concurrency ------------------------------------------------------------------------------


async def test_writers_run_in_threads_concurrently() -> None:
    batches = [make_records(2000, seed=s, tombstone_every=s + 2) for s in range(6)]
    files = await asyncio.gather(*(asyncio.to_thread(write_sst, b) for b in batches))
    for batch, data in zip(batches, files, strict=True):
        check_file(batch, SSTReader(data, "threaded.sst"))


def test_one_reader_shared_by_threads() -> None:
    records = make_records(5000, seed=7, tombstone_every=4)
    expected = [as_read(r) for r in records]
    reader = SSTReader(write_sst(records), "shared.sst", block_cache_size=3)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(1500):
            i = rng.randrange(len(records))
            if rng.random() < 0.9:
                assert reader.get(records[i].key) == expected[i]
            else:
                assert list(islice(reader.seek(records[i].key), 30)) == expected[i : i + 30]

    with ThreadPoolExecutor(4) as pool:
        for future in [pool.submit(worker, s) for s in range(8)]:
            future.result()


# --- the reader's bounds on claimed sizes never refuse what a writer makes ------------------


@pytest.mark.parametrize(
    "compression", [Z.snappy(), Z.lz4(), Z.zstd()], ids=["snappy", "lz4", "zstd"]
)
def test_most_compressible_blocks_are_within_the_bounds(tmp_path: Path, compression: Any) -> None:
    # Runs of one byte compress at each codec's best ratio, the case the bounds must admit.
    records = [
        Record(b"a", b"id", b"a" * (20 << 20)),
        Record(b"b", b"id", b"\x00" * (3 << 20)),
        Record(b"c", b"", b"x"),
    ]
    data = rocksdb_sst(records, tmp_path / "runs.sst", compression=compression)
    assert list(SSTReader(data, "runs.sst")) == records
    if compression == Z.snappy():
        assert list(SSTReader(write_sst(records), "ours.sst")) == records


def test_writer_refuses_entries_the_reader_would_refuse() -> None:
    fits = MAX_ENTRY_BYTES - 1 - 1 - 4  # key, identity length, 4-byte data length varint
    data = write_sst([Record(b"k", b"", b"v" * fits)])
    assert SSTReader(data, "big.sst").get(b"k") == Record(b"k", b"", b"v" * fits)
    with pytest.raises(EntryTooLargeError, match="exceeds"):
        write_sst([Record(b"k", b"", b"v" * (fits + 1))])
