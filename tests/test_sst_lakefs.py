"""Committed files lakeFS can read, and lakeFS's files we can read.

Every committed file (range, metarange) a tree written here consists of is read back
through ``helpers.lakefs_sst``: an independent reading of the format that accepts only
what lakeFS's readers (Pebble) accept, decodes the values and the RangeData protobuf by
hand, and verifies CRC-32C bit by bit.  Files RocksDB writes in lakeFS's form (format 2,
CRC-32C, one- or two-level index, as Pebble does for large ranges) are read by our
reader.  The checker itself is shown to refuse what lakeFS would refuse.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import pytest
import rocksdict
from helpers.lakefs_sst import (
    NotLakeFSReadable,
    decode_range_data,
    decode_value,
    read_records,
    read_table,
)
from helpers.rocksdb_files import rocksdb_sst
from helpers.sst_dump import sst_dump_scan

from lsmstore import layout
from lsmstore.errors import CorruptFileError, EntryTooLargeError, InvalidInputError
from lsmstore.graveler.apply import write_tree
from lsmstore.graveler.ids import file_id
from lsmstore.graveler.metarange import Metarange, encode_range_data, write_metarange
from lsmstore.graveler.ranges import RangeInfo, RangePolicy, record_size
from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.sst_reader import SSTReader, parse_plain_block
from lsmstore.graveler.sst_writer import (
    MAX_ENTRY_BYTES,
    METARANGE,
    RANGE,
    add_user_properties,
    write_committed_columns,
    write_committed_sst,
    write_sst,
)
from lsmstore.graveler.tree import TreeReader
from lsmstore.storage.memory import MemoryStore

C = rocksdict.ChecksumType
Z = rocksdict.DBCompressionType
TWO_LEVEL = rocksdict.BlockBasedIndexType.two_level_index_search()


def records(n: int, seed: int = 1) -> list[Record]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = b"tables/t/part-%06d/%s" % (i, rng.randbytes(rng.randrange(0, 8)).hex().encode())
        value = rng.randbytes(rng.choice([0, 20, 150])) if i % 3 else b"metadata " * 20
        out.append(Record(key, hashlib.sha256(value).digest(), value))
    return out


async def test_every_committed_file_of_a_tree_is_lakefs_readable(tmp_path: Path) -> None:
    store = MemoryStore()
    recs = records(3000)
    policy = RangePolicy(min_bytes=20_000, max_bytes=80_000, raggedness=7)
    tree_id = await write_tree(store, recs, policy)
    objects = {m.key: await store.get(m.key) async for m in store.list(layout.RANGES)}
    for i, data in enumerate(objects.values()):  # RocksDB reads and verifies each one too
        path = tmp_path / f"{i}.sst"
        path.write_bytes(data)
        assert len(sst_dump_scan(path)) == SSTReader(data, str(path)).num_entries
    metarange = read_table(objects.pop(layout.range_key(tree_id)))
    assert len(objects) == len(metarange.entries) > 5  # the ranges the metarange lists

    assert metarange.properties[b"type"] == b"metaranges"
    seen: list[Record] = []
    for key, _seq, _kind, value in metarange.entries:
        range_id, data = decode_value(value)
        rng = decode_range_data(data)
        range_sst = objects[layout.range_key(range_id.decode())]
        range_records = [Record(*r) for r in read_records(range_sst)]
        assert file_id(range_records) == range_id.decode()  # IDs still come from records
        assert rng["min_key"] == range_records[0].key
        assert rng["max_key"] == range_records[-1].key == key
        assert rng["count"] == len(range_records)
        assert rng["estimated_size"] == sum(map(record_size, range_records))
        props = read_table(range_sst).properties
        assert props[b"type"] == b"ranges"
        assert props[b"min_key"] == range_records[0].key
        assert props[b"max_key"] == range_records[-1].key
        assert props[b"count"] == b"%d" % len(range_records)
        assert props[b"estimated_size_bytes"] == b"%d" % rng["estimated_size"]
        seen += range_records
    assert seen == recs
    # and our own reader reads the same tree from the same bytes
    meta = Metarange.from_reader(
        tree_id, SSTReader(await store.get(layout.range_key(tree_id)), "m")
    )
    assert [r.id for r in meta] == [decode_value(v)[0].decode() for *_, v in metarange.entries]


def test_metarange_file_is_lakefs_readable() -> None:
    ranges = [
        RangeInfo(hashlib.sha256(b"%d" % i).hexdigest(), b"k%03da" % i, b"k%03dz" % i, i + 1, 99)
        for i in range(300)
    ]
    _, data = write_metarange(ranges)
    table = read_table(data)
    props = table.properties
    assert (props[b"type"], props[b"count"]) == (b"metaranges", b"300")
    assert (props[b"min_key"], props[b"max_key"]) == (b"k000z", b"k299z")
    for info, (key, identity, rd) in zip(ranges, read_records(data), strict=True):
        assert (key, identity.decode()) == (info.max_key, info.id)
        assert decode_range_data(rd) == {
            "min_key": info.min_key,
            "max_key": info.max_key,
            "estimated_size": 99,
            "count": info.count,
        }


def test_committed_form_is_format_2_with_crc32c() -> None:
    data = write_committed_sst(records(50), RANGE)
    assert int.from_bytes(data[-12:-8], "little") == 2  # format_version
    assert data[-53] == 1  # CRC-32C
    reader = SSTReader(data, "r")
    assert reader.properties["rocksdb.index.key.is.user.key"] == b"\x00"
    assert reader.user_properties["type"] == b"ranges"


# --- lakeFS's form as RocksDB (and Pebble) write it: our reader reads it -----------------------

LAKEFS_FORMS = {
    "one-level": {},
    "two-level": {"index_type": TWO_LEVEL, "metadata_block_size": 256},
    "two-level-small-blocks": {
        "index_type": TWO_LEVEL,
        "metadata_block_size": 128,
        "block_size": 256,
    },
    "two-level-uncompressed": {
        "index_type": TWO_LEVEL,
        "metadata_block_size": 400,
        "compression": Z.none(),
    },
    "zstd": {"compression": Z.zstd()},
    "xxhash64": {"checksum": C.xxhash64(), "index_type": TWO_LEVEL, "metadata_block_size": 300},
}


@pytest.mark.parametrize("opts", LAKEFS_FORMS.values(), ids=LAKEFS_FORMS.keys())
def test_reads_files_in_lakefs_form(tmp_path: Path, opts: dict[str, Any]) -> None:
    recs = records(4000, seed=3)
    settings = {"format_version": 2, "checksum": C.crc32c(), **opts}
    data = rocksdb_sst(recs, tmp_path / "l.sst", **settings)
    table = read_table(data)  # lakeFS reads it
    assert table.two_level == ("index_type" in opts)
    reader = SSTReader(data, "lakefs.sst", block_cache_size=2)
    assert list(reader) == recs
    for rec in recs[::97]:
        assert reader.get(rec.key) == rec
        assert reader.get(rec.key + b"\x00") is None
    assert list(reader.seek(recs[1234].key)) == recs[1234:]
    if table.two_level:
        assert reader.properties["rocksdb.index.partitions"] != b"\x01"


def test_lakefs_properties_must_match_the_file(tmp_path: Path) -> None:
    recs = records(100)
    plain = rocksdb_sst(recs, tmp_path / "p.sst", format_version=2, checksum=C.crc32c())
    good = {b"min_key": recs[0].key, b"max_key": recs[-1].key, b"count": b"100"}
    assert SSTReader(add_user_properties(plain, good), "ok").user_properties["count"] == b"100"
    for name, wrong in ((b"min_key", recs[1].key), (b"max_key", b"zz"), (b"count", b"99")):
        bad = add_user_properties(plain, {**good, name: wrong})
        with pytest.raises(CorruptFileError, match=name.decode()):
            SSTReader(bad, "bad")


def test_user_properties_cannot_replace_rocksdb_ones() -> None:
    data = write_committed_sst(records(3), RANGE)
    with pytest.raises(ValueError, match="taken"):
        add_user_properties(data, {b"type": b"x"})
    with pytest.raises(ValueError, match="taken"):
        add_user_properties(data, {b"rocksdb.comparator": b"x"})


def test_committed_writer_refuses_tombstones_and_unknown_kinds() -> None:
    with pytest.raises(InvalidInputError, match="tombstone"):
        write_committed_sst([tombstone(b"a")], RANGE)
    with pytest.raises(InvalidInputError, match="kind"):
        write_committed_sst(records(2), "trees")
    assert read_table(write_committed_sst(records(2), METARANGE)).properties[b"type"] == (
        b"metaranges"
    )


def test_committed_writer_names_the_record_at_fault() -> None:
    """The column-at-a-time checks hand bad input to the record-at-a-time writer, whose
    error names the record; long values (two-byte length headers) encode as lakeFS's."""
    good = records(40)
    long_value = Record(good[-1].key + b"~", b"i" * 70, b"x" * 5000)
    cases: list[tuple[list[Record], type[Exception], str]] = [
        ([*good[:20], tombstone(good[20].key), *good[21:]], InvalidInputError, "tombstone"),
        ([good[1], good[0]], InvalidInputError, "strictly increasing"),
        ([good[0], good[0]], InvalidInputError, "strictly increasing"),
        ([Record(b"", b"i", b"v"), *good], InvalidInputError, "non-empty"),
        ([Record(b"big", b"i", bytes(MAX_ENTRY_BYTES))], EntryTooLargeError, "b'big'"),
        ([], InvalidInputError, "no records"),
    ]
    for recs, error, match in cases:
        with pytest.raises(error, match=match):
            write_committed_sst(recs, RANGE)
    mixed = [*good, long_value]
    assert read_records(write_committed_sst(mixed, RANGE)) == [
        (r.key, r.identity, r.value) for r in mixed
    ]


