"""Reading an object's data: :class:`ObjectReader` (``ref.open(path)``).

The reader is bound to the entry found when it was opened: later writes to the path do
not change what it reads (data objects are immutable).  ``read(offset, length)`` is
one ranged GET; iterating streams the data (one GET on S3) in chunks of at most
``chunk_size``.  A data object shorter than its entry says -- damaged, or changed
behind the service's back at an external address -- raises :class:`CorruptFileError`;
one that is gone (garbage-collected) raises :class:`ObjectNotFoundError`.
Safe for concurrent reads by many tasks; ``aclose()`` makes later calls raise
:class:`ClosedError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from lsmstore.closing import AsyncCloseable
from lsmstore.errors import ClosedError, CorruptFileError, InvalidInputError
from lsmstore.storage.base import STREAM_CHUNK, ObjectStore
from lsmstore.types import ObjectStats


class ObjectReader(AsyncCloseable):
    def __init__(self, store: ObjectStore, key: str, stats: ObjectStats) -> None:
        self.stats = stats
        self.path = stats.path
        self.size = stats.size
        self._store = store
        self._key = key
        self._closed = False

    def __repr__(self) -> str:
        return f"ObjectReader({self.path!r}, size={self.size})"

    def _span(self, offset: int, length: int | None) -> tuple[int, int]:
        if self._closed:
            raise ClosedError(f"reader of {self.path!r} is closed")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"read offset must be an int >= 0, not {offset!r}")
        if length is not None and (
            isinstance(length, bool) or not isinstance(length, int) or length < 0
        ):
            raise InvalidInputError(f"read length must be None or an int >= 0, not {length!r}")
        end = self.size if length is None else min(self.size, offset + length)
        return offset, max(offset, end)

    def _short(self, got: int, want: int) -> CorruptFileError:
        return CorruptFileError(
            self.path,
            f"data object {self._store.url}/{self._key} ended {want - got} bytes before "
            f"the {self.size} bytes its entry records",
        )

    async def read(self, offset: int = 0, length: int | None = None) -> bytes:
        """Bytes ``[offset, offset + length)`` (to the end without ``length``), fewer
        past the end of the object, empty at or past it."""
        start, end = self._span(offset, length)
        if start == end:
            return b""
        data = await self._store.get_range(self._key, start, end)
        if len(data) != end - start:
            raise self._short(start + len(data), end)
        return data

    async def iter_chunks(
        self, offset: int = 0, length: int | None = None, *, chunk_size: int = STREAM_CHUNK
    ) -> AsyncIterator[bytes]:
        """Stream bytes ``[offset, offset + length)`` in chunks of at most ``chunk_size``."""
        start, end = self._span(offset, length)
        if start == end:
            return
        pos = start
        async for chunk in self._store.get_stream(self._key, start, end, chunk_size=chunk_size):
            pos += len(chunk)
            yield chunk
        if pos != end:
            raise self._short(pos, end)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.iter_chunks()

    async def aclose(self) -> None:
        self._closed = True


class InlineReader(ObjectReader):
    """A reader of an inline object (a raw value read as an object): its bytes are the
    record's value, already in memory."""

    def __init__(self, value: bytes, stats: ObjectStats) -> None:
        super().__init__(None, "", stats)  # type: ignore[arg-type]  # no store behind it
        self._value = value

    def __repr__(self) -> str:
        return f"InlineReader({self.path!r}, size={self.size})"

    async def read(self, offset: int = 0, length: int | None = None) -> bytes:
        start, end = self._span(offset, length)
        return self._value[start:end]

    async def iter_chunks(
        self, offset: int = 0, length: int | None = None, *, chunk_size: int = STREAM_CHUNK
    ) -> AsyncIterator[bytes]:
        start, end = self._span(offset, length)
        for pos in range(start, end, chunk_size):
            yield self._value[pos : min(end, pos + chunk_size)]
