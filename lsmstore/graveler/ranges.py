"""Ranges: committed SST files cut from a sorted record stream at content-defined points.

Splitting policy (docs/format.md, "Ranges, metaranges and commits"): a range grows record
by record; after adding a record it is cut when its estimated size reached
``max_bytes``, or when it reached ``min_bytes`` and ``fnv1a64(key) % raggedness == 0``.
The size is estimated from the records themselves (:func:`record_size`), never from SST
bytes, so the same records are cut at the same keys whatever the encoder does.  Because
the decision depends only on the keys and sizes since the last cut, an insert or delete
moves no boundary except near it: the writer re-synchronises with the old boundaries,
and the ranges after the change keep their IDs.

A range that ends where the policy cuts is *closed*; only the last range of a tree may
end otherwise.  Tree code reuses a range whole only when the output has just been cut
and the range is closed, so a tree built through :class:`RangeWriter` is a function of
its records and its policy alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Container
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from lsmstore import layout
from lsmstore.errors import InvalidInputError, ObjectExistsError
from lsmstore.graveler.range_encoder import RangeEncoder
from lsmstore.graveler.record import Record, RecordTuple, as_record
from lsmstore.storage.base import ObjectStore, PutMode

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1

#: Per-record overhead added to the key, identity and value lengths by :func:`record_size`
#: (roughly what the SST spends on the entry header, trailer and value encoding).
RECORD_OVERHEAD = 16


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a of ``data``."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & _MASK64
    return h


def record_size(record: Record) -> int:
    """The estimated stored size of a record, as the splitting policy counts it."""
    value = record.value
    return len(record.key) + len(record.identity) + (len(value) if value else 0) + RECORD_OVERHEAD


@dataclass(frozen=True, slots=True)
class RangePolicy:
    """Where ranges are cut.  Production defaults; tests pass tiny sizes."""

    min_bytes: int = 1 << 20
    max_bytes: int = 10 << 20
    raggedness: int = 50_000

    def __post_init__(self) -> None:
        if not 0 <= self.min_bytes <= self.max_bytes or self.max_bytes < 1:
            raise InvalidInputError(
                f"invalid range policy: need 0 <= min_bytes ({self.min_bytes}) "
                f"<= max_bytes ({self.max_bytes}) and max_bytes >= 1"
            )
        if self.raggedness < 1:
            raise InvalidInputError(f"invalid range policy: raggedness {self.raggedness} < 1")

    def is_hash_boundary(self, key: bytes) -> bool:
        """True when ``key`` ends a range once the range holds ``min_bytes``."""
        return fnv1a64(key) % self.raggedness == 0

    def cuts_after(self, key: bytes, size: int) -> bool:
        """True when a range whose estimated size is ``size`` after ``key`` ends there."""
        if size >= self.max_bytes:
            return True
        return size >= self.min_bytes and fnv1a64(key) % self.raggedness == 0

    def is_closed(self, info: RangeInfo) -> bool:
        """True when the policy would have cut ``info`` exactly where it ends."""
        return self.cuts_after(info.max_key, info.size)


@dataclass(frozen=True, slots=True)
class RangeInfo:
    """A committed range as a metarange lists it.

    ``id`` is the fileID of its records (hex), ``min_key``/``max_key`` its first and last
    keys, ``count`` its records and ``size`` their estimated size (:func:`record_size`).
    """

    id: str
    min_key: bytes
    max_key: bytes
    count: int
    size: int


@dataclass(slots=True)
class _Cut:
    """A range cut but not yet named (its ID is computed with its SST).  Once stored,
    ``info`` describes it and ``records`` is emptied: a writer holds the records of the
    ranges being encoded and uploaded, not of every range it wrote."""

    records: list[RecordTuple]  # Records, or plain tuples (lighter on the collector)
    size: int
    id: str = ""
    info: RangeInfo | None = None


class RangeWriter:
    """Cuts a sorted stream of records into ranges and uploads them.

    Feed records with :meth:`add` (strictly increasing keys, no tombstones) and whole
    existing ranges with :meth:`add_range` (only while :attr:`empty`), then call
    :meth:`finish` for the list of ranges in key order.  Each range is named by the
    fileID of its records and encoded (``write_committed_sst``) by ``encoder``
    (:class:`~lsmstore.graveler.range_encoder.RangeEncoder`: the first range in a
    thread, later ones in its process pool, so a big rewrite uses every core; default:
    threads only), then uploaded in create mode to ``layout.range_key(id)``; an object
    already there holds the same records and is kept.  At most ``max_in_flight``
    ranges are encoded or uploaded at once; :meth:`add` waits for room.  IDs in
    ``existing`` are known to be stored and are neither encoded nor uploaded.

    Tight loops may call the synchronous :meth:`push` instead of :meth:`add`; when it
    returns True a range was cut, and the caller awaits :meth:`flush` to start its upload
    (and to wait for room).

    An upload failure is raised from the next :meth:`add`/:meth:`flush`/:meth:`finish`.
    Used as an async context manager, leaving with an exception cancels the uploads still
    running (anything already uploaded is unreferenced and left to garbage collection).
    Not safe for concurrent use by several tasks.
    """

    def __init__(
        self,
        store: ObjectStore,
        policy: RangePolicy,
        *,
        max_in_flight: int = 4,
        existing: Container[str] = frozenset(),
        encoder: RangeEncoder | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise InvalidInputError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self._store = store
        self._policy = policy
        self._max_in_flight = max_in_flight
        self._existing = existing
        self._encoder = encoder or RangeEncoder(0)
        self._ranges: list[RangeInfo | _Cut] = []
        self._records: list[RecordTuple] = []
        self._size = 0
        self._last_key: bytes | None = None
        self._cuts = 0
        self._ready: list[_Cut] = []  # cut, encoding not started
        self._pending: set[asyncio.Task[None]] = set()
        self.ranges_written = 0  # ranges encoded and uploaded by this writer
        self.ranges_reused = 0  # ranges passed through whole (add_range) or found existing
        self.records_written = 0  # records in the ranges this writer encoded

    @property
    def empty(self) -> bool:
        """True when no record waits for a cut: the output has just been cut (or is new)."""
        return not self._records

    @property
    def last_key(self) -> bytes | None:
        return self._last_key

    @property
    def held_records(self) -> int:
        """Records this writer holds: those waiting for a cut and those of the ranges
        cut but not yet stored -- at most ``max_in_flight`` + 1 ranges' worth once
        :meth:`flush` returns, however many ranges it wrote."""
        cuts = sum(len(r.records) for r in self._ranges if isinstance(r, _Cut))
        return len(self._records) + cuts

    @property
    def ranges_cut(self) -> int:
        """Ranges appended so far (cut, or passed whole)."""
        return len(self._ranges)

    @property
    def pending(self) -> list[Record]:
        """The records that wait for a cut (after the last cut, in key order)."""
        return list(map(as_record, self._records))

    def push(
        self, record: Record, hash_boundary: bool | None = None, size: int | None = None
    ) -> bool:
        """Append one record; True when the policy cut a range after it (then await
        :meth:`flush`).

        ``hash_boundary`` may pass ``policy.is_hash_boundary(record.key)`` when the
        caller already knows it (it saves hashing the key); None: computed if needed.
        ``size`` may pass :func:`record_size` of the record when the caller has it.
        """
        key, identity, value = record
        if value is None:
            raise InvalidInputError(f"tombstone for key {key!r} cannot go into a committed range")
        self._check_next(key)
        self._last_key = key
        self._records.append(record)
        if size is None:
            size = len(key) + len(identity) + len(value) + RECORD_OVERHEAD
        size = self._size = self._size + size
        policy = self._policy
        if size >= policy.max_bytes or (
            size >= policy.min_bytes
            and (policy.is_hash_boundary(key) if hash_boundary is None else hash_boundary)
        ):
            self._cut()
            return True
        return False

    @property
    def size(self) -> int:
        """The estimated size of the records that wait for a cut."""
        return self._size

    def extend(self, records: list[RecordTuple], size: int) -> None:
        """Append records (plain tuples or Records) from a checked source -- strictly
        increasing non-empty keys, no tombstones -- whose :func:`record_size` sum to
        ``size``, without cutting: the caller decides where the policy cuts
        (:meth:`cut`).  Only the first key is checked (against the last one appended)."""
        if not records:
            return
        self._check_next(records[0][0])
        self._records += records
        self._size += size
        self._last_key = records[-1][0]

    def cut(self) -> None:
        """Cut a range after the records appended so far (then await :meth:`flush`)."""
        if self._records:
            self._cut()

    async def add(self, record: Record, hash_boundary: bool | None = None) -> None:
        """:meth:`push`, then :meth:`flush` when a range was cut."""
        if self.push(record, hash_boundary):
            await self.flush()

    async def add_range(self, info: RangeInfo) -> None:
        """Append an existing range whole (its object is already stored)."""
        self.add_stored(info, False)

    def add_stored(self, info: RangeInfo, written: bool) -> None:
        """Append a range cut, named and stored elsewhere (only while :attr:`empty`):
        ``written`` when that upload wrote it (counted as written, else as reused)."""
        if self._records:
            raise InvalidInputError(
                f"range {info.id} cannot be appended whole: records wait for a cut"
            )
        self._check_order(info.min_key)
        self._last_key = info.max_key
        self._ranges.append(info)
        if written:
            self.ranges_written += 1
            self.records_written += info.count
        else:
            self.ranges_reused += 1

    def _check_order(self, key: bytes) -> None:
        if self._last_key is not None and key <= self._last_key:
            raise InvalidInputError(
                f"records must have strictly increasing keys: {key!r} follows {self._last_key!r}"
            )

    def _check_next(self, key: bytes) -> None:
        """``key`` may be the next record's: after the last one, and not empty."""
        self._check_order(key)
        if not key:
            raise InvalidInputError("committed keys must be non-empty")

    async def finish(self, *, cut_last: bool = True) -> list[RangeInfo]:
        """Cut the last range, wait for every upload, and return all ranges in key order.
        With ``cut_last`` False the records after the last cut stay :attr:`pending`."""
        if self._records and cut_last:
            self._cut()
        await self.flush()
        if self._pending:
            await self._wait(asyncio.ALL_COMPLETED)
        out: list[RangeInfo] = []
        for r in self._ranges:
            if isinstance(r, _Cut):
                assert r.info is not None  # every upload ended (or raised above)
                r = r.info
            out.append(r)
        self._ranges = list(out)
        return out

    def _cut(self) -> None:
        cut = _Cut(self._records, self._size)
        self._ranges.append(cut)
        self._records = []
        self._size = 0
        self._ready.append(cut)

    async def flush(self) -> None:
        """Start the uploads of the ranges cut so far, waiting for room as needed."""
        self._reap()
        while self._ready:
            while len(self._pending) >= self._max_in_flight:
                await self._wait(asyncio.FIRST_COMPLETED)
            cut = self._ready.pop(0)
            self._cuts += 1
            # the first range in a thread: a commit that rewrites one range never waits
            # for the pool to start; small ranges cost more to ship than to encode
            in_pool = self._cuts > 1 and cut.size >= self._encoder.pool_min_bytes
            self._pending.add(asyncio.create_task(self._upload(cut, in_pool)))

    async def _upload(self, cut: _Cut, in_pool: bool) -> None:
        recs = cut.records
        cut.id, data = await self._encoder.encode(
            recs, self._existing, in_pool=in_pool, size=cut.size
        )
        if data is None:
            self.ranges_reused += 1
        else:
            self.ranges_written += 1
            self.records_written += len(recs)
            try:
                await self._store.put(layout.range_key(cut.id), data, PutMode.CREATE)
            except ObjectExistsError:
                pass  # content-addressed: the same records are already stored
        cut.info = RangeInfo(cut.id, recs[0][0], recs[-1][0], len(recs), cut.size)
        cut.records = []

    async def _wait(self, when: str) -> None:
        done, self._pending = await asyncio.wait(self._pending, return_when=when)
        for task in done:
            task.result()

    def _reap(self) -> None:
        for task in [t for t in self._pending if t.done()]:
            self._pending.discard(task)
            task.result()

    async def abort(self) -> None:
        """Cancel the uploads still running and wait for them to end."""
        self._ready.clear()
        pending, self._pending = self._pending, set()
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            await self.abort()
