"""The memstore: writes of one branch waiting for their batch to be flushed.

A plain dict (the latest write per key wins) sorted once when the batch is frozen:
inserting into a dict and sorting a few thousand keys at flush time is about 2.5x
cheaper than keeping a sorted map (measured: 100k keys, 54 ms vs 132 ms).

Records are kept as plain tuples (:data:`~lsmstore.graveler.record.RecordTuple`; a
:class:`~lsmstore.graveler.record.Record` given is copied into one): CPython's
collector stops tracking those at their first collection, so the records of batches
in flight (up to ``max_pending_bytes``) add nothing to a full collection's pause.
A ``link_many`` call checked a column at a time is held as one
:class:`~lsmstore.staging.pending.PendingCall` that its keys map to, not a tuple per
record (:meth:`Memstore.add_call`); the encoder takes the made records and the pending
ones as columns (:meth:`Memstore.split`).
Not thread-safe; used from one event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import cast

from lsmstore.graveler.record import RecordTuple, as_record
from lsmstore.staging.pending import (
    PENDING_EXTRA,
    Pending,
    PendingCall,
    PendingColumns,
    Staged,
    concat,
    split,
)

#: What a memstore holds: plain record tuples (untracked by the collector) and pending
#: records (:mod:`lsmstore.staging.pending`).
Held = RecordTuple | Pending

#: Bytes charged per record on top of key and value (identity, dict slot, tuple).
RECORD_OVERHEAD = 96


def record_bytes(rec: RecordTuple) -> int:
    """What a record costs the writer's memory bound."""
    value = rec[2]
    return len(rec[0]) + (len(value) if value is not None else 0) + RECORD_OVERHEAD


def pending_bytes(n: int, key_bytes: int, address_chars: int, checksum_chars: int) -> int:
    """:func:`staged_bytes` summed over ``n`` pending records of these total lengths of
    keys, addresses and checksums."""
    return key_bytes + address_chars + checksum_chars + n * (PENDING_EXTRA + RECORD_OVERHEAD)


def staged_bytes(rec: Staged | Held) -> int:
    """:func:`record_bytes` of a made or a pending record (its value's parts)."""
    if len(rec) == 5:  # pending
        return len(rec[0]) + len(rec[2]) + len(rec[4]) + PENDING_EXTRA + RECORD_OVERHEAD
    return record_bytes(rec)  # a record tuple


def _released(old: Held | PendingCall, key: bytes) -> int:
    """What a record replaced at ``key`` was charged: a row of a call is dropped."""
    if isinstance(old, PendingCall):
        i = old.row(key)
        old.dropped.add(i)
        return staged_bytes(old.record(i))
    return staged_bytes(old)


def _held(rec: Staged | Held) -> Held:
    """What the memstore keeps of ``rec``: a plain tuple as is (a made or a pending
    record), a ``Record`` as a plain tuple (it would stay tracked by the cyclic
    collector)."""
    if type(rec) is tuple:
        return rec
    return (rec[0], rec[1], rec[2])  # type: ignore[return-value]  # a Record


class StagedRows:
    """A large call's records made ready for :meth:`Memstore.add_rows` by
    :func:`prepare_rows`, which may run in a thread: the records' per-row work (the
    held tuples, the charge) is done off the event loop, and what is left for the loop
    is one ``dict.update`` -- so the call still enters one memstore in one step."""

    __slots__ = ("charge", "delta", "rows")

    def __init__(self, rows: dict[bytes, Held], charge: int, delta: int) -> None:
        #: key -> held record, the last record of a key given twice.
        self.rows = rows
        #: :func:`staged_bytes` summed over every record given (the writer's bound).
        self.charge = charge
        #: What the rows add to a memstore holding none of their keys.
        self.delta = delta

    def __len__(self) -> int:
        return len(self.rows)


def prepare_rows(records: Iterable[Staged | Held]) -> StagedRows:
    """The :class:`StagedRows` of ``records`` (made or pending); touches nothing but
    them, so it may run in a thread while the loop goes on."""
    held = list(map(_held, records))
    rows = {rec[0]: rec for rec in held}
    charge = sum(map(staged_bytes, held))
    delta = charge if len(rows) == len(held) else sum(map(staged_bytes, rows.values()))
    return StagedRows(rows, charge, delta)


