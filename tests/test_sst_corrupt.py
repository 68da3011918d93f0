"""Damaged and unsupported SSTs: a typed error naming the file, never a wrong answer.

Every byte of a file is truncated at or flipped, and the reader must then either raise
CorruptFileError (naming the file) or give exactly the original answers -- the latter
only where the format leaves bytes unchecked (footer padding of format_version <= 5).
Files written with settings the reader does not implement raise UnsupportedFormatError.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rocksdict
import xxhash
from helpers.rocksdb_files import rocksdb_sst

from lsmstore.errors import CorruptFileError, UnsupportedFormatError
from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import write_sst

NAME = "_lsm/ranges/damaged"
Answers = tuple[list[Record], list[Record | None], list[list[Record]]]


def sample_records(n: int, seed: int = 1) -> list[Record]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = b"key/%05d" % (i * 2)
        if i % 6 == 5:
            out.append(tombstone(key))
        elif i % 2:  # compressible: Snappy-compressed blocks
            out.append(Record(key, rng.randbytes(32), b"text " * 30))
        else:  # incompressible: blocks stored raw
            out.append(Record(key, rng.randbytes(32), rng.randbytes(150)))
    return out


def answers(data: bytes, records: list[Record]) -> Answers:
    """Everything a reader can be asked: a scan, every get (plus absent keys), some seeks."""
    reader = SSTReader(data, NAME, block_cache_size=2)
    scan = list(reader)
    probes = [r.key for r in records] + [b"", b"key/00001", b"zzz"]
    gets = [reader.get(k) for k in probes]
    seeks = [list(reader.seek(r.key + b"\x00"))[:2] for r in records[::7]]
    return scan, gets, seeks


def outcome(data: bytes, records: list[Record]) -> Answers | None:
    """The answers, or None when the reader raised CorruptFileError naming the file."""
    try:
        return answers(data, records)
    except CorruptFileError as e:
        assert e.name == NAME
        assert str(e).startswith(NAME + ": ")
        return None


def writer_file(records: list[Record]) -> bytes:
    return write_sst(records)


# --- truncation and flipped bytes ------------------------------------------------------------


def test_truncation_at_every_point_is_reported() -> None:
    records = sample_records(60)
    data = writer_file(records)
    for n in range(len(data)):
        assert outcome(data[:n], records) is None, f"truncated to {n} bytes"


def check_flips(data: bytes, records: list[Record], footer_checked: bool) -> None:
    baseline = answers(data, records)
    footer = len(data) - 53
    detected = 0
    for pos in range(len(data)):
        for mask in (0x01, 0x80):
            bad = bytearray(data)
            bad[pos] ^= mask
            got = outcome(bytes(bad), records)
            if got is None:
                detected += 1
            elif pos < footer or footer_checked:
                pytest.fail(f"flip {mask:#x} at byte {pos} of {len(data)} went undetected")
            else:
                assert got == baseline, f"flip at footer byte {pos - footer}: wrong answer"
    assert detected >= 2 * footer  # every block and trailer byte


def test_every_flipped_byte_is_detected_or_harmless() -> None:
    records = sample_records(60)
    data = writer_file(records)
    assert len(SSTReader(data, NAME)._offsets) >= 3
    check_flips(data, records, footer_checked=False)


def test_every_flipped_byte_of_a_format6_file_is_detected(tmp_path: Path) -> None:
    records = sample_records(40, seed=2)
    data = rocksdb_sst(records, tmp_path / "v6.sst", format_version=6)
    check_flips(data, records, footer_checked=True)  # format 6 checksums its footer


def test_random_multi_byte_damage_in_a_large_file() -> None:
    records = sample_records(3000, seed=3)
    data = writer_file(records)
    baseline = answers(data, records)
    rng = random.Random(4)
    for _ in range(60):
        bad = bytearray(data)
        start = rng.randrange(len(data) - 53)
        for i in range(start, min(start + rng.randrange(1, 40), len(data) - 53)):
            bad[i] = rng.randrange(256)
        got = outcome(bytes(bad), records)
        assert got is None or (bytes(bad) == data and got == baseline)


def test_garbage_and_empty_input() -> None:
    for data in (b"", b"\x00" * 53, b"not an sst" * 100, random.Random(5).randbytes(5000)):
        with pytest.raises(CorruptFileError) as info:
            SSTReader(data, NAME)
        assert info.value.name == NAME


# --- unsupported settings ----------------------------------------------------------------------

C = rocksdict.ChecksumType
Z = rocksdict.DBCompressionType
UNSUPPORTED = {
    "data-block-hash-index": (
        {"data_block_index": rocksdict.DataBlockIndexType.binary_and_hash()},
        "hash index",
    ),
    "no-checksums": ({"checksum": C.no_checksum()}, "no checksums"),
    "bzip2": ({"compression": Z.bz2()}, "compression bzip2"),
    "format-version-7": ({"format_version": 7}, "format_version 7"),
}


@pytest.mark.parametrize(("opts", "match"), UNSUPPORTED.values(), ids=UNSUPPORTED.keys())
def test_rocksdb_settings_not_implemented(tmp_path: Path, opts: dict[str, Any], match: str) -> None:
    data = rocksdb_sst(sample_records(200), tmp_path / "u.sst", **opts)
    with pytest.raises(UnsupportedFormatError, match=match) as info:
        answers(data, sample_records(200))
    assert info.value.name == NAME


# Crafted files: a block's bytes changed and its checksum recomputed, so only the setting differs.


def varint(buf: bytes, p: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[p]
        p += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, p
        shift += 7


def block_entries(block: bytes) -> list[tuple[bytes, int, int]]:
    """(key, value offset, value length) of each entry of an uncompressed block."""
    num_restarts = int.from_bytes(block[-4:], "little")
    limit = len(block) - 4 - 4 * num_restarts
    out, p, key = [], 0, b""
    while p < limit:
        shared, p = varint(block, p)
        non_shared, p = varint(block, p)
        vlen, p = varint(block, p)
        key = key[:shared] + block[p : p + non_shared]
        p += non_shared
        out.append((key, p, vlen))
        p += vlen
    return out


def with_block_patched(
    data: bytes, offset: int, size: int, patch: Callable[[bytearray], None]
) -> bytes:
    """``data`` with the block at ``offset`` patched in place and its xxh3 checksum redone."""
    out = bytearray(data)
    block = bytearray(out[offset : offset + size])
    patch(block)
    assert len(block) == size and out[offset + size] == 0  # uncompressed
    out[offset : offset + size] = block
    check = (xxhash.xxh3_64_intdigest(bytes(block)) ^ 0) & 0xFFFFFFFF  # type byte 0
    out[offset + size + 1 : offset + size + 5] = check.to_bytes(4, "little")
    return bytes(out)


def properties_handle(data: bytes) -> tuple[int, int]:
    footer = len(data) - 53
    meta_offset, p = varint(data, footer + 1)
    meta_size, _ = varint(data, p)
    meta = data[meta_offset : meta_offset + meta_size]
    for key, voff, _vlen in block_entries(meta):
        if key == b"rocksdb.properties":
            offset, p = varint(meta, voff)
            size, _ = varint(meta, p)
            return offset, size
    raise AssertionError("no properties block")


def with_property(data: bytes, name: bytes, value: bytes) -> bytes:
    offset, size = properties_handle(data)
    entries = {k: (voff, vlen) for k, voff, vlen in block_entries(data[offset : offset + size])}
    voff, vlen = entries[name]
    assert len(value) == vlen

    def patch(block: bytearray) -> None:
        block[voff : voff + vlen] = value

    return with_block_patched(data, offset, size, patch)


def test_crafting_keeps_a_file_valid() -> None:
    records = sample_records(100)
    data = writer_file(records)
    same = with_property(data, b"rocksdb.num.range-deletions", b"\x00")
    assert answers(same, records) == answers(data, records)


@pytest.mark.parametrize(
    ("prop", "value", "match"),
    [
        (b"rocksdb.comparator", b"leveldb.BytewiseComparatoR", "comparator"),
        (b"rocksdb.num.range-deletions", b"\x01", "range deletions"),
        (b"rocksdb.merge.operands", b"\x02", "merge operands"),
        (b"rocksdb.block.based.table.index.type", b"\x01\x00\x00\x00", "hash search"),
        (b"rocksdb.block.based.table.index.type", b"\x03\x00\x00\x00", "first key"),
    ],
)
def test_crafted_unsupported_properties(prop: bytes, value: bytes, match: str) -> None:
    records = sample_records(100)
    data = with_property(writer_file(records), prop, value)
    with pytest.raises(UnsupportedFormatError, match=match):
        SSTReader(data, NAME)


def test_crafted_merge_entry_is_unsupported(tmp_path: Path) -> None:
    records = sample_records(300)
    data = rocksdb_sst(records, tmp_path / "raw.sst", compression=Z.none())
    reader = SSTReader(data, NAME)
    offset, size = reader._offsets[1], reader._sizes[1]  # a middle block: read lazily
    key, voff, _ = block_entries(data[offset : offset + size])[0]

    def patch(block: bytearray) -> None:
        block[voff - 8] = 2  # the type byte of the first entry's trailer: MERGE

    bad = SSTReader(with_block_patched(data, offset, size, patch), NAME)
    with pytest.raises(UnsupportedFormatError, match="entry type 2"):
        bad.get(key[:-8])
    with pytest.raises(UnsupportedFormatError, match="entry type 2"):
        list(bad)


@pytest.mark.parametrize(
    ("magic", "match"),
    [
        (0x8242229663BF9564, "plain table"),
        (0x926789D0C5F17873, "cuckoo"),
        (0xDB4775248B80FB57, "legacy"),
    ],
)
def test_other_table_formats_are_unsupported(magic: int, match: str) -> None:
    data = bytearray(writer_file(sample_records(10)))
    data[-8:] = magic.to_bytes(8, "little")
    with pytest.raises(UnsupportedFormatError, match=match):
        SSTReader(bytes(data), NAME)
