"""Block checksums of RocksDB block-based tables (docs/format.md, "Block trailer and
checksums").

Each function takes a block's contents followed by its compression-type byte (what the
trailer's checksum covers) and returns the 32-bit value stored in the trailer (before
the ``format_version`` 6 context modifier).  All are computed by native libraries:
``google-crc32c`` (hardware CRC-32C where the CPU has it) and ``xxhash``.
"""

from __future__ import annotations

from collections.abc import Callable

import google_crc32c
import xxhash

CRC32C = 1
XXHASH32 = 2
XXHASH64 = 3
XXH3 = 4

_MASK32 = 0xFFFFFFFF
_XXH3_LAST_BYTE_PRIME = 0x6B9083D9
_CRC_MASK_DELTA = 0xA282EAD8

Buffer = bytes | memoryview


def crc32c_masked(buf: Buffer) -> int:
    """CRC-32C (Castagnoli) of ``buf``, masked as LevelDB/RocksDB/Pebble store it:
    ``((c >> 15 | c << 17) + 0xa282ead8) mod 2^32``."""
    c: int = google_crc32c.value(buf if isinstance(buf, bytes) else bytes(buf))
    return (((c >> 15) | (c << 17)) + _CRC_MASK_DELTA) & _MASK32


def xxh32(buf: Buffer) -> int:
    return int(xxhash.xxh32_intdigest(buf))


def xxh64_low32(buf: Buffer) -> int:
    return int(xxhash.xxh64_intdigest(buf)) & _MASK32


def xxh3_rocksdb(buf: Buffer) -> int:
    """RocksDB's XXH3 block checksum: the low 32 bits of XXH3 over the contents, xor the
    type byte times a prime."""
    digest = int(xxhash.xxh3_64_intdigest(buf[:-1]))
    return (digest ^ (buf[-1] * _XXH3_LAST_BYTE_PRIME)) & _MASK32


#: Footer checksum type -> function.
BY_TYPE: dict[int, Callable[[Buffer], int]] = {
    CRC32C: crc32c_masked,
    XXHASH32: xxh32,
    XXHASH64: xxh64_low32,
    XXH3: xxh3_rocksdb,
}
