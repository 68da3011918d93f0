"""SSTs built by hand, block by block, with valid checksums: for files no writer makes.

``crafted_sst(...)`` builds a small valid table (format_version 2, CRC-32C, one data
block per record, a binary-search or two-level index) and lets a caller replace any
part: a block's stored bytes and compression byte, a handle, a property, the footer's
handles.  Checksums are always recomputed, so the reader must find the problem in the
structure, not in a checksum.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from lsmstore.graveler.value import encode_value
from lsmstore.graveler.varint import encode_uvarint
from tests.helpers.lakefs_sst import ROCKSDB_MAGIC, masked_crc32c

varint = encode_uvarint


def entry(key: bytes, value: bytes, shared: int = 0) -> bytes:
    return varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value


def block(entries: list[bytes], restarts: list[int] | None = None) -> bytes:
    """Entries (already encoded) and a restart array (default: the first entry only)."""
    body = b"".join(entries)
    points = [0] if restarts is None else restarts
    return body + struct.pack(f"<{len(points)}I", *points) + struct.pack("<I", len(points))


def handle(offset: int, size: int) -> bytes:
    return varint(offset) + varint(size)


def internal(key: bytes, kind: int = 1) -> bytes:
    return key + struct.pack("<Q", kind)  # sequence 0


@dataclass
class Parts:
    """What the file will hold; tests change fields before :meth:`build`."""

    keys: list[bytes] = field(default_factory=lambda: [b"a", b"b", b"c"])
    #: data block i's stored bytes and compression byte (default: uncompressed block)
    data: dict[int, tuple[bytes, int]] = field(default_factory=dict)
    #: data block i's handle in the index (default: where it was written)
    data_handles: dict[int, tuple[int, int]] = field(default_factory=dict)
    two_level: bool = False
    partition_handle: tuple[int, int] | None = None
    index: tuple[bytes, int] | None = None  # the (top-level) index's stored bytes, kind
    properties: dict[bytes, bytes] = field(default_factory=dict)
    properties_block: tuple[bytes, int] | None = None
    metaindex: tuple[bytes, int] | None = None
    footer_handles: tuple[tuple[int, int], tuple[int, int]] | None = None  # (meta, index)
    patch: Callable[[bytearray], None] | None = None


def data_block(key: bytes) -> bytes:
    return block([entry(internal(key), encode_value(b"id-" + key, b"value-" + key))])


def build(parts: Parts) -> bytes:
    out = bytearray()

    def put(contents: bytes, kind: int = 0) -> tuple[int, int]:
        offset = len(out)
        body = contents + bytes((kind,))
        out.extend(body + struct.pack("<I", masked_crc32c(body)))
        return offset, len(contents)

    handles = []
    for i, key in enumerate(parts.keys):
        stored, kind = parts.data.get(i, (data_block(key), 0))
        h = put(stored, kind)
        handles.append(parts.data_handles.get(i, h))
    index_entries = [
        entry(internal(k), handle(*h)) for k, h in zip(parts.keys, handles, strict=True)
    ]
    index = block(index_entries, list(_offsets(index_entries)))
    if parts.two_level:
        partition = put(index)
        if parts.partition_handle is not None:
            partition = parts.partition_handle
        index = block([entry(internal(parts.keys[-1]), handle(*partition))])
    index_handle = put(*(parts.index or (index, 0)))
    props = {
        b"rocksdb.comparator": b"leveldb.BytewiseComparator",
        b"rocksdb.num.entries": varint(len(parts.keys)),
        b"rocksdb.num.data.blocks": varint(len(parts.keys)),
        b"rocksdb.block.based.table.index.type": struct.pack("<I", 2 if parts.two_level else 0),
        b"rocksdb.index.key.is.user.key": b"\x00",
        b"rocksdb.index.value.is.delta.encoded": b"\x00",
        **parts.properties,
    }
    prop_entries = [entry(k, v) for k, v in sorted(props.items())]
    props_handle = put(
        *(parts.properties_block or (block(prop_entries, list(_offsets(prop_entries))), 0))
    )
    meta = block([entry(b"rocksdb.properties", handle(*props_handle))])
    meta_handle = put(*(parts.metaindex or (meta, 0)))
    if parts.footer_handles is not None:
        meta_handle, index_handle = parts.footer_handles
    handles_part = handle(*meta_handle) + handle(*index_handle)
    out += b"\x01" + handles_part.ljust(40, b"\x00") + struct.pack("<IQ", 2, ROCKSDB_MAGIC)
    if parts.patch is not None:
        parts.patch(out)
    return bytes(out)


def _offsets(entries: list[bytes]) -> list[int]:
    offsets, p = [], 0
    for e in entries:
        offsets.append(p)
        p += len(e)
    return offsets
