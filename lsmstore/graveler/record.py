"""ValueRecord: the unit every layer stores.

``Record(key, identity, value)``; ``value is None`` marks a tombstone (the key is
deleted).  Two records are equal iff key and identity are equal -- identity is the
caller's fingerprint of the value (SHA-256 of the value by default).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple


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


def tombstone(key: bytes) -> Record:
    return Record(key, b"", None)


def default_identity(value: bytes) -> bytes:
    """The identity of a value when the caller does not supply one (raw SHA-256)."""
    return hashlib.sha256(value).digest()
