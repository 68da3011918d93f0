"""The contents of an upload, as a stream of chunks with their size and MD5.

``Branch.upload`` takes ``bytes`` (or ``bytearray``/``memoryview``), a file path
(``str``/``os.PathLike``), a binary file object (anything with ``read(n)`` returning
bytes) or an async iterable of byte chunks.  Files are read in worker threads,
:data:`CHUNK` bytes at a time, and hashed in the same thread; a large chunk of any
source is hashed in a worker thread too (``hashlib`` releases the GIL), so neither
blocks the event loop.  Only one chunk is held at a time here.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, BinaryIO

from lsmstore import validate
from lsmstore.errors import InvalidInputError

#: Bytes read from a file per worker-thread hop.
CHUNK = 1 << 20
#: Chunks at least this large are hashed in a worker thread.
HASH_IN_THREAD = 256 * 1024

UploadData = (
    bytes | bytearray | memoryview | str | os.PathLike[str] | BinaryIO | AsyncIterable[bytes]
)


def _open_binary(path: str) -> BinaryIO:
    return open(path, "rb")


class Source:
    """Wraps upload data; iterate it once with ``async for``; then ``size``/``md5hex``."""

    def __init__(self, data: object) -> None:
        self.size = 0
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._data = data
        if isinstance(data, bytes | bytearray | memoryview):
            self._kind = "bytes"
        elif isinstance(data, str | os.PathLike):
            self._data = validate.check_path(data, "upload file")
            self._kind = "path"
        elif isinstance(data, AsyncIterable):
            self._kind = "aiter"
        elif callable(getattr(data, "read", None)):
            self._kind = "file"
        else:
            raise InvalidInputError(
                "upload data must be bytes, a file path, a binary file object or an async "
                f"iterable of bytes, not {type(data).__name__}"
            )

    def small(self) -> bytes | None:
        """The whole contents when they are bytes of at most :data:`HASH_IN_THREAD`
        (hashed here; one ``put`` stores them), else None (stream them)."""
        data = self._data
        if not isinstance(data, bytes | bytearray | memoryview) or len(data) > HASH_IN_THREAD:
            return None
        payload = bytes(data)
        self._md5.update(payload)
        self.size = len(payload)
        return payload

    @property
    def md5hex(self) -> str:
        return self._md5.hexdigest()

    async def _hash(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if len(chunk) >= HASH_IN_THREAD:
            await asyncio.to_thread(self._md5.update, chunk)
        else:
            self._md5.update(chunk)

    def _read_hashed(self, f: Any) -> bytes:
        chunk = f.read(CHUNK)
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise InvalidInputError(
                f"upload file object must be binary: read() returned {type(chunk).__name__}"
            )
        chunk = bytes(chunk)
        self._md5.update(chunk)
        self.size += len(chunk)
        return chunk

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        data = self._data
        if self._kind == "bytes":
            view = memoryview(data)  # type: ignore[arg-type]
            for i in range(0, max(len(view), 1), CHUNK):
                chunk = bytes(view[i : i + CHUNK])
                await self._hash(chunk)
                if chunk:
                    yield chunk
        elif self._kind == "path":
            path = os.fspath(data)  # type: ignore[call-overload]
            try:
                f = await asyncio.to_thread(_open_binary, path)
            except OSError as e:
                raise InvalidInputError(f"cannot read upload file {path}: {e}") from e
            try:
                while True:
                    try:
                        chunk = await asyncio.to_thread(self._read_hashed, f)
                    except OSError as e:
                        raise InvalidInputError(f"cannot read upload file {path}: {e}") from e
                    if not chunk:
                        break
                    yield chunk
            finally:
                f.close()
        elif self._kind == "file":
            while chunk := await asyncio.to_thread(self._read_hashed, data):
                yield chunk
        else:
            async for chunk in data:  # type: ignore[attr-defined]
                if not isinstance(chunk, bytes | bytearray | memoryview):
                    raise InvalidInputError(
                        f"upload chunks must be bytes, not {type(chunk).__name__}"
                    )
                chunk = bytes(chunk)
                await self._hash(chunk)
                if chunk:
                    yield chunk