#: Properties RocksDB gives every file it writes its own value of.
_PER_FILE = (
    b"rocksdb.creation.time",
    b"rocksdb.file.creation.time",
    b"rocksdb.creating.session.identity",
)


def _timeless(data: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """An SST's bytes before its properties block, and its properties but those RocksDB
    gives each file (the rest of the file follows from these)."""
    p = len(data) - 53 + 1  # the footer's metaindex handle, after the checksum type
    meta_offset, p = _uvarint(data, p)
    meta_size, _ = _uvarint(data, p)
    handles = dict(parse_plain_block(data[meta_offset : meta_offset + meta_size]))
    props_offset, _ = _uvarint(handles[b"rocksdb.properties"], 0)
    props = read_table(data).properties
    return data[:props_offset], {k: v for k, v in props.items() if k not in _PER_FILE}


def _uvarint(buf: bytes, p: int) -> tuple[int, int]:
    n = shift = 0
    while buf[p] & 0x80:
        n |= (buf[p] & 0x7F) << shift
        p, shift = p + 1, shift + 7
    return n | buf[p] << shift, p + 1


def test_committed_writer_given_the_size_writes_the_same_bytes() -> None:
    """A range writer's cut passes its records' size (and skips the column checks): the
    bytes are those of the checking path, on random records -- shared prefixes, empty
    and long values, long keys, one-record ranges."""
    rng = random.Random(5)
    for n in (1, 2, 15, 16, 17, 300):
        keys: set[bytes] = set()
        while len(keys) < n:
            prefix = rng.choice([b"", b"a", b"tables/events/part=00001/obj-", b"k" * 300])
            keys.add(prefix + rng.randbytes(rng.randrange(0, 4)) + b"%d" % rng.randrange(99))
        recs = []
        for key in sorted(keys):
            value = rng.randbytes(rng.choice([0, 1, 63, 64, 120, 8191, 8192, 20_000]))
            recs.append(Record(key, rng.randbytes(rng.choice([0, 32, 70])), value))
        size = sum(map(record_size, recs))
        cols = ([r.key for r in recs], [r.identity for r in recs], [r.value for r in recs])
        given = write_committed_columns(*cols, RANGE, size=size)
        assert _timeless(given) == _timeless(write_committed_sst(recs, RANGE))
        assert read_table(given).properties[b"estimated_size_bytes"] == b"%d" % size


def test_committed_writer_entry_bound_at_its_edge() -> None:
    """An entry of exactly MAX_ENTRY_BYTES is written, one byte more is refused, with or
    without the size given (the size decides whether entries are measured)."""
    identity = b"i" * 32
    value_bytes = MAX_ENTRY_BYTES - 1 - (1 + 32 + 4)  # key, value headers of 1 and 4 bytes
    for extra, ok in ((0, True), (1, False)):
        rec = Record(b"k", identity, bytes(value_bytes + extra))
        for size in (None, record_size(rec)):
            if ok:
                data = write_committed_columns([rec.key], [identity], [rec.value], RANGE, size=size)
                assert list(SSTReader(data, "edge")) == [rec]
            else:
                with pytest.raises(EntryTooLargeError):
                    write_committed_columns([rec.key], [identity], [rec.value], RANGE, size=size)


# --- the checker refuses what lakeFS refuses ----------------------------------------------------

NOT_LAKEFS = {
    "staging-form": (None, "format_version 5"),
    "format-3-user-key-index": ({"format_version": 3, "checksum": C.crc32c()}, "format_version 3"),
    "xxh3": ({"format_version": 2, "checksum": C.xxh3()}, "checksum type 4"),
    "lz4": ({"format_version": 2, "checksum": C.crc32c(), "compression": Z.lz4()}, "compression"),
}


@pytest.mark.parametrize(("opts", "match"), NOT_LAKEFS.values(), ids=NOT_LAKEFS.keys())
def test_checker_refuses_what_lakefs_cannot_read(
    tmp_path: Path, opts: dict[str, Any] | None, match: str
) -> None:
    recs = records(500)
    data = write_sst(recs) if opts is None else rocksdb_sst(recs, tmp_path / "n.sst", **opts)
    with pytest.raises(NotLakeFSReadable, match=match):
        read_table(data)
    assert list(SSTReader(data, "ours")) == recs  # while our reader takes all of them


def test_checker_verifies_crc32c() -> None:
    data = bytearray(write_committed_sst(records(200), RANGE))
    data[100] ^= 1
    with pytest.raises(NotLakeFSReadable, match="crc32c mismatch"):
        read_table(bytes(data))


async def test_tree_in_lakefs_form_reads_through_tree_reader(tmp_path: Path) -> None:
    # Ranges and a metarange as lakeFS writes them: format 2, CRC-32C, two-level indexes
    # (as Pebble makes for ranges whose index outgrows a block), lakeFS's properties,
    # RangeData entries.
    store = MemoryStore()
    recs = records(2400, seed=9)
    chunks = [recs[i : i + 600] for i in range(0, len(recs), 600)]
    lakefs = {"format_version": 2, "checksum": C.crc32c(), "index_type": TWO_LEVEL}
    infos = []
    for i, chunk in enumerate(chunks):
        data = rocksdb_sst(chunk, tmp_path / f"r{i}.sst", metadata_block_size=200, **lakefs)
        data = add_user_properties(
            data,
            {
                b"type": b"ranges",
                b"min_key": chunk[0].key,
                b"max_key": chunk[-1].key,
                b"count": b"%d" % len(chunk),
                b"estimated_size_bytes": b"%d" % len(data),
            },
        )
        assert read_table(data).two_level
        info = RangeInfo(file_id(chunk), chunk[0].key, chunk[-1].key, len(chunk), len(data))
        await store.put(layout.range_key(info.id), data)
        infos.append(info)
    entries = [Record(info.max_key, info.id.encode(), encode_range_data(info)) for info in infos]
    meta = rocksdb_sst(entries, tmp_path / "m.sst", **lakefs)
    meta = add_user_properties(meta, {b"type": b"metaranges"})
    tree_id = file_id(entries)
    await store.put(layout.range_key(tree_id), meta)

    tree = TreeReader(DirectSource(store), tree_id)
    assert await tree.ranges() == infos
    assert [r async for r in tree] == recs
    for rec in recs[::37]:
        assert await tree.get(rec.key) == rec
        assert await tree.get(rec.key + b"\x00") is None
