"""Staging files (L1, L2): ids, the SST, and its sidecar (docs/format.md, "Staging files").

A staging file is two immutable objects next to each other:

* ``<id>.sst``  -- the records, a RocksDB SST (:func:`~lsmstore.graveler.sst_writer.write_sst`);
  tombstones are DELETION entries.
* ``<id>.meta`` -- the sidecar: entry and tombstone counts, SST size, first and last
  key, and a bloom filter of the keys.  Readers fetch sidecars (small, cached in RAM)
  to skip files that cannot hold a key, without fetching the SST.

Both are written in create mode and are durable before the id is appended to a ref.

File ids are ``<13 hex digits: ms since the epoch><16 hex digits: random>``: unique,
and sorting them sorts files by creation time (useful to operators; the order of a
branch's files is the order of its ref, never of ids).
"""

from __future__ import annotations

import io
import secrets
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add, mod
from typing import Any, Literal

import xxhash
from bitarray import bitarray
from pybloom_live import BloomFilter
from pybloom_live.pybloom import make_hashfuncs

from lsmstore.errors import CorruptFileError, EntryTooLargeError, InvalidInputError
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import write_sst, write_sst_columns

SIDECAR_MAGIC = b"LSMSIDE1"
#: A sidecar that also names covered spans over a base commit (:class:`Sidecar`).
SIDECAR_MAGIC_COVERED = b"LSMSIDE2"
SIDECAR_SUFFIX = ".meta"
SST_SUFFIX = ".sst"
_HEADER = struct.Struct("<8sQQQQ")  # magic, entries, tombstones, sst_size, data_bytes
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

#: Bloom filters are sized for a power-of-two capacity of at least this many keys,
#: so most files share filter parameters and one key's hash serves them all.
MIN_BLOOM_CAPACITY = 256


def new_file_id(
    clock: Callable[[], float] = time.time, randbits: Callable[[int], int] = secrets.randbits
) -> str:
    """A unique, time-sortable staging file id (29 characters of ``[0-9a-f]``)."""
    ms = int(clock() * 1000)
    return f"{ms & ((1 << 52) - 1):013x}{randbits(64):016x}"


def bloom_item(key: bytes) -> str:
    """The item a key is entered as in a sidecar's pybloom-live ``BloomFilter``.

    pybloom-live hashes ``str`` items as UTF-8 but *bytes* items as ``str(key)``
    (their repr), so keys enter as the latin-1 decoding of their bytes: one
    character per byte, and ``bloom_item(key) in bloom`` is exact pybloom-live usage.
    """
    return key.decode("latin-1")


def bloom_capacity(count: int) -> int:
    """The next power of two >= ``count``, at least :data:`MIN_BLOOM_CAPACITY`."""
    return max(MIN_BLOOM_CAPACITY, 1 << (max(count, 1) - 1).bit_length())


def bloom_data(key: bytes) -> bytes:
    """The bytes pybloom-live hashes for :func:`bloom_item` of ``key`` (its UTF-8)."""
    return key if key.isascii() else key.decode("latin-1").encode("utf-8")


def build_bloom(keys: Iterable[bytes], count: int, error_rate: float) -> BloomFilter:
    """A pybloom-live ``BloomFilter`` holding :func:`bloom_item` of every key.

    Bit for bit what ``bloom.add(bloom_item(key), skip_check=True)`` for each key builds,
    computed in bulk (:meth:`_Shape.fill`, about 4x faster than adding keys one by one).
    """
    bloom = BloomFilter(bloom_capacity(count), error_rate)
    items = [bloom_data(k) for k in keys]
    if items:
        _shape(bloom.num_slices, bloom.bits_per_slice).fill(bloom.bitarray, items)
    bloom.count = len(items)
    return bloom


