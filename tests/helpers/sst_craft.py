"""Hand-built block-based SSTs (format_version 5, uncompressed blocks, xxh3 checksums)
whose every block carries a *valid* checksum, for fuzzing what a reader does with
well-checksummed nonsense: lying properties, bad handles, malformed entries.

:func:`build` writes a correct file from :class:`Parts`; a fuzzer changes the parts
(or replaces a block's contents outright) and the checksums still match.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import xxhash

from lsmstore.graveler.record import Record
from lsmstore.graveler.value import encode_value
from tests.helpers.crafted_sst import varint

MAGIC = 0x88E241B785F4CFF7
FORMAT_VERSION = 5
CHECKSUM_XXH3 = 4
COMPARATOR = b"leveldb.BytewiseComparator"


def block(entries: list[tuple[bytes, bytes]], restarts: list[int] | None = None) -> bytes:
    """Entries without prefix sharing, a restart point at each (unless given)."""
    out = bytearray()
    offsets = []
    for key, value in entries:
        offsets.append(len(out))
        out += varint(0) + varint(len(key)) + varint(len(value)) + key + value
    points = offsets if restarts is None else restarts
    for off in points or [0]:
        out += struct.pack("<I", off & 0xFFFFFFFF)
    out += struct.pack("<I", len(points or [0]))
    return bytes(out)


def internal_key(key: bytes, kind: int = 1, seq: int = 0) -> bytes:
    return key + struct.pack("<Q", (seq << 8) | kind)


def handle(offset: int, size: int) -> bytes:
    return varint(offset) + varint(size)


@dataclass
class Parts:
    """What :func:`build` lays out; any field may be changed to something wrong."""

    #: Data blocks as (internal key, value) entries.
    blocks: list[list[tuple[bytes, bytes]]]
    #: Properties (raw values); :func:`parts_of` fills in the usual ones.
    properties: dict[bytes, bytes] = field(default_factory=dict)
    #: Block contents replacing a built block: "data<i>", "index", "properties",
    #: "metaindex".
    replace: dict[str, bytes] = field(default_factory=dict)
    #: Index entries (key, handle bytes) replacing the built ones, if set.
    index: list[tuple[bytes, bytes]] | None = None
    #: Footer handles replacing the built ones, if set: (metaindex, index).
    footer: tuple[bytes, bytes] | None = None
    format_version: int = FORMAT_VERSION


def parts_of(records: list[Record], per_block: int = 4) -> Parts:
    """A correct table of ``records`` (sorted, unique keys; tombstones as deletions)."""
    entries = [
        (internal_key(r.key, 0), b"")
        if r.value is None
        else (internal_key(r.key, 1), encode_value(r.identity, r.value))
        for r in records
    ]
    blocks = [entries[i : i + per_block] for i in range(0, len(entries), per_block)]
    props = {
        b"rocksdb.comparator": COMPARATOR,
        b"rocksdb.num.entries": varint(len(entries)),
        b"rocksdb.num.data.blocks": varint(len(blocks)),
    }
    return Parts(blocks, props)


def build(parts: Parts) -> bytes:
    out = bytearray()

    def emit(name: str, contents: bytes) -> tuple[int, int]:
        contents = parts.replace.get(name, contents)
        offset = len(out)
        trailer = b"\x00" + struct.pack("<I", xxhash.xxh3_64_intdigest(contents) & 0xFFFFFFFF)
        out.extend(contents + trailer)
        return offset, len(contents)

    index = []
    for i, entries in enumerate(parts.blocks):
        h = emit(f"data{i}", block(entries))
        index.append((entries[-1][0] if entries else b"", handle(*h)))
    index_h = emit("index", block(parts.index if parts.index is not None else index))
    props_h = emit("properties", block(sorted(parts.properties.items())))
    meta_h = emit("metaindex", block([(b"rocksdb.properties", handle(*props_h))]))
    meta, idx = parts.footer or (handle(*meta_h), handle(*index_h))
    handles = (meta + idx)[:40].ljust(40, b"\x00")
    out += bytes([CHECKSUM_XXH3]) + handles
    out += struct.pack("<I", parts.format_version) + struct.pack("<Q", MAGIC)
    return bytes(out)
