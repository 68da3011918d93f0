"""Unsigned LEB128 varints, as RocksDB's block format and protobuf write them."""

from __future__ import annotations


def encode_uvarint(n: int) -> bytes:
    """The varint of ``n`` (>= 0): seven bits a byte, low first, high bit = more."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
