"""Metaranges: the SST that lists a tree's ranges, keyed by each range's last key.

Each entry is ``Record(key=range.max_key, identity=range.id as ASCII hex, value=range
data)``; the SST stores the value as ``encode_value(identity, data)``.  The range data
(docs/format.md, "Metaranges") is lakeFS's ``RangeData`` protobuf message
(``proto/range_data.proto``: ``min_key``, ``max_key``, ``estimated_size``, ``count``), so
lakeFS reads our metaranges and we read its.  Metaranges written before that used
a form of their own (a ``0x01`` version byte, then varints), which a protobuf message
cannot start with; the reader still accepts it.

A metarange is named by the fileID of its entries, like a range.  The empty tree has the
ID :data:`EMPTY_METARANGE_ID` (the fileID of no records); it is never stored, and every
reader treats it as a tree with no ranges.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
from collections.abc import Iterator, Sequence

from google.protobuf.message import DecodeError

from lsmstore import layout
from lsmstore.errors import CorruptFileError, InvalidInputError, ObjectExistsError
from lsmstore.graveler.ids import file_id
from lsmstore.graveler.proto.range_data_pb2 import RangeData
from lsmstore.graveler.ranges import RangeInfo
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import METARANGE, write_committed_sst
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.types import HEX_ID

#: The ID of the tree with no records: SHA-256 of no record IDs.  Never stored.
EMPTY_METARANGE_ID = hashlib.sha256(b"").hexdigest()

#: First byte of the range data of metaranges written before the protobuf form.
LEGACY_RANGE_DATA_VERSION = 1


def _get_uvarint(buf: bytes, p: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[p]  # IndexError: truncated
        p += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, p
        shift += 7
        if shift > 63:
            raise ValueError("uvarint longer than 10 bytes")


def encode_range_data(info: RangeInfo) -> bytes:
    """The data part of a metarange entry for ``info``: a ``RangeData`` message."""
    return RangeData(
        min_key=info.min_key, max_key=info.max_key, estimated_size=info.size, count=info.count
    ).SerializeToString()


def _decode_legacy(data: bytes) -> tuple[bytes, bytes, int, int]:
    """``0x01 uvarint-prefixed min_key, max_key, uvarint size, uvarint count``."""
    n, p = _get_uvarint(data, 1)
    min_key = data[p : p + n]
    p += n
    n, p = _get_uvarint(data, p)
    max_key = data[p : p + n]
    p += n
    size, p = _get_uvarint(data, p)
    count, p = _get_uvarint(data, p)
    if p != len(data):
        raise ValueError(f"{len(data) - p} trailing bytes")
    return min_key, max_key, size, count


def decode_range_data(data: bytes) -> tuple[bytes, bytes, int, int]:
    """``(min_key, max_key, estimated size, count)``; ValueError when malformed."""
    if data[:1] == bytes((LEGACY_RANGE_DATA_VERSION,)):
        try:
            return _decode_legacy(data)
        except IndexError:
            raise ValueError("truncated") from None
    try:
        msg = RangeData.FromString(data)
    except DecodeError as e:
        raise ValueError(f"not a RangeData message: {e}") from None
    return msg.min_key, msg.max_key, msg.estimated_size, msg.count


def decode_range_entry(record: Record, name: str) -> RangeInfo:
    """The :class:`RangeInfo` of one metarange entry; CorruptFileError naming ``name``."""
    identity, data = record.identity, record.value
    if data is None:
        raise CorruptFileError(name, f"metarange entry {record.key!r} is a tombstone")
    if not HEX_ID.match(identity):
        raise CorruptFileError(name, f"metarange entry {record.key!r}: bad range ID {identity!r}")
    try:
        min_key, max_key, size, count = decode_range_data(data)
    except ValueError as e:
        raise CorruptFileError(
            name, f"metarange entry {record.key!r}: malformed range data ({e})"
        ) from None
    if max_key != record.key or not min_key or min_key > max_key or count < 1:
        raise CorruptFileError(
            name,
            f"metarange entry {record.key!r}: inconsistent range data "
            f"(min {min_key!r}, max {max_key!r}, count {count})",
        )
    return RangeInfo(identity.decode("ascii"), min_key, max_key, count, size)


def metarange_records(ranges: Sequence[RangeInfo]) -> list[Record]:
    """The entries of the metarange listing ``ranges`` (sorted, non-overlapping)."""
    records = []
    prev: bytes | None = None
    for info in ranges:
        if prev is not None and info.min_key <= prev:
            raise InvalidInputError(
                f"ranges overlap or are out of order: range {info.id} starts at "
                f"{info.min_key!r}, the previous range ends at {prev!r}"
            )
        prev = info.max_key
        records.append(Record(info.max_key, info.id.encode("ascii"), encode_range_data(info)))
    return records


def write_metarange(ranges: Sequence[RangeInfo]) -> tuple[str, bytes]:
    """``(id, sst bytes)`` of the metarange listing ``ranges``.

    No ranges give ``(EMPTY_METARANGE_ID, b"")``: the empty tree is never stored.
    Synchronous and CPU-bound (hashes every entry); see :func:`store_metarange`.
    """
    if not ranges:
        return EMPTY_METARANGE_ID, b""
    records = metarange_records(ranges)
    return file_id(records), write_committed_sst(records, METARANGE)


async def store_metarange(store: ObjectStore, ranges: Sequence[RangeInfo]) -> str:
    """Encode (in a worker thread) and upload the metarange of ``ranges``; its ID.

    Create mode: an object already there has the same content and is kept.
    """
    if not ranges:
        return EMPTY_METARANGE_ID
    metarange_id, data = await asyncio.to_thread(write_metarange, ranges)
    try:
        await store.put(layout.range_key(metarange_id), data, PutMode.CREATE)
    except ObjectExistsError:
        pass
    return metarange_id


class Metarange:
    """An immutable, parsed metarange: the ranges of one tree in key order."""

    __slots__ = ("_last_keys", "id", "ranges")

    def __init__(self, metarange_id: str, ranges: Sequence[RangeInfo]) -> None:
        self.id = metarange_id
        self.ranges: tuple[RangeInfo, ...] = tuple(ranges)
        self._last_keys = [r.max_key for r in self.ranges]

    @classmethod
    def empty(cls) -> Metarange:
        return cls(EMPTY_METARANGE_ID, ())

    @classmethod
    def from_reader(cls, metarange_id: str, reader: SSTReader) -> Metarange:
        """Parse and validate the entries of a metarange SST."""
        ranges: list[RangeInfo] = []
        prev: bytes | None = None
        for record in reader:
            info = decode_range_entry(record, reader.name)
            if prev is not None and info.min_key <= prev:
                raise CorruptFileError(
                    reader.name,
                    f"metarange ranges overlap: {info.id} starts at {info.min_key!r}, "
                    f"the previous range ends at {prev!r}",
                )
            prev = info.max_key
            ranges.append(info)
        return cls(metarange_id, ranges)

    def __len__(self) -> int:
        return len(self.ranges)

    def __iter__(self) -> Iterator[RangeInfo]:
        return iter(self.ranges)

    def index(self, key: bytes) -> int:
        """Index of the first range whose last key is >= ``key`` (``len(self)`` if none)."""
        return bisect.bisect_left(self._last_keys, key)

    def find(self, key: bytes) -> RangeInfo | None:
        """The range that may hold ``key``, or None when no range covers it."""
        i = bisect.bisect_left(self._last_keys, key)
        if i == len(self.ranges):
            return None
        info = self.ranges[i]
        return info if info.min_key <= key else None

    @property
    def count(self) -> int:
        """Records in the tree."""
        return sum(r.count for r in self.ranges)

    def __repr__(self) -> str:
        return f"Metarange({self.id[:12]}…, {len(self.ranges)} ranges)"
