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
* ``put_stream`` stores the concatenation of an async iterator of chunks with the
  same atomicity and modes as ``put``, never holding the whole object in memory (a
  backend buffers a bounded number of parts: ``S3Store`` sends objects past its part
  size as a multipart upload, a few parts at once).  If the iterator raises, or the
  caller is cancelled, nothing is published and nothing partial is left behind that a
  key can name (S3 aborts the multipart upload; a local store removes its temp file).
* ``put_fresh`` creates an object under a fresh key nothing names yet, returning once
  it is written and readable, with a future that ends once it is durable: the caller
  may do other work (stage an entry naming it) before it waits, and must wait before
  anything durable names the key.  Until then a crash may leave the key missing,
  empty or partial (never another object's bytes).  Backends whose puts are durable
  when they return give an already-done future.
* ``get_stream`` yields bytes ``[start, end)`` in chunks of at most ``chunk_size``;
  a missing key raises :class:`ObjectNotFoundError` from the first iteration.
* Any failure to reach the backend (connection refused, timeout, 5xx after the
  configured retries) raises :class:`UnavailableError`.
* Safe for concurrent use by many tasks of one event loop; blocking I/O never runs
  on the event loop.
* ``aclose()`` releases connections; later calls raise :class:`ClosedError`.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import re
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Literal

from lsmstore.closing import AsyncCloseable
from lsmstore.errors import ClosedError, InvalidInputError, InvalidNameError, NotAvailableError

#: Largest chunk :meth:`ObjectStore.get_stream` yields by default.
STREAM_CHUNK = 1 << 20


class PutMode(enum.Enum):
    CREATE = "create"  # fail with ObjectExistsError if the key exists
    OVERWRITE = "overwrite"


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    key: str
    size: int
    etag: str | None = None


#: A control character (C0 or DEL) anywhere in a key.
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def check_key(key: str) -> str:
    """Validate an object key; returns it unchanged or raises InvalidNameError.
    (On every object-store call: one regex search, not a generator step per character.)"""
    if not key or key.startswith("/") or key.endswith("/"):
        raise InvalidNameError(f"invalid object key {key!r}: empty or leading/trailing '/'")
    if (
        "//" in key
        or "/./" in key
        or "/../" in key
        or key.startswith(("./", "../"))
        or (key.endswith(("/.", "/..")) or key in (".", ".."))
    ):
        raise InvalidNameError(f"invalid object key {key!r}: empty, '.' or '..' segment")
    if _CONTROL.search(key) is not None:
        raise InvalidNameError(f"invalid object key {key!r}: control character")
    return key


class ObjectStore(AsyncCloseable, abc.ABC):
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

    async def put_stream(
        self, key: str, chunks: AsyncIterable[bytes], mode: PutMode = PutMode.CREATE
    ) -> ObjectMeta:
        """Store the concatenation of ``chunks`` atomically, as :meth:`put` does, without
        holding the whole object in memory (see the module docstring).  Returns the
        stored object's size (and etag where the backend has one).

        This default gathers the chunks and calls :meth:`put`: right for an in-memory
        backend, and for wrappers that forward ``put``; real backends stream.
        """
        check_key(key)
        parts = [bytes(c) async for c in chunks]
        data = b"".join(parts)
        del parts
        await self.put(key, data, mode)
        return ObjectMeta(key, len(data))

    async def compose(self, key: str, sources: Sequence[str]) -> ObjectMeta:
        """Create ``key`` (as a CREATE :meth:`put_stream`: ObjectExistsError if present,
        atomic) as the concatenation of the objects ``sources``, in order; they are left
        as they are.  ObjectNotFoundError when a source is missing (nothing created).
        Returns the new object's size (and etag where the backend has one).

        This default streams the sources through :meth:`put_stream`: every byte read and
        written once by this process.  A backend that can join objects without passing
        their bytes through the caller does so (local: a kernel-side copy; S3: a
        server-side multipart copy).
        """
        check_key(key)
        for source in sources:
            check_key(source)

        async def joined() -> AsyncIterator[bytes]:
            for source in sources:
                async for chunk in self.get_stream(source):
                    yield chunk

        return await self.put_stream(key, joined(), PutMode.CREATE)

    async def put_fresh(self, key: str, data: bytes) -> asyncio.Future[None]:
        """Create ``data`` under ``key``, a key nothing names yet and nothing reads before
        the returned future is done; return once the object is written and readable.
        The future ends once it is durable (or raises why it is not: then the object
        may or may not survive a crash).  Raises ObjectExistsError when the key is
        present, like a CREATE :meth:`put` (see the module docstring).

        This default is a CREATE :meth:`put` and a future already done: right for a
        backend whose puts are durable when they return, and for wrappers that forward
        ``put``.  A backend whose durability is a separate, slow step (an fsync) does it
        in the future, so that it overlaps the caller's next steps.
        """
        await self.put(key, data, PutMode.CREATE)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def get_stream(
        self, key: str, start: int = 0, end: int | None = None, *, chunk_size: int = STREAM_CHUNK
    ) -> AsyncIterator[bytes]:
        """Bytes ``[start, end)`` (``end`` None: to the end) in chunks of at most
        ``chunk_size`` bytes.  ObjectNotFoundError when the key is missing.

        This default reads ``chunk_size`` bytes per :meth:`get_range` call (any object
        under ``data/`` and ``_lsm/`` is immutable, so the chunks fit together).
        """
        check_key(key)
        if start < 0 or chunk_size < 1:
            raise InvalidInputError(
                f"get_stream of {key!r}: start {start} must be >= 0 and chunk_size >= 1"
            )
        pos = start
        first = True
        while end is None or pos < end:
            stop = pos + chunk_size if end is None else min(end, pos + chunk_size)
            want = stop - pos
            chunk = await self.get_range(key, pos, stop)
            if not chunk:
                if first:
                    await self.head(key)  # a missing key raises ObjectNotFoundError
                return
            first = False
            yield chunk
            pos += len(chunk)
            if len(chunk) < want:
                return  # short read: the end of the object

    async def presigned_url(self, key: str, method: Literal["GET", "PUT"], expires_s: int) -> str:
        """A URL with which anyone holding it may ``GET`` (read) or ``PUT`` (write) the
        object ``key`` directly at the backend for ``expires_s`` seconds, without other
        credentials: the backend checks the signature it carries.  Nothing is read or
        written to make it.  NotAvailableError from a backend that has no such URLs
        (local files, memory); InvalidInputError for a bad key or expiry."""
        check_key(key)
        raise NotAvailableError(f"object store {self.url} cannot pre-sign URLs")

    async def aclose(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"object store {self.url} is closed")


class ForwardingStore(ObjectStore):
    """Passes every call to ``inner``: the base of a wrapper that changes only some
    calls (it overrides those)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return await self.inner.get_range(key, start, end)

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        await self.inner.put(key, data, mode)

    async def head(self, key: str) -> ObjectMeta:
        return await self.inner.head(key)

    async def delete(self, key: str, *, missing_ok: bool = True) -> None:
        await self.inner.delete(key, missing_ok=missing_ok)

    def list(self, prefix: str = "", *, after: str | None = None) -> AsyncIterator[ObjectMeta]:
        return self.inner.list(prefix, after=after)

    async def presigned_url(self, key: str, method: Literal["GET", "PUT"], expires_s: int) -> str:
        return await self.inner.presigned_url(key, method, expires_s)

    async def aclose(self) -> None:
        await self.inner.aclose()
