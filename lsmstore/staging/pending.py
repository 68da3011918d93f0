"""Pending records: staged writes whose identity and value the encoder computes.

A :data:`Pending` record holds what its value is made of -- an object entry's address,
size and checksum -- and the :data:`MakerSpec` of the :class:`EntryMaker` that turns
them into ``(identity, value)``: a tuple naming the maker's factory and its arguments
(the fields a batch shares: modification time, address type, content type), one object
shared by the records of a call.  It is a plain 5-tuple of bytes, str and int -- a
made record is a 3-tuple -- so, like the made records (:mod:`lsmstore.graveler.record`),
the cyclic garbage collector stops tracking it at its first collection: a NamedTuple
or a tuple holding the maker object itself would be walked by every full collection
while it waits in the memstore, and costs twice as much to build.  The writer stages it
like any record; the encoder makes its value while encoding the batch's L1 file, in the
encoder's worker process when the batch goes there (else in the thread that encodes
it), so hashing and serialising entries costs the event loop nothing.

Nothing reads a memstore but the encoder: a write is visible only once its L1 file is
durable and appended, and by then the file holds the made value -- so a pending record
is never seen half-made.  The identity and value are exactly what the maker returns;
the objects layer checks everything (paths, addresses, sizes, the value bound) before
it stages one, so making it cannot fail on good input.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Sequence
from operator import is_not
from typing import Any, Protocol, TypeAlias

from lsmstore.graveler.record import Record, RecordTuple, field_columns
from lsmstore.graveler.value import encode_values


class EntryMaker(Protocol):
    """Makes ``(identity, value)`` of an entry from its per-record fields."""

    def encode(self, address: str, size: int, checksum: str) -> tuple[bytes, bytes]: ...

    def encode_many(
        self, addresses: Sequence[str], sizes: Sequence[int], checksums: Sequence[str]
    ) -> tuple[list[bytes], list[bytes]]:
        """Identities and values of many entries (:meth:`encode` of each)."""
        ...

    def encode_values_many(
        self, addresses: Sequence[str], sizes: Sequence[int], checksums: Sequence[str]
    ) -> tuple[list[bytes], list[bytes], int]:
        """Identities of many entries, their graveler values
        (:func:`~lsmstore.graveler.value.encode_value` of identity and value: what a
        staging file holds) and their values' total length."""
        ...


#: An :class:`EntryMaker` named by its factory, ``"module:name"``, and the arguments to
#: call it with (plain values): ``maker_of(spec)`` is the maker.
MakerSpec: TypeAlias = tuple[Any, ...]

#: ``(key, maker spec, address, size, checksum)``: a plain tuple (see the module
#: docstring), told from a made record by its length (``len(rec) == 5``, inline where
#: records are sorted out: a call per record would cost more than the test).
Pending: TypeAlias = tuple[bytes, MakerSpec, str, int, str]

#: What the writer stages: made records, and pending ones.
Staged: TypeAlias = Record | RecordTuple | Pending


@functools.lru_cache(maxsize=256)
def maker_of(spec: MakerSpec) -> EntryMaker:
    """The maker ``spec`` names (one per distinct spec while it is in use)."""
    module, _, name = spec[0].partition(":")
    factory = getattr(importlib.import_module(module), name)
    maker: EntryMaker = factory(*spec[1:])
    return maker


#: Bytes charged to a pending record on top of key, address and checksum: the fields
#: its value shares with its batch and the protobuf framing.
PENDING_EXTRA = 64

#: Pending records as columns: keys, makers (one object shared by many records: pickled
#: once), addresses, sizes, checksums.
PendingColumns = tuple[list[bytes], list[MakerSpec], list[str], list[int], list[str]]


