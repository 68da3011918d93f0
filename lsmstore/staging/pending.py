"""Pending records: staged writes whose identity and value the encoder computes.

A :class:`Pending` record holds what its value is made of -- an object entry's address,
size and checksum -- and the :class:`EntryMaker` that turns them into ``(identity,
value)``: a small picklable object shared by the records of one call (the fields a
batch shares: modification time, address type, content type).  The writer stages it
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

from collections.abc import Sequence
from operator import is_not
from typing import NamedTuple, Protocol

from lsmstore.graveler.record import Record, RecordTuple


class EntryMaker(Protocol):
    """Makes ``(identity, value)`` of an entry from its per-record fields."""

    def encode(self, address: str, size: int, checksum: str) -> tuple[bytes, bytes]: ...

    def encode_many(
        self, addresses: Sequence[str], sizes: Sequence[int], checksums: Sequence[str]
    ) -> tuple[list[bytes], list[bytes]]:
        """Identities and values of many entries (:meth:`encode` of each)."""
        ...


class Pending(NamedTuple):
    key: bytes
    maker: EntryMaker
    address: str
    size: int
    checksum: str


#: What the writer stages: made records, and pending ones.
Staged = Record | Pending

#: Bytes charged to a pending record on top of key, address and checksum: the fields
#: its value shares with its batch and the protobuf framing.
PENDING_EXTRA = 64

#: Pending records as columns: keys, makers (one object shared by many records: pickled
#: once), addresses, sizes, checksums.
PendingColumns = tuple[
    tuple[bytes, ...], tuple[EntryMaker, ...], tuple[str, ...], tuple[int, ...], tuple[str, ...]
]


def split(
    records: list[Staged | RecordTuple],
) -> tuple[list[RecordTuple], PendingColumns | None]:
    """The made records of ``records`` and its pending ones as columns (None if none)."""
    kinds = set(map(type, records))
    if Pending not in kinds:
        return records, None  # type: ignore[return-value]  # no Pending among them
    if len(kinds) == 1:  # pending records only (a link_many batch): no filtering
        keys, makers, addresses, sizes, checksums = zip(*records, strict=True)
        return [], (keys, makers, addresses, sizes, checksums)
    pending = [r for r in records if type(r) is Pending]
    made: list[RecordTuple] = [r for r in records if type(r) is not Pending]  # type: ignore[misc]
    keys, makers, addresses, sizes, checksums = zip(*pending, strict=True)
    return made, (keys, makers, addresses, sizes, checksums)


def make(columns: PendingColumns) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """Keys, identities and values of pending records given as columns.  Each run of
    records with one maker (a call's links: the memstore keeps insertion order) is
    made by its :meth:`~EntryMaker.encode_many`, a short run record by record."""
    keys, makers, addresses, sizes, checksums = columns
    n = len(makers)
    if makers.count(makers[0]) == n:  # the common case: one maker for the lot
        identities, values = makers[0].encode_many(addresses, sizes, checksums)
        return list(keys), identities, values
    identities, values = [], []
    changes = list(map(is_not, makers[1:], makers[:-1]))  # True where a run starts, less 1
    start = 0
    while start < n:
        try:
            end = changes.index(True, start) + 1
        except ValueError:
            end = n
        maker = makers[start]
        if end - start >= MIN_RUN:
            ids, vals = maker.encode_many(
                addresses[start:end], sizes[start:end], checksums[start:end]
            )
        else:
            made = list(map(maker.encode, addresses[start:end], sizes[start:end],
                            checksums[start:end]))  # fmt: skip
            ids, vals = [m[0] for m in made], [m[1] for m in made]
        identities += ids
        values += vals
        start = end
    return list(keys), identities, values


#: Runs shorter than this are made record by record (encode_many's set-up would cost
#: more).
MIN_RUN = 16