class Memstore:
    """A mutable map ``key -> record`` with a running byte count."""

    __slots__ = ("_calls", "_records", "has_pending", "map", "nbytes")

    def __init__(self) -> None:
        #: key -> latest record (a plain tuple, or a pending record), or the call of
        #: pending records held as columns whose row it is (see :meth:`add_call`)
        self._records: dict[bytes, Held | PendingCall] = {}
        self._calls: list[PendingCall] = []
        #: The same dict, for callers: read it, never change it (an attribute, not a
        #: property: the writer reads it on every put).
        self.map = self._records
        self.nbytes = 0
        #: Whether a pending record (:mod:`lsmstore.staging.pending`) was ever added.
        self.has_pending = False

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: bytes) -> bool:
        return key in self._records

    def get(self, key: bytes) -> Staged | None:
        t = self._records.get(key)
        if isinstance(t, PendingCall):
            return t.record(t.row(key))
        if t is None or len(t) == 5:  # absent, or pending
            return t
        return as_record(t)  # a record tuple

    def add(self, rec: RecordTuple | Pending) -> int:
        """Insert or replace ``rec``; returns the change of :attr:`nbytes`."""
        if len(rec) == 5:  # pending
            return self.add_staged((rec,))
        if type(rec) is not tuple:
            rec = _held(rec)  # a Record: keep a plain tuple
        records = self._records
        key, _, value = cast(RecordTuple, rec)
        old = records.get(key)
        records[key] = rec
        delta = len(key) + RECORD_OVERHEAD + (len(value) if value is not None else 0)
        if old is not None:
            delta -= _released(old, key)
        self.nbytes += delta
        return delta

    def add_many(self, records: Iterable[RecordTuple]) -> int:
        """:meth:`add` for each record, in order; returns the change of :attr:`nbytes`."""
        if self.has_pending:
            return self.add_staged(records)
        d = self._records
        get = d.get
        delta = 0
        for rec in records:
            if type(rec) is not tuple:
                rec = (rec[0], rec[1], rec[2])
            key, _, value = rec
            old = get(key)
            d[key] = rec
            delta += len(key) + RECORD_OVERHEAD + (len(value) if value is not None else 0)
            if old is not None:
                value = cast(RecordTuple, old)[2]  # no pending record (has_pending is False)
                delta -= len(key) + RECORD_OVERHEAD + (len(value) if value is not None else 0)
        self.nbytes += delta
        return delta

    def add_staged(self, records: Iterable[Staged | Held]) -> int:
        """:meth:`add_many` of records of which some may be pending (a call's pending
        records checked as columns come by :meth:`add_call`)."""
        self.has_pending = True
        d = self._records
        get = d.get
        delta = 0
        extra = PENDING_EXTRA + RECORD_OVERHEAD
        for rec in records:
            if len(rec) == 5:  # pending; staged_bytes inlined: the hot case (link_many)
                key = rec[0]
                old = get(key)
                d[key] = rec
                delta += len(key) + len(rec[2]) + len(rec[4]) + extra
            else:
                held = _held(rec)
                key = held[0]
                old = get(key)
                d[key] = held
                delta += staged_bytes(held)
            if old is not None:
                delta -= _released(old, key)
        self.nbytes += delta
        return delta

    def add_rows(self, staged: StagedRows) -> int:
        """:meth:`add_staged` of records :func:`prepare_rows` made ready: the keys
        already held are released one by one, the rest is one ``dict.update``."""
        d = self._records
        delta = staged.delta
        rows = staged.rows
        if d:
            for key in d.keys() & rows.keys():
                delta -= _released(d[key], key)
        d.update(rows)
        self.has_pending = True
        self.nbytes += delta
        return delta

    def add_call(self, call: PendingCall) -> int:
        """:meth:`add_staged` of a call's pending records held as columns: when no key
        of the call is held yet, its keys map to the call itself (one ``dict.update``,
        no tuple per record); else its rows go through the record loop.  Returns the
        change of :attr:`nbytes`."""
        d = self._records
        if d and not d.keys().isdisjoint(call.keys):
            return self.add_staged(call.records())
        self.has_pending = True
        before = len(d)
        d.update(zip(call.keys, repeat(call)))
        self._calls.append(call)
        delta = call.charge
        if len(d) - before != len(call):  # a key given twice: its last row stays
            last = set(map(call.row, call.keys))
            call.dropped.update(i for i in range(len(call)) if i not in last)
            delta -= sum(staged_bytes(call.record(i)) for i in call.dropped)
        self.nbytes += delta
        return delta

    def records(self) -> list[Held]:
        """The record tuples (and pending records) in insertion order of their keys (the
        memstore is left unchanged)."""
        if not self._calls:
            return list(self._records.values())  # type: ignore[arg-type]  # no call held
        return [self._row(k, v) for k, v in self._records.items()]

    def split(self) -> tuple[list[RecordTuple], PendingColumns | None]:
        """The made records and the pending ones as columns: what the encoder takes
        (:func:`~lsmstore.staging.pending.split` of :meth:`records`, with the calls'
        columns as they are)."""
        values = self._records.values()
        if not self._calls:
            held = list(values)
            return split(held) if self.has_pending else (held, None)  # type: ignore[arg-type,return-value]
        rows = sum(len(c) - len(c.dropped) for c in self._calls)
        others = (
            []
            if rows == len(self._records)
            else [v for v in values if v.__class__ is not PendingCall]
        )
        made, pending = split(others) if others else ([], None)  # type: ignore[arg-type]
        parts = [pending] if pending is not None else []
        parts += [c.columns() for c in self._calls if len(c.dropped) < len(c)]
        return made, concat(parts)

    def sorted_records(self) -> list[Staged]:
        """The records in key order (the memstore is left unchanged)."""
        records = self._records
        out: list[Staged] = []
        for k in sorted(records):
            r = self._row(k, records[k])
            out.append(r if len(r) == 5 else as_record(r))
        return out

    @staticmethod
    def _row(key: bytes, held: Held | PendingCall) -> Held:
        if isinstance(held, PendingCall):
            return held.record(held.row(key))
        return held
