"""The object-store interface every backend implements.

Contract (checked by :mod:`lsmstore.testing.store_contract` for every backend):

* Keys are ``/``-separated strings relative to the store's root (the storage
  namespace); they never start with ``/`` and contain no ``..`` segment.
* ``put`` is atomic: a reader sees either no object or the whole new object, never
  a prefix.  Modes: ``CREATE`` fails with :class:`ObjectExistsError` when the key is
  present (the check and the write are one atomic step); ``OVERWRITE`` replaces.
  A backend whose client re-sends requests (S3) cannot tell its own landed first
  attempt from another writer's object, so it may report success for a CREATE whose
  bytes equal the existing object's.  Everything under ``_lsm/`` is either
  content-addressed or uniquely named, so this never matters there; a caller using
  CREATE for mutual exclusion must make each writer's bytes distinct.
* ``get``/``get_range``/``head``/``delete`` of a missing key raise
  :class:`ObjectNotFoundError` (``delete`` is idempotent only with ``missing_ok``).
* ``list`` yields objects in lexicographic key order, starting strictly after
  ``after``; backends page internally.
* Any failure to reach the backend (connection refused, timeout, 5xx after the
  configured retries) raises :class:`UnavailableError`.
* Safe for concurrent use by many tasks of one event loop; blocking I/O never runs
  on the event loop.
* ``aclose()`` releases connections; later calls raise :class:`ClosedError`.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from lsmstore.errors import ClosedError, InvalidNameError


class PutMode(enum.Enum):
    CREATE = "create"  # fail with ObjectExistsError if the key exists
    OVERWRITE = "overwrite"


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    key: str
    size: int
    etag: str | None = None


def check_key(key: str) -> str:
    """Validate an object key; returns it unchanged or raises InvalidNameError."""
    if not key or key.startswith("/") or key.endswith("/"):
        raise InvalidNameError(f"invalid object key {key!r}: empty or leading/trailing '/'")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise InvalidNameError(f"invalid object key {key!r}: empty, '.' or '..' segment")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise InvalidNameError(f"invalid object key {key!r}: control character")
    return key


class ObjectStore(abc.ABC):
    """Async object store rooted at one storage namespace."""

    url: str  # the storage namespace URL this store was opened from
    _closed: bool = False

    @abc.abstractmethod
    async def get(self, key: str) -> bytes:
        """The whole object. Raises ObjectNotFoundError, UnavailableError."""

    @abc.abstractmethod
    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (shorter if the object is shorter)."""

    @abc.abstractmethod
    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        """Store ``data`` atomically. CREATE raises ObjectExistsError if present."""

    @abc.abstractmethod
    async def head(self, key: str) -> ObjectMeta:
        """Size (and etag where the backend has one). Raises ObjectNotFoundError."""

    @abc.abstractmethod
    async def delete(self, key: str, *, missing_ok: bool = True) -> None:
        """Remove the object. A missing key is fine unless ``missing_ok`` is False."""

    @abc.abstractmethod
    def list(self, prefix: str = "", *, after: str | None = None) -> AsyncIterator[ObjectMeta]:
        """Objects whose key starts with ``prefix``, in key order, strictly after ``after``."""

    async def aclose(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"object store {self.url} is closed")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
