"""Reading a committed tree: point lookups and ordered scans across its ranges.

:class:`TreeReader` loads the tree's metarange once (through its source) and keeps it;
a lookup bisects the ranges' last keys and asks one range.  A scan walks the ranges in
order and fetches the next range while it yields the current one.  Committed ranges hold
no tombstones: one found raises :class:`CorruptFileError`.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import AsyncIterator, Iterator, Sequence
from operator import attrgetter, itemgetter

from lsmstore.errors import CorruptFileError
from lsmstore.graveler.metarange import Metarange
from lsmstore.graveler.ranges import RangeInfo
from lsmstore.graveler.record import Record, RecordTuple
from lsmstore.graveler.source import RangeSource
from lsmstore.graveler.sst_reader import DecodedBlock, SSTReader
from lsmstore.types import check_tree_id

_VALUE = itemgetter(2)
_MIN_KEY = attrgetter("min_key")
_new_tuple = tuple.__new__  # a Record of a plain tuple, made in C


def _tombstone(reader: SSTReader, key: bytes) -> CorruptFileError:
    return CorruptFileError(reader.name, f"committed range holds a tombstone for {key!r}")


class TreeReader:
    """A read-only view of the tree named ``metarange_id``.  Safe for concurrent tasks."""

    def __init__(self, source: RangeSource, metarange_id: str) -> None:
        self.source = source
        self.metarange_id = check_tree_id(metarange_id)
        self._metarange: Metarange | None = None

    async def metarange(self) -> Metarange:
        mr = self._metarange
        if mr is None:
            mr = self._metarange = await self.source.metarange(self.metarange_id)
        return mr

    async def ranges(self) -> list[RangeInfo]:
        return list((await self.metarange()).ranges)

    async def get(self, key: bytes) -> Record | None:
        """The record of ``key``, or None when the tree does not hold it."""
        mr = self._metarange
        if mr is None:
            mr = await self.metarange()
        info = mr.find(key)
        if info is None:
            return None
        reader = await self.source.reader(info.id)
        record = reader.get(key)
        if record is not None and record.value is None:
            raise _tombstone(reader, key)
        return record

    async def seek(self, key: bytes = b"", stop: bytes | None = None) -> AsyncIterator[Record]:
        """Records with key >= ``key`` in key order (and < ``stop``, if given: then no
        range starting at or after ``stop`` is fetched, not even ahead)."""
        mr = await self.metarange()
        ranges = mr.ranges
        i = mr.index(key)
        end = len(ranges) if stop is None else bisect_left(ranges, stop, key=_MIN_KEY)
        if i >= end:
            return
        source = self.source
        current: asyncio.Task[SSTReader] = asyncio.ensure_future(source.reader(ranges[i].id))
        try:
            while True:
                reader = await current
                i += 1
                if i < end:
                    current = asyncio.ensure_future(source.reader(ranges[i].id))
                for record in reader.seek(key):
                    if stop is not None and record.key >= stop:
                        return
                    if record.value is None:
                        raise _tombstone(reader, record.key)
                    yield record
                if i >= end:
                    return
        finally:
            if not current.done():
                current.cancel()
            elif not current.cancelled():
                current.exception()  # retrieved: a prefetch nobody awaited may have failed

    def __aiter__(self) -> AsyncIterator[Record]:
        return self.seek(b"")


class TreeCursor:
    """Walks a tree's ranges in key order, reading a range only when it is entered.

    The cursor is either *at the header* of range ``i`` (nothing read yet; ``record`` is
    None and :attr:`pos` is the range's first key), *inside* it at ``record``, or past the
    last range (``valid`` False, ``pos`` None).  Moving within an entered range is
    synchronous (the range is in memory, read a decoded block at a time).
    ``ranges_read`` counts entered ranges.  Used by apply, diff and merge; not safe for
    concurrent use.
    """

    __slots__ = (
        "_blocks",
        "_j",
        "_keys",
        "_reader",
        "_recs",
        "i",
        "ranges",
        "ranges_read",
        "record",
        "source",
    )

    def __init__(self, source: RangeSource, ranges: Sequence[RangeInfo]) -> None:
        self.source = source
        self.ranges = ranges
        self.i = 0
        self.record: Record | None = None
        self.ranges_read = 0
        self._reader: SSTReader | None = None
        self._blocks: Iterator[tuple[int, DecodedBlock]] | None = None
        self._keys: tuple[bytes, ...] = ()
        self._recs: tuple[RecordTuple, ...] = ()
        self._j = 0  # index in _recs of the record after ``record``

    @property
    def valid(self) -> bool:
        return self.i < len(self.ranges)

    @property
    def at_header(self) -> bool:
        return self.record is None and self.i < len(self.ranges)

    @property
    def range(self) -> RangeInfo:
        return self.ranges[self.i]

    @property
    def pos(self) -> bytes | None:
        """The smallest key not yet passed: the current record's, or the header range's
        first key; None past the end."""
        if self.record is not None:
            return self.record.key
        if self.i < len(self.ranges):
            return self.ranges[self.i].min_key
        return None

    async def enter(self) -> None:
        """Read the header range and stand on its first record."""
        info = self.ranges[self.i]
        reader = await self.source.reader(info.id)
        self.ranges_read += 1
        self._reader = reader
        self._start(reader.blocks())
        if self.record is None or self.record.key != info.min_key:
            first = None if self.record is None else self.record.key
            raise CorruptFileError(
                reader.name, f"range starts at {first!r}, its metarange says {info.min_key!r}"
            )

    def _start(self, blocks: Iterator[tuple[int, DecodedBlock]]) -> None:
        self._blocks = blocks
        self._keys = ()
        self._recs = ()
        self._j = 0
        self._step()

    def _step(self) -> None:
        j = self._j
        recs = self._recs
        while j >= len(recs):
            assert self._blocks is not None
            block = next(self._blocks, None)
            if block is None:
                self._end_of_range()
                return
            j, (self._keys, recs) = block
            self._recs = recs
        t = recs[j]
        self._j = j + 1
        if t[2] is None:
            assert self._reader is not None
            raise _tombstone(self._reader, t[0])
        self.record = _new_tuple(Record, t)

    def _end_of_range(self) -> None:
        info = self.ranges[self.i]
        reader = self._reader
        assert reader is not None
        if reader.last_key != info.max_key:
            raise CorruptFileError(
                reader.name,
                f"range ends at {reader.last_key!r}, its metarange says {info.max_key!r}",
            )
        self.skip_range()

    def take_run(self, stop: bytes | None) -> list[RecordTuple]:
        """The current record and the following ones of the entered range whose keys are
        below ``stop`` (None: to the range's end), as one list (empty when the current
        record is not below ``stop``, or the cursor is at a header).  The cursor is left
        on the run's last record: :meth:`next` moves past it."""
        record = self.record
        if record is None or (stop is not None and record[0] >= stop):
            return []
        run: list[RecordTuple] = [record]
        keys, recs, j = self._keys, self._recs, self._j
        blocks = self._blocks
        assert blocks is not None
        while True:
            end = len(recs) if stop is None else bisect_left(keys, stop, j)
            if end > j:
                more = recs[j:end]
                if None in map(_VALUE, more):
                    assert self._reader is not None
                    bad = next(t for t in more if t[2] is None)
                    raise _tombstone(self._reader, bad[0])
                run += more
            if end < len(recs):
                break
            block = next(blocks, None)  # the block is used up: on into the next one
            if block is None:
                break  # the range's end: the next step meets it again
            end, (keys, recs) = block
            j = end
        self._keys, self._recs, self._j = keys, recs, end
        if len(run) > 1:
            self.record = _new_tuple(Record, run[-1])
        return run

    def next(self) -> None:
        """Move to the next record (or to the next range's header)."""
        self._step()

    def skip_range(self) -> None:
        """Leave the current range (header or inside) for the next range's header."""
        self.i += 1
        self.record = None
        self._blocks = None
        self._keys = ()
        self._recs = ()
        self._j = 0
        self._reader = None

    def skip_to(self, key: bytes) -> None:
        """Move to the first position >= ``key`` without entering any range."""
        while self.i < len(self.ranges):
            info = self.ranges[self.i]
            if info.max_key < key:
                self.skip_range()
                continue
            if self.record is not None and self.record.key < key:
                assert self._reader is not None
                self._start(self._reader.blocks(key))  # max_key >= key: a record is found
            return

    async def lookup(self, key: bytes) -> Record | None:
        """The record of ``key`` (None if absent), entering its range if needed.
        Successive calls must ask for non-decreasing keys."""
        self.skip_to(key)
        if self.i == len(self.ranges):
            return None
        if self.record is None:
            if self.ranges[self.i].min_key > key:
                return None
            await self.enter()
            self.skip_to(key)
        record = self.record
        return record if record is not None and record.key == key else None