class PendingCall:
    """The pending records of one call -- a ``link_many`` call checked a column at a
    time -- kept as the columns they were checked as: one object in the memstore, whose
    keys all map to it, instead of a tuple per record.  ``charge`` is the records'
    summed ``staged_bytes``.  A row is made into a :data:`Pending` tuple only when read
    alone (:meth:`record`); the encoder takes the columns (:meth:`columns`).  A row
    whose key was written again later (or given again later in the call) is
    *dropped*: the memstore holds that key's newer record."""

    __slots__ = ("_index", "addresses", "charge", "checksums", "dropped", "keys", "sizes", "spec")

    def __init__(
        self,
        keys: list[bytes],
        spec: MakerSpec,
        addresses: list[str],
        sizes: list[int],
        checksums: list[str],
        charge: int,
    ) -> None:
        self.keys = keys
        self.spec = spec
        self.addresses = addresses
        self.sizes = sizes
        self.checksums = checksums
        self.charge = charge
        #: Row numbers whose key the memstore holds a newer record of.
        self.dropped: set[int] = set()
        self._index: dict[bytes, int] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def row(self, key: bytes) -> int:
        """The row of ``key``: its last, when the call gives it twice."""
        if self._index is None:
            self._index = dict(zip(self.keys, range(len(self.keys)), strict=True))
        return self._index[key]

    def record(self, i: int) -> Pending:
        """Row ``i`` as a pending record."""
        return (self.keys[i], self.spec, self.addresses[i], self.sizes[i], self.checksums[i])

    def records(self) -> list[Pending]:
        """Every row as a pending record, in order."""
        return list(map(self.record, range(len(self.keys))))

    def columns(self) -> PendingColumns:
        """The rows not dropped, as columns."""
        if not self.dropped:
            n = len(self.keys)
            return self.keys, [self.spec] * n, self.addresses, self.sizes, self.checksums
        rows = [i for i in range(len(self.keys)) if i not in self.dropped]
        return _columns(list(map(self.record, rows)))


def concat(parts: list[PendingColumns]) -> PendingColumns | None:
    """The columns of ``parts`` one after another (None if there are none)."""
    if len(parts) <= 1:
        return parts[0] if parts else None
    keys: list[bytes] = []
    makers: list[MakerSpec] = []
    addresses: list[str] = []
    sizes: list[int] = []
    checksums: list[str] = []
    for k, m, a, s, c in parts:
        keys += k
        makers += m
        addresses += a
        sizes += s
        checksums += c
    return keys, makers, addresses, sizes, checksums


def split(
    records: list[Staged | RecordTuple],
) -> tuple[list[RecordTuple], PendingColumns | None]:
    """The made records of ``records`` and its pending ones as columns (None if none)."""
    lengths = set(map(len, records))
    if 5 not in lengths:
        return records, None  # type: ignore[return-value]  # no pending record among them
    if len(lengths) == 1:  # pending records only (a link_many batch): no filtering
        return [], _columns(records)  # type: ignore[arg-type]  # all pending
    pending: list[Pending] = [r for r in records if len(r) == 5]
    made: list[RecordTuple] = [r for r in records if len(r) != 5]
    return made, _columns(pending)


def _columns(records: list[Pending]) -> PendingColumns:
    """The columns of pending records (:func:`~lsmstore.graveler.record.field_columns`)."""
    keys, makers, addresses, sizes, checksums = field_columns(records, 5)
    return keys, makers, addresses, sizes, checksums


def make_encoded(columns: PendingColumns) -> tuple[list[bytes], list[bytes], list[bytes], int]:
    """Keys, identities and graveler-encoded values (identity and entry bytes: what a
    staging file holds) of pending records given as columns, and the entries' total
    length.  Each run of records with one maker spec (a call's links: the memstore
    keeps insertion order) is made by its maker's :meth:`~EntryMaker.encode_values_many`;
    a short run (one-link requests: a spec each) record by record."""
    keys, makers, addresses, sizes, checksums = columns
    identities: list[bytes] = []
    encoded: list[bytes] = []
    total = 0
    for maker, start, end in _runs(makers):
        if start == 0 and end == len(makers):  # the common case: one maker for the lot
            ids, values, n = maker.encode_values_many(addresses, sizes, checksums)
        elif end - start >= MIN_RUN:
            ids, values, n = maker.encode_values_many(
                addresses[start:end], sizes[start:end], checksums[start:end]
            )
        else:
            made = list(map(maker.encode, addresses[start:end], sizes[start:end],
                            checksums[start:end]))  # fmt: skip
            ids = [m[0] for m in made]
            data = [m[1] for m in made]
            values, n = encode_values(ids, data), sum(map(len, data))
        identities += ids
        encoded += values
        total += n
    return list(keys), identities, encoded, total


def _runs(makers: list[MakerSpec]) -> Iterator[tuple[EntryMaker, int, int]]:
    """``(maker, start, end)`` of each run of records with one maker spec, in order."""
    n = len(makers)
    if makers.count(makers[0]) == n:
        yield maker_of(makers[0]), 0, n
        return
    changes = list(map(is_not, makers[1:], makers[:-1]))  # True where a run starts, less 1
    start = 0
    while start < n:
        try:
            end = changes.index(True, start) + 1
        except ValueError:
            end = n
        yield maker_of(makers[start]), start, end
        start = end


#: Runs shorter than this are made record by record (a block's set-up would cost more).
MIN_RUN = 16
