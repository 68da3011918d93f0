"""Read an SST written by :func:`~lsmstore.graveler.sst_writer.write_sst` (or lakeFS/Pebble,
or RocksDB with compatible settings) from its bytes, in Python (checksums and
decompression by native libraries).

The byte layout is specified in docs/format.md.  Opening parses and verifies the footer,
metaindex, properties and index blocks, and decodes the first and last data blocks (for
``first_key``/``last_key``).  Other data blocks are read on demand, checksum verified and
decompressed, and kept in a small per-reader LRU in one of two forms:

* after a block's first point lookup, its raw bytes: that lookup binary-searches the
  restart points and scans at most one restart interval (cheap for random reads);
* from its second touch, or when ``seek`` reads it, decoded once into parallel lists of
  user keys and ready ``Record`` objects, which later lookups bisect.

Scans decode blocks without putting them in the LRU, so a scan does not flush it.

The index may be a binary-search index or a two-level (partitioned) one, as Pebble
writes whenever the index outgrows one block; every partition is read and verified at
open, and the reader keeps one flat index either way.

Every size the file claims is bounded before anything of that size is allocated:
block handles by the file, entry and restart counts by their block, and a block's
uncompressed size by :data:`MAX_BLOCK_SIZE` and the most the block's compression can
expand its payload (docs/format.md, "Compression").

A reader is immutable apart from its block cache and may be shared between tasks and
threads.  Every problem with the bytes raises :class:`CorruptFileError` naming the file
(or :class:`UnsupportedFormatError` for settings not implemented here); no other
exception escapes and no wrong answer is returned for a file that fails a check.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from itertools import islice, repeat
from operator import lt

import cramjam

from lsmstore.errors import CorruptFileError, UnsupportedFormatError
from lsmstore.graveler.block_checksum import BY_TYPE as _CHECKSUMS
from lsmstore.graveler.record import Record, RecordTuple
from lsmstore.graveler.value import decode_value

MAGIC = 0x88E241B785F4CFF7
FOOTER_SIZE = 53  # checksum type (1) + part 2 (40) + format_version (4) + magic (8)
BLOCK_TRAILER_SIZE = 5  # compression type (1) + checksum (4)
SUPPORTED_FORMAT_VERSIONS = range(2, 7)
COMPARATOR = b"leveldb.BytewiseComparator"

#: The largest uncompressed block the reader accepts (a block holds one entry at least,
#: and entries are bounded far below this: keys 1 KiB, values 16 MiB by default).
MAX_BLOCK_SIZE = 64 << 20
#: Most output per payload byte: Snappy (a 3-byte copy makes 64 bytes) and LZ4 (each
#: extension byte adds 255 to a match); zstd is bounded by MAX_BLOCK_SIZE alone.
_SNAPPY_MAX_RATIO = 22
_LZ4_MAX_RATIO = 256
_RATIO_SLACK = 64

_OTHER_MAGICS = {
    0xDB4775248B80FB57: "a legacy block-based table (format_version 0/1)",
    0x8242229663BF9564: "a RocksDB plain table",
    0x4F3418EB7A8F13B8: "a legacy RocksDB plain table",
    0x926789D0C5F17873: "a RocksDB cuckoo table",
}
_EXTENDED_MAGIC = b"\x3e\x00\x7a\x00"  # format_version >= 6, footer part 2
_COMPRESSION_NAMES = {
    2: "zlib",
    3: "bzip2",
    6: "xpress",
    0x40: "zstd (pre-release)",
}
_INDEX_BINARY_SEARCH = 0
_INDEX_TWO_LEVEL = 2
_INDEX_TYPE_NAMES = {
    1: "hash search",
    3: "binary search with first key",
}

_TYPE_DELETION = 0
_TYPE_VALUE = 1

_MASK32 = 0xFFFFFFFF
_u32: Callable[[bytes, int], tuple[int]] = struct.Struct("<I").unpack_from
_u64: Callable[[bytes, int], tuple[int]] = struct.Struct("<Q").unpack_from
_new_tuple = tuple.__new__  # builds a Record without NamedTuple.__new__'s Python frame


def _as_records(records: Iterable[RecordTuple]) -> Iterator[Record]:
    """Records of plain record tuples, each made in C (no Python frame per record)."""
    return map(_new_tuple, repeat(Record), records)


class _Bad(Exception):
    """Internal: a decoding problem, turned into CorruptFileError naming the file."""


class _Unsupported(Exception):
    """Internal: turned into UnsupportedFormatError naming the file."""


# What decoding malformed bytes can raise; all become CorruptFileError naming the file.
_ERRORS = (_Bad, _Unsupported, CorruptFileError, IndexError, ValueError, struct.error)


def _context_modifier(base: int, offset: int) -> int:
    """format_version >= 6: per-offset value added to every stored checksum."""
    if base == 0:
        return 0
    return (base ^ ((offset & _MASK32) + (offset >> 32))) & _MASK32


# --- varints and blocks ----------------------------------------------------------------


def _varint(buf: bytes, p: int) -> tuple[int, int]:
    """Unsigned LEB128 varint (at most 64 bits) at ``p``: ``(value, next position)``."""
    result = 0
    shift = 0
    while True:
        b = buf[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
        shift += 7
        if shift > 63:
            raise _Bad("varint longer than 10 bytes")


def _varint_exact(value: bytes, what: str) -> int:
    n, p = _varint(value, 0)
    if p != len(value):
        raise _Bad(f"property {what}: trailing bytes after varint")
    return n


def _entries_end(buf: bytes) -> int:
    """Where the entries of a block end (its restart array begins)."""
    if len(buf) < 4:
        raise _Bad(f"block of {len(buf)} bytes has no restart count")
    packed = _u32(buf, len(buf) - 4)[0]
    if packed & (1 << 31):
        raise _Unsupported("data block hash index")
    if packed & (1 << 30):
        raise _Unsupported("data block footer bit 30")
    if packed & (1 << 28):
        raise _Unsupported("separated key/value data blocks")
    num_restarts = packed & ((1 << 28) - 1)
    end = len(buf) - 4 - 4 * num_restarts
    if num_restarts == 0 or end < 0:
        raise _Bad(f"block of {len(buf)} bytes claims {num_restarts} restart points")
    return end


def _plain_entries(buf: bytes) -> list[tuple[bytes, bytes]]:
    """Entries of a metaindex or properties block: plain keys, raw values."""
    limit = _entries_end(buf)
    out = []
    p = 0
    key = b""
    while p < limit:
        shared, p = _varint(buf, p)
        non_shared, p = _varint(buf, p)
        vlen, p = _varint(buf, p)
        if shared > len(key):
            raise _Bad("entry shares more bytes than the previous key has")
        q = p + non_shared
        key = key[:shared] + buf[p:q]
        p = q + vlen
        if p > limit:
            raise _Bad("entry runs past the end of the block")
        out.append((key, buf[q:p]))
    return out


def parse_plain_block(buf: bytes) -> list[tuple[bytes, bytes]]:
    """The entries of an uncompressed metaindex or properties block; ValueError if
    malformed."""
    try:
        return _plain_entries(buf)
    except (_Bad, _Unsupported, IndexError) as e:
        raise ValueError(str(e)) from None


def _decode_data_block(buf: bytes, name: str) -> tuple[list[bytes], list[RecordTuple]]:
    """User keys (strictly increasing) and records of a data block, as plain tuples
    (a decoded block lives in a cache: see :mod:`lsmstore.graveler.record`).

    Values are split into identity and data here, once per block; the common case
    (one-byte key varints, identity under 64 bytes, data under 8 KiB) is inlined.
    """
    limit = _entries_end(buf)
    keys: list[bytes] = []
    records: list[RecordTuple] = []
    add_key = keys.append
    add_record = records.append
    p = 0
    ikey = b""
    while p < limit:
        shared = buf[p]
        non_shared = buf[p + 1]
        if shared | non_shared < 0x80:
            p += 2
        else:
            shared, p = _varint(buf, p)
            non_shared, p = _varint(buf, p)
        vlen = buf[p]
        if vlen < 0x80:
            p += 1
        elif buf[p + 1] < 0x80:
            vlen = (vlen & 0x7F) | (buf[p + 1] << 7)
            p += 2
        else:
            vlen, p = _varint(buf, p)
        if shared > len(ikey):
            raise _Bad("entry shares more bytes than the previous key has")
        q = p + non_shared
        ikey = ikey[:shared] + buf[p:q]
        p = q + vlen
        if p > limit:
            raise _Bad("entry runs past the end of the block")
        kind = ikey[-8]  # low byte of the little-endian (seq << 8 | type) trailer
        key = ikey[:-8]
        if kind == _TYPE_VALUE:
            b = buf[q]
            if b < 0x80 and not b & 1:  # identity length: one-byte zigzag varint
                r = q + 1 + (b >> 1)
                b = buf[r]
                if b < 0x80:  # data length: zigzag varint of one or two bytes
                    s = r + 1
                    u = b
                elif buf[r + 1] < 0x80:
                    s = r + 2
                    u = (b & 0x7F) | (buf[r + 1] << 7)
                else:
                    s = u = -1
                if u & 1 or s + (u >> 1) != p:
                    identity, data = decode_value(buf[q:p], name)
                else:
                    identity = buf[q + 1 : r]
                    data = buf[s:p]
            else:
                identity, data = decode_value(buf[q:p], name)
            add_record((key, identity, data))
        elif kind == _TYPE_DELETION:
            add_record((key, b"", None))
        else:
            raise _Unsupported(f"entry type {kind} (only SET and DELETION are implemented)")
        add_key(key)
    if not keys:
        raise _Bad("data block has no entries")
    if not all(map(lt, keys, islice(keys, 1, None))):
        raise _Bad("data block keys are not strictly increasing")
    return keys, records


def _short_varint(buf: bytes, p: int) -> tuple[int, int]:
    """A varint at ``p``, the 1-4 byte cases done from one 32-bit read (the caller
    guarantees four readable bytes: entries are followed by the restart array)."""
    x = _u32(buf, p)[0]
    if not x & 0x80:
        return x & 0x7F, p + 1
    if not x & 0x8000:
        return (x & 0x7F) | (x >> 1 & 0x3F80), p + 2
    if not x & 0x800000:
        return (x & 0x7F) | (x >> 1 & 0x3F80) | (x >> 2 & 0x1FC000), p + 3
    if not x & 0x80000000:
        return (x & 0x7F) | (x >> 1 & 0x3F80) | (x >> 2 & 0x1FC000) | (x >> 3 & 0xFE00000), p + 4
    return _varint(buf, p)


def _search_block(buf: bytes, key: bytes, name: str) -> Record | None:
    """Point lookup in an undecoded data block: binary search over the restart points
    (whose entries hold whole keys), then a scan from the last restart at or below ``key``."""
    limit = _entries_end(buf)
    lo = 0
    hi = ((len(buf) - 4 - limit) >> 2) - 1
    while lo < hi:  # the last restart point whose user key is <= key
        mid = (lo + hi + 1) >> 1
        p = _u32(buf, limit + 4 * mid)[0]
        if p >= limit:
            raise _Bad("restart point outside the block")
        shared = buf[p]
        non_shared = buf[p + 1]
        if shared | non_shared < 0x80:
            p += 2
        else:
            shared, p = _varint(buf, p)
            non_shared, p = _varint(buf, p)
        p = _short_varint(buf, p)[1]  # skip the value length
        q = p + non_shared - 8
        if shared or q < p or q > limit:
            raise _Bad("malformed entry at a restart point")
        if buf[p:q] <= key:
            lo = mid
        else:
            hi = mid - 1
    p = _u32(buf, limit + 4 * lo)[0]
    ikey = b""
    while p < limit:
        shared = buf[p]
        non_shared = buf[p + 1]
        vlen = buf[p + 2]
        if shared | non_shared | vlen < 0x80:
            p += 3
        elif shared | non_shared < 0x80 and buf[p + 3] < 0x80:
            vlen = (vlen & 0x7F) | (buf[p + 3] << 7)
            p += 4
        else:
            shared, p = _varint(buf, p)
            non_shared, p = _varint(buf, p)
            vlen, p = _varint(buf, p)
        if shared > len(ikey):
            raise _Bad("entry shares more bytes than the previous key has")
        q = p + non_shared
        ikey = ikey[:shared] + buf[p:q]
        p = q + vlen
        if p > limit or len(ikey) < 8:
            raise _Bad("malformed entry")
        user_key = ikey[:-8]
        if user_key >= key:
            if user_key != key:
                return None
            kind = ikey[-8]
            if kind == _TYPE_VALUE:
                identity, data = decode_value(buf[q:p], name)
                return _new_tuple(Record, (key, identity, data))
            if kind == _TYPE_DELETION:
                return _new_tuple(Record, (key, b"", None))
            raise _Unsupported(f"entry type {kind} (only SET and DELETION are implemented)")
    return None


def _decode_index_block(
    buf: bytes, user_keys: bool, delta: bool
) -> tuple[list[bytes], list[int], list[int]]:
    """Separator user keys and data block handles (offsets, sizes) of an index block."""
    limit = _entries_end(buf)
    keys: list[bytes] = []
    offsets: list[int] = []
    sizes: list[int] = []
    p = 0
    key = b""
    offset = size = -1
    vlen = 0
    while p < limit:
        shared = buf[p]
        non_shared = buf[p + 1]
        if delta:
            if shared | non_shared < 0x80:
                p += 2
            else:
                shared, p = _varint(buf, p)
                non_shared, p = _varint(buf, p)
        else:
            vlen = buf[p + 2]
            if shared | non_shared | vlen < 0x80:
                p += 3
            else:
                shared, p = _varint(buf, p)
                non_shared, p = _varint(buf, p)
                vlen, p = _varint(buf, p)
        if shared > len(key):
            raise _Bad("index entry shares more bytes than the previous key has")
        q = p + non_shared
        key = key[:shared] + buf[p:q] if shared else buf[p:q]
        if q >= limit:
            raise _Bad("index entry runs past the end of the block")
        if delta and shared:
            if size < 0:
                raise _Bad("first index entry is delta encoded")
            u, p = _short_varint(buf, q)
            offset += size + BLOCK_TRAILER_SIZE
            size += (u >> 1) ^ -(u & 1)
        else:  # a full handle: varint64 offset, varint64 size (inlined _short_varint)
            x = _u32(buf, q)[0]
            if not x & 0x80:
                offset = x & 0x7F
                p = q + 1
            elif not x & 0x8000:
                offset = (x & 0x7F) | (x >> 1 & 0x3F80)
                p = q + 2
            elif not x & 0x800000:
                offset = (x & 0x7F) | (x >> 1 & 0x3F80) | (x >> 2 & 0x1FC000)
                p = q + 3
            else:
                offset, p = _short_varint(buf, q)
            x = _u32(buf, p)[0]
            if not x & 0x80:
                size = x & 0x7F
                p += 1
            elif not x & 0x8000:
                size = (x & 0x7F) | (x >> 1 & 0x3F80)
                p += 2
            else:
                size, p = _short_varint(buf, p)
            if not delta and p != q + vlen:
                raise _Bad("index value is not exactly one block handle")
        if p > limit or size < 0:
            raise _Bad("index entry runs past the end of the block")
        if user_keys:
            keys.append(key)
        elif len(key) >= 8:
            keys.append(key[:-8])
        else:
            raise _Bad("index key shorter than its 8-byte trailer")
        offsets.append(offset)
        sizes.append(size)
    return keys, offsets, sizes


# --- the reader ------------------------------------------------------------------------

#: A decoded data block: its keys and its records.  Tuples of plain tuples of bytes,
#: so a cached block -- the outer tuple too -- is untracked by CPython's collector
#: after one collection (:mod:`lsmstore.graveler.record`).
DecodedBlock = tuple[tuple[bytes, ...], tuple[RecordTuple, ...]]


class SSTReader:
    """A parsed SST held in memory.  See the module docstring and docs/format.md."""

    __slots__ = (
        "_base_context",
        "_cache",
        "_cache_size",
        "_checksum",
        "_data",
        "_data_end",
        "_index_keys",
        "_offsets",
        "_sizes",
        "_view",
        "first_key",
        "last_key",
        "name",
        "num_entries",
        "properties",
        "size",
        "user_properties",
    )

    name: str
    size: int
    num_entries: int
    first_key: bytes
    last_key: bytes
    properties: dict[str, bytes]
    user_properties: dict[str, bytes]

    def __init__(self, data: bytes, name: str, *, block_cache_size: int = 64) -> None:
        """Parse ``data`` (the whole file); ``name`` names it in errors.

        Up to ``block_cache_size`` (at least 1) data blocks are cached, raw or decoded
        (see the module docstring): about 4 KiB each raw, 8 KiB decoded.  The index
        takes about 175 bytes per data block.
        """
        if not isinstance(data, bytes):
            data = bytes(data)
        self.name = name
        self.size = len(data)
        self._data = data
        self._view = memoryview(data)
        self._cache: OrderedDict[int, bytes | DecodedBlock] = OrderedDict()
        self._cache_size = max(1, block_cache_size)
        self._base_context = 0
        try:
            self._open()
        except _ERRORS as e:
            raise self._error(e, "file") from None

    @property
    def block_cache_size(self) -> int:
        """Data blocks cached at most."""
        return self._cache_size

    def grow_block_cache(self, blocks: int) -> None:
        """Cache up to ``blocks`` data blocks from now on (never shrinks the cache)."""
        if blocks > self._cache_size:
            self._cache_size = blocks

    def _error(self, e: Exception, where: str) -> CorruptFileError:
        """The typed error (naming this file) for an exception raised while decoding."""
        if isinstance(e, CorruptFileError):
            return e
        if isinstance(e, _Unsupported):
            return UnsupportedFormatError(self.name, f"unsupported SST: {e}")
        if isinstance(e, _Bad):
            return CorruptFileError(self.name, f"corrupt SST: {e}")
        return CorruptFileError(self.name, f"corrupt SST: {where} malformed ({e})")

    # opening -------------------------------------------------------------------------

    def _open(self) -> None:
        data = self._data
        size = len(data)
        if size < FOOTER_SIZE:
            raise _Bad(f"{size} bytes is too short for an SST footer")
        footer = size - FOOTER_SIZE
        magic = _u64(data, size - 8)[0]
        if magic != MAGIC:
            if magic in _OTHER_MAGICS:
                raise _Unsupported(f"file is {_OTHER_MAGICS[magic]}")
            raise _Bad("bad magic number (not a block-based SST, or truncated)")
        version = _u32(data, size - 12)[0]
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise _Unsupported(f"format_version {version} (2 to 6 are implemented)")
        checksum_type = data[footer]
        if checksum_type not in _CHECKSUMS:
            what = "no checksums" if checksum_type == 0 else f"checksum type {checksum_type}"
            raise _Unsupported(what)
        self._checksum = _CHECKSUMS[checksum_type]

        if version >= 6:
            if data[footer + 1 : footer + 5] != _EXTENDED_MAGIC:
                raise _Bad("bad extended magic number in the footer")
            stored, base, meta_size = struct.unpack_from("<III", data, footer + 5)
            if base == 0:
                raise _Bad("invalid base context checksum 0")
            if _u64(data, footer + 33)[0] != 0:
                raise _Unsupported("footer uses a reserved feature")
            copy = bytearray(data[footer:])
            copy[5:9] = bytes(4)
            computed = self._checksum(memoryview(copy)) + _context_modifier(base, footer)
            if computed & _MASK32 != stored:
                raise _Bad("footer checksum mismatch")
            self._base_context = base
            meta_offset = footer - BLOCK_TRAILER_SIZE - meta_size
            if meta_offset < 0:
                raise _Bad("metaindex size exceeds the file")
            index_handle: tuple[int, int] | None = None
        else:
            p = footer + 1
            meta_offset, p = _varint(data, p)
            meta_size, p = _varint(data, p)
            index_offset, p = _varint(data, p)
            index_size, p = _varint(data, p)
            if p > footer + 41:
                raise _Bad("footer block handles overrun their 40 bytes")
            index_handle = (index_offset, index_size)
        self._data_end = footer

        meta = dict(_plain_entries(self._read_block(meta_offset, meta_size, "metaindex")))
        if b"rocksdb.compression_dict" in meta:
            raise _Unsupported("dictionary compression")
        props_handle = meta.get(b"rocksdb.properties")
        if props_handle is None:
            raise _Bad("no properties block")
        props = {
            k.decode("latin-1"): v
            for k, v in _plain_entries(self._read_block(*_handle(props_handle), "properties"))
        }
        self.properties = props
        self.user_properties = {k: v for k, v in props.items() if not k.startswith("rocksdb.")}
        user_keys, delta, two_level = self._check_properties(props)

        if index_handle is None:
            encoded = meta.get(b"rocksdb.index")
            if encoded is None:
                raise _Bad("no index block handle in the metaindex")
            index_handle = _handle(encoded)
        index = self._read_block(*index_handle, "index")
        if two_level:
            self._index_keys, self._offsets, self._sizes = self._read_partitions(
                index, user_keys, delta
            )
        else:
            self._index_keys, self._offsets, self._sizes = _decode_index_block(
                index, user_keys, delta
            )
        keys = self._index_keys
        if not keys:
            if self.num_entries == 0:
                raise _Unsupported("table holds no entries")
            raise _Bad("index block is empty")
        if not all(map(lt, keys, islice(keys, 1, None))):
            raise _Bad("index keys are not strictly increasing")
        blocks = props.get("rocksdb.num.data.blocks")
        if blocks is not None and _varint_exact(blocks, "rocksdb.num.data.blocks") != len(keys):
            raise _Bad("index and properties disagree on the number of data blocks")
        self.first_key = self._block(0)[0][0]
        self.last_key = self._block(len(keys) - 1)[0][-1]
        self._check_lakefs_properties()

    def _read_partitions(
        self, top: bytes, user_keys: bool, delta: bool
    ) -> tuple[list[bytes], list[int], list[int]]:
        """The flat index of a two-level index: the top-level block lists the partitions
        (each an index block), each under a separator >= its keys."""
        separators, offsets, sizes = _decode_index_block(top, user_keys, delta)
        if not separators:
            raise _Bad("two-level index has no partitions")
        partitions = self.properties.get("rocksdb.index.partitions")
        if partitions is not None and _varint_exact(partitions, "rocksdb.index.partitions") != len(
            separators
        ):
            raise _Bad("top-level index and properties disagree on the number of partitions")
        keys: list[bytes] = []
        block_offsets: list[int] = []
        block_sizes: list[int] = []
        prev: bytes | None = None
        for separator, offset, size in zip(separators, offsets, sizes, strict=True):
            part = self._read_block(offset, size, "index partition")
            k, o, z = _decode_index_block(part, user_keys, delta)
            if not k or k[-1] > separator or (prev is not None and k[0] <= prev):
                raise _Bad(f"index partition at offset {offset}: keys outside its range")
            keys += k
            block_offsets += o
            block_sizes += z
            prev = separator
        return keys, block_offsets, block_sizes

    def _check_lakefs_properties(self) -> None:
        """lakeFS's writer records a file's first and last key and its record count as
        table properties; where present they must match the file."""
        props = self.user_properties
        for name, actual in (("min_key", self.first_key), ("max_key", self.last_key)):
            if name in props and props[name] != actual:
                raise _Bad(f"property {name} {props[name]!r} is not the file's key {actual!r}")
        count = props.get("count")
        if count is not None and count != b"%d" % self.num_entries:
            raise _Bad(f"property count {count!r}: the file has {self.num_entries} entries")

    def _check_properties(self, props: dict[str, bytes]) -> tuple[bool, bool, bool]:
        """Reject settings not implemented; return (index keys are user keys, delta
        values, two-level index)."""
        entries = props.get("rocksdb.num.entries")
        if entries is None:
            raise _Bad("properties lack rocksdb.num.entries")
        self.num_entries = _varint_exact(entries, "rocksdb.num.entries")
        comparator = props.get("rocksdb.comparator")
        if comparator != COMPARATOR:
            raise _Unsupported(f"comparator {comparator!r} (only {COMPARATOR.decode()})")
        index_type = props.get("rocksdb.block.based.table.index.type", bytes(4))
        if len(index_type) != 4:
            raise _Bad("malformed index type property")
        kind = _u32(index_type, 0)[0]
        if kind not in (_INDEX_BINARY_SEARCH, _INDEX_TWO_LEVEL):
            raise _Unsupported(f"index type {_INDEX_TYPE_NAMES.get(kind, str(kind))}")
        for prop, what in (
            ("rocksdb.num.range-deletions", "range deletions"),
            ("rocksdb.merge.operands", "merge operands"),
            ("rocksdb.separate.key.value.in.data.block", "separated key/value data blocks"),
        ):
            value = props.get(prop)
            if value is not None and _varint_exact(value, prop) != 0:
                raise _Unsupported(what)
        flags = []
        for prop in ("rocksdb.index.key.is.user.key", "rocksdb.index.value.is.delta.encoded"):
            value = props.get(prop)
            flags.append(value is not None and _varint_exact(value, prop) != 0)
        return flags[0], flags[1], kind == _INDEX_TWO_LEVEL

    # blocks --------------------------------------------------------------------------

    def _verify_checksum(self, offset: int, end: int, what: str) -> None:
        """The trailer's checksum of the block ``[offset, end)`` matches its contents."""
        stored = _u32(self._data, end + 1)[0]
        if self._base_context:
            stored = (stored - _context_modifier(self._base_context, offset)) & _MASK32
        if self._checksum(self._view[offset : end + 1]) != stored:
            raise _Bad(f"{what} block at offset {offset}: checksum mismatch")

    def _read_block(self, offset: int, size: int, what: str) -> bytes:
        """Verified, decompressed contents of the block at ``offset``."""
        end = offset + size
        if end + BLOCK_TRAILER_SIZE > self._data_end:
            raise _Bad(f"{what} block handle ({offset}, {size}) is outside the file")
        self._verify_checksum(offset, end, what)
        data = self._data
        kind = data[end]
        if kind == 0:
            return data[offset:end]
        if kind not in (1, 4, 5, 7):
            raise _Unsupported(
                f"{what} block at offset {offset}: compression "
                f"{_COMPRESSION_NAMES.get(kind, f'type {kind}')}"
            )
        # Snappy: its own varint length header; lz4, lz4hc, zstd: a varint size prefix.
        # Either way, the size is bounded before the decompressor allocates it.
        n, p = _varint(data, offset)
        if p > end:
            raise _Bad(f"{what} block at offset {offset}: truncated size prefix")
        payload_size = end - p
        if kind == 1:
            most = _SNAPPY_MAX_RATIO * payload_size + _RATIO_SLACK
        elif kind == 7:
            most = MAX_BLOCK_SIZE
        else:
            most = _LZ4_MAX_RATIO * payload_size + _RATIO_SLACK
        if n > min(most, MAX_BLOCK_SIZE):
            raise _Bad(
                f"{what} block at offset {offset}: claims {n} bytes uncompressed from "
                f"{payload_size} (at most {min(most, MAX_BLOCK_SIZE)})"
            )
        try:
            if kind == 1:
                out = bytes(cramjam.snappy.decompress_raw(self._view[offset:end]))
            elif kind == 7:
                out = bytes(cramjam.zstd.decompress(self._view[p:end], output_len=n))
            else:
                out = bytes(cramjam.lz4.decompress_block(self._view[p:end], output_len=n))
        except (cramjam.DecompressionError, OverflowError) as e:
            raise _Bad(f"{what} block at offset {offset}: cannot decompress ({e})") from None
        if len(out) != n:
            raise _Bad(f"{what} block at offset {offset}: decompressed size mismatch")
        return out

    def _decode(self, i: int, raw: bytes) -> DecodedBlock:
        keys, records = _decode_data_block(raw, self.name)
        index_keys = self._index_keys
        if keys[-1] > index_keys[i] or (i and keys[0] <= index_keys[i - 1]):
            raise _Bad(f"data block at offset {self._offsets[i]}: keys outside its index range")
        return tuple(keys), tuple(records)

    def _put(self, i: int, entry: bytes | DecodedBlock) -> None:
        cache = self._cache
        cache[i] = entry
        try:
            cache.move_to_end(i)
            while len(cache) > self._cache_size:
                cache.popitem(last=False)
        except KeyError:  # another thread changed the cache meanwhile
            pass

    def _block(self, i: int, keep: bool = True) -> DecodedBlock:
        """Decoded block ``i``: from the cache, else decoded and (if ``keep``, or it was
        cached undecoded) put there."""
        entry = self._cache.get(i)
        if isinstance(entry, tuple):
            if keep:
                try:
                    self._cache.move_to_end(i)
                except KeyError:
                    pass
            return entry
        try:
            raw = (
                entry
                if entry is not None
                else self._read_block(self._offsets[i], self._sizes[i], "data")
            )
            block = self._decode(i, raw)
        except _ERRORS as e:
            raise self._error(e, f"data block at offset {self._offsets[i]}") from None
        if keep or entry is not None:
            self._put(i, block)
        return block

    # lookups -------------------------------------------------------------------------

    def get(self, key: bytes) -> Record | None:
        """The record for ``key``, or None; a tombstone is ``Record(key, b"", None)``."""
        index_keys = self._index_keys
        i = bisect_left(index_keys, key)
        if i == len(index_keys):
            return None
        entry = self._cache.get(i)
        if entry is None:  # first touch: search the raw block, keep it undecoded
            try:
                raw = self._read_block(self._offsets[i], self._sizes[i], "data")
                found = _search_block(raw, key, self.name)
            except _ERRORS as e:
                raise self._error(e, f"data block at offset {self._offsets[i]}") from None
            self._put(i, raw)
            return found
        if isinstance(entry, tuple):
            try:
                self._cache.move_to_end(i)
            except KeyError:
                pass
            keys, records = entry
        else:
            keys, records = self._block(i)
        j = bisect_left(keys, key)
        if j < len(keys) and keys[j] == key:
            rec: Record = _new_tuple(Record, records[j])
            return rec
        return None

    def seek(self, key: bytes = b"") -> Iterator[Record]:
        """Records with key >= ``key``, in key order.  Blocks after the first are decoded
        without displacing cached ones (a scan does not flush the cache)."""
        for j, (_, records) in self.blocks(key):
            yield from _as_records(islice(records, j, None) if j else records)

    def blocks(self, key: bytes = b"") -> Iterator[tuple[int, DecodedBlock]]:
        """The decoded blocks that hold the records with key >= ``key``, in key order,
        each as ``(start, (keys, records))``: ``start`` is the index of the first such
        record in the first block (possibly its length), 0 in later ones.  Records are
        plain tuples; later blocks are decoded without displacing cached ones."""
        index_keys = self._index_keys
        i = bisect_left(index_keys, key)
        n = len(index_keys)
        if i == n:
            return
        block = self._block(i)
        yield bisect_left(block[0], key) if key else 0, block
        for later in range(i + 1, n):
            yield 0, self._block(later, keep=False)

    def __iter__(self) -> Iterator[Record]:
        return self.seek(b"")

    def may_contain_range(self, lo: bytes, hi: bytes) -> bool:
        """False when no key ``k`` with ``lo <= k <= hi`` can be in the file."""
        return lo <= self.last_key and self.first_key <= hi

    def __repr__(self) -> str:
        return f"SSTReader({self.name!r}, {self.num_entries} entries, {self.size} bytes)"


def _handle(encoded: bytes) -> tuple[int, int]:
    offset, p = _varint(encoded, 0)
    size, p = _varint(encoded, p)
    if p != len(encoded):
        raise _Bad("malformed block handle in the metaindex")
    return offset, size