class _Shape:
    """pybloom-live's hashing for one ``(num_slices, bits_per_slice)``, precomputed.

    pybloom-live (:func:`pybloom_live.pybloom.make_hashfuncs`) hashes an item's UTF-8
    bytes ``x`` with salt objects ``hashfn(hashfn(pack("I", i)).digest())``: digest i is
    ``hashfn(prefix_i + x)`` with ``prefix_i = hashfn(pack("I", i)).digest()``.  The
    digests of all salts, read as native unsigned ints of 2, 4 or 8 bytes, give one
    value per slice (extra values are unused); slice ``s`` sets bit
    ``s * bits_per_slice + value % bits_per_slice``.

    :attr:`positions` is compiled per shape when one salt suffices (every filter of
    fewer than ~30,000 keys at 1%): the unpacking and the arithmetic written out with
    the shape's constants, no loop -- a point read computes it once or twice per key,
    and the generic map/zip form cost about 1.5x as much.
    """

    __slots__ = (
        "bits_per_slice",
        "code",
        "hashfn",
        "num_slices",
        "offsets",
        "one_shot",
        "per_key",
        "positions",
        "prefixes",
        "unpack",
    )

    def __init__(self, num_slices: int, bits_per_slice: int) -> None:
        _, hashfn = make_hashfuncs(num_slices, bits_per_slice)
        code: Literal["H", "I", "Q"]
        if bits_per_slice >= 1 << 31:
            code = "Q"
        elif bits_per_slice >= 1 << 15:
            code = "I"
        else:
            code = "H"
        per_hash = hashfn().digest_size // struct.calcsize(code)
        n_salts = -(-num_slices // per_hash)
        self.num_slices = num_slices
        self.bits_per_slice = bits_per_slice
        self.code = code
        self.per_key = per_hash * n_salts
        self.prefixes = [hashfn(struct.pack("I", i)).digest() for i in range(n_salts)]
        self.offsets = [s * bits_per_slice for s in range(num_slices)]
        self.unpack = struct.Struct(code * self.per_key).unpack  # native, as pybloom-live
        self.hashfn: Callable[[bytes], Any] = hashfn
        # xxh128 has a one-shot digest function; hashlib's constructors take the data
        self.one_shot: Callable[[bytes], bytes] | None = (
            xxhash.xxh128_digest if hashfn is xxhash.xxh128 else None
        )
        #: The bit positions of one item (its UTF-8 bytes).
        self.positions: Callable[[bytes], Sequence[int]] = (
            self._compiled_positions() if n_salts == 1 else self._generic_positions
        )

    def values(self, items: list[bytes]) -> memoryview:
        """``per_key`` hash values per item, item after item."""
        prefixes = self.prefixes
        one_shot = self.one_shot
        if one_shot is not None:
            if len(prefixes) == 1:
                p = prefixes[0]
                blob = b"".join([one_shot(p + x) for x in items])
            else:
                blob = b"".join([one_shot(p + x) for x in items for p in prefixes])
        else:
            h = self.hashfn
            if len(prefixes) == 1:
                p = prefixes[0]
                blob = b"".join([h(p + x).digest() for x in items])
            else:
                blob = b"".join([h(p + x).digest() for x in items for p in prefixes])
        return memoryview(blob).cast(self.code)

    def _compiled_positions(self) -> Callable[[bytes], Sequence[int]]:
        """:meth:`_generic_positions` of a one-salt shape as straight-line code (only
        integers of the shape are formatted into the source)."""
        names = [f"v{i}" for i in range(self.per_key)]
        bps = self.bits_per_slice
        terms = [f"v{s} % {bps} + {s * bps}" for s in range(self.num_slices)]
        digest = "_h(_p + data)" if self.one_shot is not None else "_h(_p + data).digest()"
        source = (
            "def positions(data):\n"
            f"    {', '.join(names)}, = _u({digest})\n"
            f"    return ({', '.join(terms)},)\n"
        )
        scope: dict[str, Any] = {
            "_h": self.one_shot or self.hashfn,
            "_p": self.prefixes[0],
            "_u": self.unpack,
        }
        exec(compile(source, f"<bloom positions {self.num_slices}x{bps}>", "exec"), scope)
        fn: Callable[[bytes], Sequence[int]] = scope["positions"]
        return fn

    def _generic_positions(self, data: bytes) -> list[int]:
        """The bit positions of one item (its UTF-8 bytes)."""
        prefixes = self.prefixes
        one_shot = self.one_shot
        if len(prefixes) == 1:
            p = prefixes[0]
            digests = one_shot(p + data) if one_shot is not None else self.hashfn(p + data).digest()
        elif one_shot is not None:
            digests = b"".join([one_shot(p + data) for p in prefixes])
        else:
            digests = b"".join([self.hashfn(p + data).digest() for p in prefixes])
        # map stops at the last slice: values past num_slices are unused
        return list(
            map(add, self.offsets, map(mod, self.unpack(digests), repeat(self.bits_per_slice)))
        )

    def fill(self, bits: bitarray, items: list[bytes]) -> None:
        """Set the bits of ``items`` in ``bits``, an all-zero array of this shape."""
        bps, step = self.bits_per_slice, self.per_key
        values = self.values(items)
        for s in range(self.num_slices):
            part = bitarray(bps, endian="little")
            part.setall(0)
            part[list(map(mod, values[s::step], repeat(bps)))] = 1
            bits[s * bps : (s + 1) * bps] = part


_SHAPES: dict[tuple[int, int], _Shape] = {}


def bloom_shape(bloom: BloomFilter) -> _Shape:
    """The hashing of ``bloom``'s shape: ``bloom_shape(b).positions(bloom_data(key))`` are
    the bits ``bloom_item(key) in b`` tests (shared by every filter of that shape)."""
    return _shape(bloom.num_slices, bloom.bits_per_slice)


def _shape(num_slices: int, bits_per_slice: int) -> _Shape:
    sh = _SHAPES.get((num_slices, bits_per_slice))
    if sh is None:
        sh = _SHAPES[(num_slices, bits_per_slice)] = _Shape(num_slices, bits_per_slice)
    return sh


class BloomProbe:
    """One key's bit positions, computed once per distinct filter shape.

    pybloom-live's positions depend only on the item and the filter's
    ``(num_slices, bits_per_slice)``; files of similar size share them, so checking
    a key against many sidecars costs one hash per shape plus a few bit tests each.
    """

    __slots__ = ("_data", "_positions")

    def __init__(self, key: bytes) -> None:
        self._data = bloom_data(key)
        self._positions: dict[tuple[int, int], Sequence[int]] = {}

    def test(self, bloom: BloomFilter) -> bool:
        """``bloom_item(key) in bloom``, sharing the hash work across filters."""
        shape = (bloom.num_slices, bloom.bits_per_slice)
        positions = self._positions.get(shape)
        if positions is None:
            positions = self._positions[shape] = _shape(*shape).positions(self._data)
        bits = bloom.bitarray
        for p in positions:
            if not bits[p]:
                return False
        return True


@dataclass(frozen=True, slots=True, eq=False)
class Sidecar:
    """What a reader needs to know about a staging file without fetching it."""

    entries: int
    tombstones: int
    sst_size: int
    data_bytes: int  # sum of key and value lengths
    first_key: bytes
    last_key: bytes
    bloom: BloomFilter
    #: The commit the spans were computed against ("" when there are none).
    base: str = ""
    #: Covered spans ``(lo, end)``, disjoint and in key order: the file holds only
    #: tombstones in ``lo <= key < end`` (``end`` empty: no bound), and every key that
    #: commit ``base`` holds there is one of them.  ``lo`` is a key of the file; ``end``
    #: may lie past its last key (no record of the file or the base lies between).
    #: A listing over that base seeks past a span instead of walking it (written by
    #: compaction, lsmstore.compaction.coverage).
    covered: tuple[tuple[bytes, bytes], ...] = ()

    def may_contain(self, key: bytes, probe: BloomProbe | None = None) -> bool:
        """False only if the file certainly has no entry (value or tombstone) for ``key``."""
        if key < self.first_key or key > self.last_key:
            return False
        return (probe or BloomProbe(key)).test(self.bloom)

    def overlaps(self, start: bytes, end: bytes | None) -> bool:
        """Whether ``[start, end)`` (``end=None``: unbounded) meets the key range."""
        return self.last_key >= start and (end is None or self.first_key < end)


def encode_sidecar(sc: Sidecar) -> bytes:
    """The sidecar's bytes: version 1 (``LSMSIDE1``) without covered spans, so readers
    that know only version 1 read every file that has none; version 2 with them."""
    buf = io.BytesIO()
    magic = SIDECAR_MAGIC_COVERED if sc.covered else SIDECAR_MAGIC
    buf.write(_HEADER.pack(magic, sc.entries, sc.tombstones, sc.sst_size, sc.data_bytes))
    for k in (sc.first_key, sc.last_key):
        buf.write(_U32.pack(len(k)))
        buf.write(k)
    bloom = io.BytesIO()
    sc.bloom.tofile(bloom)
    buf.write(_U32.pack(len(bloom.getvalue())))
    buf.write(bloom.getvalue())
    if sc.covered:
        base = sc.base.encode("ascii")
        buf.write(_U32.pack(len(base)))
        buf.write(base)
        buf.write(_U32.pack(len(sc.covered)))
        for span in sc.covered:
            for k in span:
                buf.write(_U32.pack(len(k)))
                buf.write(k)
    body = buf.getvalue()
    return body + _U64.pack(xxhash.xxh64_intdigest(body))


def decode_sidecar(buf: bytes, name: str = "sidecar") -> Sidecar:
    """Parse a sidecar; :class:`CorruptFileError` naming ``name`` when malformed."""
    if len(buf) < _HEADER.size + 3 * _U32.size + _U64.size:
        raise CorruptFileError(name, f"sidecar too short ({len(buf)} bytes)")
    body, (digest,) = buf[:-8], _U64.unpack_from(buf, len(buf) - 8)
    if xxhash.xxh64_intdigest(body) != digest:
        raise CorruptFileError(name, "sidecar checksum mismatch")
    magic, entries, tombstones, sst_size, data_bytes = _HEADER.unpack_from(body, 0)
    if magic not in (SIDECAR_MAGIC, SIDECAR_MAGIC_COVERED):
        raise CorruptFileError(name, f"not a sidecar (magic {magic!r})")
    p = _HEADER.size

    def part() -> bytes:
        nonlocal p
        if p + 4 > len(body):
            raise CorruptFileError(name, "sidecar truncated")
        (n,) = _U32.unpack_from(body, p)
        p += 4
        if p + n > len(body):
            raise CorruptFileError(name, "sidecar truncated")
        p += n
        return body[p - n : p]

    first, last, bloom_bytes = part(), part(), part()
    base = ""
    covered: list[tuple[bytes, bytes]] = []
    if magic == SIDECAR_MAGIC_COVERED:
        try:
            base = part().decode("ascii")
        except UnicodeDecodeError:
            raise CorruptFileError(name, "sidecar names a non-ASCII base commit") from None
        if p + 4 > len(body):
            raise CorruptFileError(name, "sidecar truncated")
        (count,) = _U32.unpack_from(body, p)
        p += 4
        # each span takes at least two length words: bound the count before the loop
        if count * 8 > len(body) - p:
            raise CorruptFileError(name, f"sidecar claims {count} covered spans")
        for _ in range(count):
            lo, end = part(), part()
            if covered and (not covered[-1][1] or lo < covered[-1][1]):
                raise CorruptFileError(name, "sidecar's covered spans overlap")
            if not first <= lo <= last or (end and end <= lo):
                raise CorruptFileError(name, "sidecar's covered span is out of bounds")
            covered.append((lo, end))
    if p != len(body):
        raise CorruptFileError(name, f"{len(body) - p} trailing bytes in sidecar")
    try:
        bloom = BloomFilter.fromfile(io.BytesIO(bloom_bytes))
    except Exception as e:  # struct.error, ValueError from pybloom-live
        raise CorruptFileError(name, f"bad bloom filter: {e}") from e
    return Sidecar(
        entries, tombstones, sst_size, data_bytes, first, last, bloom, base, tuple(covered)
    )


def sidecar_of(records: list[Record], sst_size: int, error_rate: float) -> Sidecar:
    """The sidecar of ``records`` (sorted, non-empty) written as ``sst_size`` bytes."""
    tombstones = 0
    data_bytes = 0
    for rec in records:
        if rec.value is None:
            tombstones += 1
            data_bytes += len(rec.key)
        else:
            data_bytes += len(rec.key) + len(rec.value)
    bloom = build_bloom((r.key for r in records), len(records), error_rate)
    return Sidecar(
        len(records), tombstones, sst_size, data_bytes, records[0].key, records[-1].key, bloom
    )


def encode_staging_file(records: list[Record], error_rate: float) -> tuple[bytes, bytes, Sidecar]:
    """``(sst, sidecar bytes, sidecar)`` for sorted, unique, non-empty ``records``.

    Synchronous and CPU-bound (about 2.5 us per record, mostly the SST writer and
    the bloom filter): async callers run it in a thread.
    """
    if not records:
        raise InvalidInputError("a staging file needs at least one record")
    sst = write_sst(records)
    sc = sidecar_of(records, len(sst), error_rate)
    return sst, encode_sidecar(sc), sc


def encode_staging_columns(
    keys: list[bytes], encoded: list[bytes | None], data_bytes: int, error_rate: float
) -> tuple[bytes, bytes, Sidecar]:
    """:func:`encode_staging_file` of records given as columns in key order: the keys,
    their encoded values (:func:`~lsmstore.graveler.value.encode_value`; None for a
    tombstone) and the sidecar's ``data_bytes`` (the keys' and the values' data
    lengths summed).  Each column is checked and written in C loops, not a Python
    step per record (the encoder's path)."""
    if not keys:
        raise InvalidInputError("a staging file needs at least one record")
    sst = write_sst_columns(keys, encoded)
    bloom = build_bloom(keys, len(keys), error_rate)
    sc = Sidecar(len(keys), encoded.count(None), len(sst), data_bytes, keys[0], keys[-1], bloom)
    return sst, encode_sidecar(sc), sc


#: What one record of a prepared SST counts against its decoded bound besides its key
#: and value (:func:`sidecar_of_prepared_sst`).
RECORD_OVERHEAD_BYTES = 32


def sidecar_of_prepared_sst(
    data: bytes,
    name: str,
    max_key_bytes: int,
    max_value_bytes: int,
    error_rate: float,
    max_decoded_bytes: int,
) -> Sidecar:
    """Validate a prepared SST completely and return its sidecar.

    Every entry is read: keys must be 1..``max_key_bytes`` bytes and strictly
    increasing, values must decode (graveler value encoding) with data of at most
    ``max_value_bytes``.  The file may decode to at most ``max_decoded_bytes`` (its
    keys and values plus :data:`RECORD_OVERHEAD_BYTES` per record; the count its
    properties claim is checked against it before anything is read): a small,
    highly compressed file cannot make the reader produce more.  Records are
    streamed, one data block at a time; only their keys are kept (for the bloom
    filter).  Raises CorruptFileError (unreadable, unsorted), UnsupportedFormatError,
    EntryTooLargeError (a key, a value or the whole past its bound) or
    InvalidInputError (empty).  Synchronous and CPU-bound: run it in a thread.
    """
    reader = SSTReader(data, name)
    if reader.num_entries * RECORD_OVERHEAD_BYTES > max_decoded_bytes:
        raise EntryTooLargeError(
            f"{name}: {reader.num_entries} entries, over the bound of {max_decoded_bytes} "
            "decoded bytes"
        )
    keys: list[bytes] = []
    prev: bytes | None = None
    tombstones = data_bytes = 0
    decoded = 0
    for rec in reader:
        key = rec.key
        if prev is not None and key <= prev:
            raise CorruptFileError(name, f"keys not strictly increasing: {key!r} after {prev!r}")
        if not key:
            raise EntryTooLargeError(f"{name}: holds an empty key")
        if len(key) > max_key_bytes:
            raise EntryTooLargeError(
                f"{name}: key {key[:32]!r}... is {len(key)} bytes, over {max_key_bytes}"
            )
        value = rec.value
        if value is None:
            tombstones += 1
            size = len(key)
        else:
            if len(value) > max_value_bytes:
                raise EntryTooLargeError(
                    f"{name}: value of {key[:64]!r} is {len(value)} bytes, over {max_value_bytes}"
                )
            size = len(key) + len(value)
        data_bytes += size
        decoded += size + RECORD_OVERHEAD_BYTES
        if decoded > max_decoded_bytes:
            raise EntryTooLargeError(f"{name}: decodes to more than {max_decoded_bytes} bytes")
        keys.append(key)
        prev = key
    if not keys:
        raise InvalidInputError(f"{name}: holds no entries")
    if len(keys) != reader.num_entries:
        raise CorruptFileError(
            name, f"properties count {reader.num_entries} entries but {len(keys)} were read"
        )
    bloom = build_bloom(keys, len(keys), error_rate)
    return Sidecar(len(keys), tombstones, len(data), data_bytes, keys[0], keys[-1], bloom)
