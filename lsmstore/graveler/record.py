"""ValueRecord: the unit every layer stores.

``Record(key, identity, value)``; ``value is None`` marks a tombstone (the key is
deleted).  Two records are equal iff key and identity are equal -- identity is the
caller's fingerprint of the value (SHA-256 of the value by default).

Containers that hold many records for a while (the writer's memstore, decoded SST
blocks in the caches) keep them as plain tuples, :data:`RecordTuple`, and hand out a
``Record`` at the boundary (:func:`as_record`).  The reason is CPython's cyclic garbage
collector: it stops tracking an *exact* tuple of untracked items (bytes, None) at the
first collection that sees it, but never a tuple subclass such as a NamedTuple, so
every live ``Record`` is walked by every full collection (74,000 cached records cost
a 20 ms pause in the read benchmark, BENCHMARKS.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from operator import itemgetter
from typing import Any, NamedTuple, TypeAlias


class Record(NamedTuple):
    key: bytes
    identity: bytes
    value: bytes | None  # None: tombstone

    @property
    def is_tombstone(self) -> bool:
        return self.value is None

    def same_as(self, other: Record) -> bool:
        """Record equality of the data model: same key and same identity."""
        return self.key == other.key and self.identity == other.identity


#: ``(key, identity, value)`` as a plain tuple: the same fields as a :class:`Record`
#: (which is one too), without the class (see the module docstring).
RecordTuple: TypeAlias = tuple[bytes, bytes, bytes | None]

_new_tuple = tuple.__new__


def as_record(t: RecordTuple) -> Record:
    """The :class:`Record` of a plain record tuple (one C call, no Python frame)."""
    rec: Record = _new_tuple(Record, t)
    return rec


_FIELD = tuple(map(itemgetter, range(8)))


def field_columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """The first ``width`` fields of ``rows`` (tuples of at least that many fields) as
    ``width`` lists, a column a pass in C: no Python frame per row, and none of the
    per-row iterators ``zip(*rows)`` would make (each a new object for the cyclic
    collector).  Every batch of records or pending records is taken apart here."""
    return [list(map(get, rows)) for get in _FIELD[:width]]


def columns(records: Sequence[RecordTuple]) -> tuple[list[bytes], list[bytes], list[bytes | None]]:
    """Keys, identities and values of ``records`` (Records or plain tuples), a list
    each (:func:`field_columns`)."""
    key, identity, value = _FIELD[:3]
    return list(map(key, records)), list(map(identity, records)), list(map(value, records))


def tombstone(key: bytes) -> Record:
    return Record(key, b"", None)


def default_identity(value: bytes) -> bytes:
    """The identity of a value when the caller does not supply one (raw SHA-256)."""
    return hashlib.sha256(value).digest()
