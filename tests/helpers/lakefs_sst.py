"""A reader of committed files that accepts only what lakeFS's readers accept.

lakeFS reads ranges and metaranges with Pebble's ``sstable.Reader`` (the version its
go.mod pins, cockroachdb/pebble 65ff304d3d7a).  That reader takes a RocksDB-magic table
only at ``format_version`` 2, verifies CRC-32C or xxHash64 block checksums, decompresses
only Snappy and zstd, requires an uncompressed metaindex, reads index keys as internal
keys and index values as plain block handles (it ignores RocksDB's user-key and
delta-encoding index properties, so a file using them reads as garbage), and follows a
two-level index when the index type property says so.

This module is written from that description alone, independently of
``lsmstore.graveler.sst_reader`` (and of the native checksum library: CRC-32C is computed
bit by bit here), and is stricter than Pebble where Pebble would misread silently.  It
also decodes lakeFS's value encoding and, for metaranges, the ``RangeData`` protobuf by
hand.  Any deviation raises :class:`NotLakeFSReadable`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cramjam

ROCKSDB_MAGIC = 0x88E241B785F4CFF7
FOOTER = 53
TRAILER = 5


class NotLakeFSReadable(Exception):
    """The bytes are not a table lakeFS's readers accept (or not a valid one)."""


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def masked_crc32c(buf: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in buf:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def uvarint(buf: bytes, p: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if p >= len(buf):
            raise NotLakeFSReadable("truncated varint")
        b = buf[p]
        p += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, p
        shift += 7
        if shift > 63:
            raise NotLakeFSReadable("varint too long")


@dataclass
class Table:
    entries: list[tuple[bytes, int, int, bytes]]  # user key, sequence, kind, value
    properties: dict[bytes, bytes]
    two_level: bool


def _block(data: bytes, handle: tuple[int, int], checksum: int) -> tuple[bytes, int]:
    offset, size = handle
    end = offset + size
    if end + TRAILER > len(data) - FOOTER:
        raise NotLakeFSReadable(f"block handle {handle} outside the file")
    stored = struct.unpack_from("<I", data, end + 1)[0]
    body = data[offset : end + 1]
    if checksum == 1:
        if masked_crc32c(body) != stored:
            raise NotLakeFSReadable(f"crc32c mismatch at {offset}")
    else:
        import xxhash

        if xxhash.xxh64_intdigest(body) & 0xFFFFFFFF != stored:
            raise NotLakeFSReadable(f"xxhash64 mismatch at {offset}")
    kind = data[end]
    raw = data[offset:end]
    if kind == 0:
        return raw, kind
    if kind == 1:
        return bytes(cramjam.snappy.decompress_raw(raw)), kind
    if kind == 7:
        n, p = uvarint(raw, 0)
        out = bytes(cramjam.zstd.decompress(raw[p:], output_len=n))
        if len(out) != n:
            raise NotLakeFSReadable("zstd size mismatch")
        return out, kind
    raise NotLakeFSReadable(f"compression type {kind} (lakeFS reads 0, 1, 7)")


def _entries(block: bytes) -> list[tuple[bytes, bytes]]:
    """Entries of a block, checking that every restart point has a whole key."""
    if len(block) < 4:
        raise NotLakeFSReadable("block too short")
    n = struct.unpack_from("<I", block, len(block) - 4)[0]
    if n == 0 or n >> 28:
        raise NotLakeFSReadable(f"restart word {n:#x}")
    limit = len(block) - 4 - 4 * n
    if limit < 0:
        raise NotLakeFSReadable("restart array larger than the block")
    restarts = set(struct.unpack_from(f"<{n}I", block, limit))
    out = []
    p = 0
    key = b""
    while p < limit:
        start = p
        shared, p = uvarint(block, p)
        non_shared, p = uvarint(block, p)
        vlen, p = uvarint(block, p)
        if start in restarts and shared:
            raise NotLakeFSReadable("restart point with a shared prefix")
        if shared > len(key) or p + non_shared + vlen > limit:
            raise NotLakeFSReadable("malformed entry")
        key = key[:shared] + block[p : p + non_shared]
        p += non_shared
        out.append((key, block[p : p + vlen]))
        p += vlen
        restarts.discard(start)
    if restarts:
        raise NotLakeFSReadable("restart offsets that are not entries")
    return out


def _handle(value: bytes) -> tuple[int, int]:
    offset, p = uvarint(value, 0)
    size, p = uvarint(value, p)
    if p != len(value):  # RocksDBv2 tables carry no block properties in index values
        raise NotLakeFSReadable("index value is not exactly a block handle")
    return offset, size


def _internal(key: bytes) -> tuple[bytes, int, int]:
    if len(key) < 8:
        raise NotLakeFSReadable("internal key shorter than 8 bytes")
    trailer = struct.unpack_from("<Q", key, len(key) - 8)[0]
    return key[:-8], trailer >> 8, trailer & 0xFF


def _order(ikey: bytes) -> tuple[bytes, int]:
    """Internal key order: user key ascending, then (sequence, kind) descending."""
    if len(ikey) < 8:
        raise NotLakeFSReadable("internal key shorter than 8 bytes")
    return ikey[:-8], -struct.unpack_from("<Q", ikey, len(ikey) - 8)[0]


def read_table(data: bytes) -> Table:
    """Every entry and the properties of a table, as lakeFS would read them."""
    if len(data) < FOOTER:
        raise NotLakeFSReadable("too short")
    footer = data[-FOOTER:]
    if struct.unpack_from("<Q", footer, 45)[0] != ROCKSDB_MAGIC:
        raise NotLakeFSReadable("not a RocksDB block-based table")
    version = struct.unpack_from("<I", footer, 41)[0]
    if version != 2:
        raise NotLakeFSReadable(f"format_version {version} (lakeFS reads RocksDB tables at 2)")
    checksum = footer[0]
    if checksum not in (1, 3):
        raise NotLakeFSReadable(f"checksum type {checksum} (lakeFS reads crc32c, xxhash64)")
    p = 1
    meta_offset, p = uvarint(footer, p)
    meta_size, p = uvarint(footer, p)
    index_offset, p = uvarint(footer, p)
    index_size, p = uvarint(footer, p)
    if p > 41 or any(footer[p:41]):
        raise NotLakeFSReadable("footer padding not zero")

    meta_block, kind = _block(data, (meta_offset, meta_size), checksum)
    if kind != 0:
        raise NotLakeFSReadable("compressed metaindex (Pebble requires its stored size)")
    meta = dict(_entries(meta_block))
    for name in meta:
        if name.startswith((b"rocksdb.range_del", b"pebble.")) or name == b"rocksdb.index":
            raise NotLakeFSReadable(f"meta block {name!r}")
    if b"rocksdb.properties" not in meta:
        raise NotLakeFSReadable("no properties block")
    props_block, _ = _block(data, _handle(meta[b"rocksdb.properties"]), checksum)
    props = dict(_entries(props_block))
    if props.get(b"rocksdb.comparator") != b"leveldb.BytewiseComparator":
        raise NotLakeFSReadable("comparator is not leveldb.BytewiseComparator")
    if props.get(b"rocksdb.merge.operator", b"nullptr") not in (b"nullptr", b"pebble.concatenate"):
        raise NotLakeFSReadable("merge operator lakeFS does not know")
    for flag in (b"rocksdb.index.key.is.user.key", b"rocksdb.index.value.is.delta.encoded"):
        if props.get(flag, b"\x00") != b"\x00":
            raise NotLakeFSReadable(f"{flag!r} set: Pebble ignores it and would misread")
    index_type = struct.unpack("<I", props.get(b"rocksdb.block.based.table.index.type", bytes(4)))[
        0
    ]
    if index_type not in (0, 2):
        raise NotLakeFSReadable(f"index type {index_type}")

    top, _ = _block(data, (index_offset, index_size), checksum)
    index: list[tuple[bytes, tuple[int, int]]] = []
    if index_type == 2:
        for separator, value in _entries(top):
            part, _ = _block(data, _handle(value), checksum)
            for key, v in _entries(part):
                if _order(key) > _order(separator):
                    raise NotLakeFSReadable("index partition key beyond its separator")
                index.append((key, _handle(v)))
    else:
        index = [(key, _handle(v)) for key, v in _entries(top)]

    entries: list[tuple[bytes, int, int, bytes]] = []
    prev: tuple[bytes, int] | None = None
    for separator, handle in index:
        block, _ = _block(data, handle, checksum)
        for ikey, value in _entries(block):
            order = _order(ikey)
            if prev is not None and order <= prev:
                raise NotLakeFSReadable("internal keys not increasing")
            if order > _order(separator):
                raise NotLakeFSReadable("data key beyond its index separator")
            prev = order
            entries.append((*_internal(ikey), value))
    return Table(entries, props, index_type == 2)


# --- lakeFS's value encoding and RangeData protobuf --------------------------------------


def _signed_length(buf: bytes, p: int) -> tuple[int, int]:
    u, p = uvarint(buf, p)
    if u & 1:
        raise NotLakeFSReadable("negative length")
    return u >> 1, p


def decode_value(buf: bytes) -> tuple[bytes, bytes]:
    """lakeFS ``committed.UnmarshalValue``: (identity, data)."""
    n, p = _signed_length(buf, 0)
    identity = buf[p : p + n]
    p += n
    m, p = _signed_length(buf, p)
    if p + m != len(buf) or len(identity) != n:
        raise NotLakeFSReadable("value length mismatch")
    return identity, buf[p:]


def decode_range_data(buf: bytes) -> dict[str, bytes | int]:
    """proto3 ``RangeData {bytes min_key = 1; bytes max_key = 2; uint64
    estimated_size = 3; int64 count = 4;}`` decoded from the wire format by hand."""
    out: dict[str, bytes | int] = {"min_key": b"", "max_key": b"", "estimated_size": 0, "count": 0}
    names = {1: "min_key", 2: "max_key", 3: "estimated_size", 4: "count"}
    p = 0
    while p < len(buf):
        tag, p = uvarint(buf, p)
        field, wire = tag >> 3, tag & 7
        if field in (1, 2) and wire == 2:
            n, p = uvarint(buf, p)
            if p + n > len(buf):
                raise NotLakeFSReadable("truncated bytes field")
            out[names[field]] = buf[p : p + n]
            p += n
        elif field in (3, 4) and wire == 0:
            v, p = uvarint(buf, p)
            if field == 4 and v >= 1 << 63:
                v -= 1 << 64  # int64: two's complement
            out[names[field]] = v
        else:
            raise NotLakeFSReadable(f"unexpected field {field} wire type {wire}")
    return out


def read_records(data: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """(key, identity, data) of every entry of a committed file; all must be SETs."""
    table = read_table(data)
    out = []
    for key, _seq, kind, value in table.entries:
        if kind != 1:
            raise NotLakeFSReadable(f"entry kind {kind} in a committed file")
        out.append((key, *decode_value(value)))
    return out
