"""The memstore: writes of one branch waiting for their batch to be flushed.

A plain dict (the latest write per key wins) sorted once when the batch is frozen:
inserting into a dict and sorting a few thousand keys at flush time is about 2.5x
cheaper than keeping a sorted map (measured: 100k keys, 54 ms vs 132 ms).
Not thread-safe; used from one event loop.
"""

from __future__ import annotations

from collections.abc import Iterable

from lsmstore.graveler.record import Record
from lsmstore.staging.pending import PENDING_EXTRA, Pending, Staged

#: Bytes charged per record on top of key and value (identity, dict slot, tuple).
RECORD_OVERHEAD = 96


def record_bytes(rec: Record) -> int:
    """What a record costs the writer's memory bound."""
    return len(rec.key) + (len(rec.value) if rec.value is not None else 0) + RECORD_OVERHEAD


def staged_bytes(rec: Staged) -> int:
    """:func:`record_bytes` of a made or a pending record (its value's parts)."""
    if type(rec) is Pending:
        return len(rec[0]) + len(rec[2]) + len(rec[4]) + PENDING_EXTRA + RECORD_OVERHEAD
    return record_bytes(rec)  # type: ignore[arg-type]  # a Record


class Memstore:
    """A mutable map ``key -> Record`` with a running byte count."""

    __slots__ = ("_records", "has_pending", "nbytes")

    def __init__(self) -> None:
        #: key -> latest record; read-only for callers (the writer's fast path checks
        #: its length without a method call).
        self._records: dict[bytes, Staged] = {}
        self.nbytes = 0
        #: Whether a pending record (:mod:`lsmstore.staging.pending`) was ever added.
        self.has_pending = False

    @property
    def map(self) -> dict[bytes, Staged]:
        """The underlying dict (key -> record): read it, never change it."""
        return self._records

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: bytes) -> bool:
        return key in self._records

    def get(self, key: bytes) -> Staged | None:
        return self._records.get(key)

    def add(self, rec: Record) -> int:
        """Insert or replace ``rec``; returns the change of :attr:`nbytes`."""
        records = self._records
        key, _, value = rec
        old = records.get(key)
        records[key] = rec
        delta = len(key) + RECORD_OVERHEAD + (len(value) if value is not None else 0)
        if old is not None:
            delta -= staged_bytes(old)
        self.nbytes += delta
        return delta

    def add_many(self, records: Iterable[Record]) -> int:
        """:meth:`add` for each record, in order; returns the change of :attr:`nbytes`."""
        if self.has_pending:
            return self.add_staged(records)
        d = self._records
        get = d.get
        delta = 0
        for rec in records:
            key = rec.key
            old = get(key)
            d[key] = rec
            value = rec.value
            delta += len(key) + RECORD_OVERHEAD + (len(value) if value is not None else 0)
            if old is not None:
                value = old.value  # type: ignore[union-attr]  # no pending record here
                delta -= len(key) + RECORD_OVERHEAD + (len(value) if value is not None else 0)
        self.nbytes += delta
        return delta

    def add_staged(self, records: Iterable[Staged]) -> int:
        """:meth:`add_many` of records of which some may be pending."""
        self.has_pending = True
        d = self._records
        get = d.get
        delta = 0
        for rec in records:
            key = rec[0]
            old = get(key)
            d[key] = rec
            delta += staged_bytes(rec)
            if old is not None:
                delta -= staged_bytes(old)
        self.nbytes += delta
        return delta

    def records(self) -> list[Staged]:
        """The records in insertion order of their keys (the memstore is left unchanged)."""
        return list(self._records.values())

    def sorted_records(self) -> list[Staged]:
        """The records in key order (the memstore is left unchanged)."""
        records = self._records
        return [records[k] for k in sorted(records)]
