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
    """Keys, identities and values of pending records given as columns."""
    keys, makers, addresses, sizes, checksums = columns
    first = makers[0]
    if makers.count(first) == len(makers):  # the common case: one maker for the lot
        identities, values = first.encode_many(addresses, sizes, checksums)
        return list(keys), identities, values
    made = [
        m.encode(a, n, c) for m, a, n, c in zip(makers, addresses, sizes, checksums, strict=True)
    ]
    ids, vals = zip(*made, strict=True)
    return list(keys), list(ids), list(vals)
