"""Content addressing of records and committed files (docs/design.md, "Vocabulary").

``recordID = h(h(key) || h(identity))`` and ``fileID = h(recordID_1 || ... || recordID_n)``
over the file's records in key order, with ``h`` = SHA-256.  IDs come from the records,
never from SST bytes, so equal content gets equal IDs whatever the compression, block
layout or library version.  See docs/format.md for a worked example.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from lsmstore.errors import InvalidInputError
from lsmstore.graveler.record import Record

_sha256 = hashlib.sha256


def record_id(key: bytes, identity: bytes) -> bytes:
    """``h(h(key) || h(identity))``: 32 raw bytes."""
    return _sha256(_sha256(key).digest() + _sha256(identity).digest()).digest()


class FileIdHasher:
    """Incremental fileID: feed records in key order, read the digest at any point.

    ``hexdigest()`` does not end the computation; more records may be added after it.
    """

    __slots__ = ("_hash",)

    def __init__(self) -> None:
        self._hash = _sha256()

    def add(self, key: bytes, identity: bytes) -> None:
        self._hash.update(record_id(key, identity))

    def hexdigest(self) -> str:
        """64 lowercase hex characters."""
        return self._hash.hexdigest()


def file_id(records: Iterable[Record]) -> str:
    """The fileID of a committed file's records (in the order given: key order).

    Committed files hold no tombstones: one raises :class:`InvalidInputError`.
    The ID of no records is SHA-256 of the empty string.
    """
    hasher = FileIdHasher()
    for rec in records:
        if rec.value is None:
            raise InvalidInputError(f"tombstone for key {rec.key!r} in a committed file")
        hasher.add(rec.key, rec.identity)
    return hasher.hexdigest()
