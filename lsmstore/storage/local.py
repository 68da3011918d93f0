"""An object store on a local filesystem: the embedded default (``file:///abs/path``).

Key ``a/b/c`` is the file ``<root>/a/b/c``.  A put writes a temp file in the target
directory, fsyncs it, publishes it atomically -- ``os.link`` for CREATE (fails if the key
exists, so check and write are one step), ``os.replace`` for OVERWRITE -- and fsyncs the
directory (and any directory it had to create).  Readers therefore see no object or the
whole object; a crash mid-put leaves at most a temp file (``.lsm-tmp.*``), which
``list`` never shows and no key can name.  Deletes are not fsynced (a lost delete is
redone by garbage collection) and leave empty directories behind.

Limits of the mapping: one key cannot be both an object and a "directory" of other keys
(``a`` and ``a/b``): the second put raises :class:`InvalidNameError`.  The filesystem must
support hard links.  ``list`` walks the directories under the prefix in key order,
reading one directory at a time: its cost is proportional to the number of entries under
the prefix (subtrees entirely at or before ``after`` are skipped).

All file I/O runs in worker threads (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from pathlib import Path
from typing import BinaryIO

from lsmstore.errors import (
    InvalidInputError,
    InvalidNameError,
    ObjectExistsError,
    ObjectNotFoundError,
    UnavailableError,
)
from lsmstore.storage.base import STREAM_CHUNK, ObjectMeta, ObjectStore, PutMode, check_key

#: Temp files start with this; a key segment may not (so no key names a temp file).
TMP_MARK = ".lsm-tmp."

_NOT_FOUND = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _discard(tmp: str, f: BinaryIO) -> None:
    """Close and remove a temp file (a leftover one is invisible anyway)."""
    with contextlib.suppress(OSError):
        f.close()
    with contextlib.suppress(OSError):
        os.unlink(tmp)


class LocalStore(ObjectStore):
    #: Objects handed over per worker-thread hop of :meth:`list`.
    PAGE = 1000
    #: Bytes of a streamed put gathered per worker-thread hop.
    WRITE_BYTES = 1 << 20

    def __init__(self, root: Path | str) -> None:
        root = Path(root)
        if not root.is_absolute():
            raise InvalidInputError(f"local store root must be an absolute path, got {root}")
        self.root = root
        self._root = os.path.normpath(root)
        self.url = root.as_uri()

    def _path(self, key: str) -> str:
        check_key(key)
        if any(part.startswith(TMP_MARK) for part in key.split("/")):
            raise InvalidNameError(
                f"invalid object key {key!r}: segments starting with {TMP_MARK!r} are reserved"
            )
        self._check_open()
        return os.path.join(self._root, key)

    def _unavailable(self, key: str, e: OSError, *, outcome_unknown: bool = False) -> Exception:
        return UnavailableError(
            f"local store {self._root}: {key}: {e.strerror or e}", outcome_unknown=outcome_unknown
        )

    # --- reads -----------------------------------------------------------------------

    def _read(self, key: str, path: str, start: int, end: int | None) -> bytes:
        try:
            with open(path, "rb") as f:
                if start:
                    f.seek(start)
                return f.read() if end is None else f.read(max(0, end - start))
        except _NOT_FOUND as e:
            raise ObjectNotFoundError(key) from e
        except OSError as e:
            raise self._unavailable(key, e) from e

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        return await asyncio.to_thread(self._read, key, path, 0, None)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        if start < 0:
            raise InvalidInputError(f"get_range of {key!r}: negative start {start}")
        path = self._path(key)
        return await asyncio.to_thread(self._read, key, path, start, max(start, end))

    def _stat(self, key: str, path: str) -> ObjectMeta:
        try:
            st = os.stat(path)
        except _NOT_FOUND as e:
            raise ObjectNotFoundError(key) from e
        except OSError as e:
            raise self._unavailable(key, e) from e
        if not os.path.isfile(path):
            raise ObjectNotFoundError(key)
        return ObjectMeta(key, st.st_size)

    async def head(self, key: str) -> ObjectMeta:
        path = self._path(key)
        return await asyncio.to_thread(self._stat, key, path)

    # --- writes ----------------------------------------------------------------------

    def _ensure_dir(self, key: str, directory: str) -> None:
        """Create ``directory`` and missing parents, fsyncing each new entry's parent."""
        if os.path.isdir(directory):
            return
        parent = os.path.dirname(directory)
        if directory == self._root:
            try:
                os.makedirs(directory, exist_ok=True)
                _fsync_dir(parent)
            except OSError as e:  # the namespace itself is unusable, not the key
                raise UnavailableError(
                    f"local store root {self._root} cannot be created: {e.strerror or e}"
                ) from e
            return
        self._ensure_dir(key, parent)
        try:
            os.mkdir(directory)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise InvalidNameError(
                    f"object key {key!r} conflicts with the existing object "
                    f"{os.path.relpath(directory, self._root)!r}"
                ) from None
            return
        _fsync_dir(parent)

    def _open_tmp(self, key: str, path: str) -> tuple[str, BinaryIO]:
        """A new temp file beside ``path`` (creating the directories), open for writing."""
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f"{TMP_MARK}{os.path.basename(path)}.{secrets.token_hex(8)}")
        try:
            self._ensure_dir(key, directory)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except (IsADirectoryError, NotADirectoryError) as e:
            raise InvalidNameError(
                f"object key {key!r} conflicts with an existing object or key prefix"
            ) from e
        except OSError as e:
            raise self._unavailable(key, e) from e
        return tmp, open(fd, "wb")  # closed by _publish/_discard

    def _publish(self, key: str, path: str, tmp: str, f: BinaryIO, mode: PutMode) -> None:
        """Fsync and close the temp file, publish it under ``path``, fsync the directory.
        The temp file is gone afterwards, whatever happens."""
        directory = os.path.dirname(path)
        published = False
        try:
            with f:
                f.flush()
                os.fsync(f.fileno())
            if mode is PutMode.CREATE:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    if os.path.isdir(path):
                        raise IsADirectoryError(errno.EISDIR, "is a directory") from None
                    raise ObjectExistsError(key) from None
            else:
                os.replace(tmp, path)
            published = True
            _fsync_dir(directory)
        except (ObjectExistsError, UnavailableError):
            raise
        except (IsADirectoryError, NotADirectoryError) as e:
            raise InvalidNameError(
                f"object key {key!r} conflicts with an existing object or key prefix"
            ) from e
        except OSError as e:
            raise self._unavailable(key, e, outcome_unknown=published) from e
        finally:
            if mode is PutMode.CREATE or not published:
                _discard(tmp, f)

    def _put(self, key: str, path: str, data: bytes, mode: PutMode) -> None:
        tmp, f = self._open_tmp(key, path)
        try:
            f.write(data)
        except OSError as e:
            _discard(tmp, f)
            raise self._unavailable(key, e) from e
        self._publish(key, path, tmp, f, mode)

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        path = self._path(key)
        await asyncio.to_thread(self._put, key, path, data, mode)

    async def put_stream(
        self, key: str, chunks: AsyncIterable[bytes], mode: PutMode = PutMode.CREATE
    ) -> ObjectMeta:
        """Write chunks to a temp file as they come (one worker-thread hop per
        ``WRITE_BYTES`` gathered), then publish it as :meth:`put` does."""
        path = self._path(key)
        tmp, f = await asyncio.to_thread(self._open_tmp, key, path)
        size = 0
        try:
            pending: list[bytes] = []
            gathered = 0
            async for chunk in chunks:
                if not chunk:
                    continue
                pending.append(bytes(chunk))
                gathered += len(chunk)
                if gathered >= self.WRITE_BYTES:
                    await asyncio.to_thread(f.writelines, pending)
                    size += gathered
                    pending, gathered = [], 0
            if pending:
                await asyncio.to_thread(f.writelines, pending)
                size += gathered
        except OSError as e:
            await asyncio.shield(asyncio.to_thread(_discard, tmp, f))
            raise self._unavailable(key, e) from e
        except BaseException:
            await asyncio.shield(asyncio.to_thread(_discard, tmp, f))
            raise
        await asyncio.shield(asyncio.to_thread(self._publish, key, path, tmp, f, mode))
        return ObjectMeta(key, size)

    async def get_stream(
        self, key: str, start: int = 0, end: int | None = None, *, chunk_size: int = STREAM_CHUNK
    ) -> AsyncIterator[bytes]:
        if start < 0 or chunk_size < 1:
            raise InvalidInputError(
                f"get_stream of {key!r}: start {start} must be >= 0 and chunk_size >= 1"
            )
        path = self._path(key)

        def open_at() -> BinaryIO:
            try:
                f = open(path, "rb")  # closed below
            except _NOT_FOUND as e:
                raise ObjectNotFoundError(key) from e
            except OSError as e:
                raise self._unavailable(key, e) from e
            if start:
                f.seek(start)
            return f

        f = await asyncio.to_thread(open_at)
        try:
            pos = start
            while end is None or pos < end:
                n = chunk_size if end is None else min(chunk_size, end - pos)
                try:
                    chunk = await asyncio.to_thread(f.read, n)
                except OSError as e:
                    raise self._unavailable(key, e) from e
                if not chunk:
                    return
                pos += len(chunk)
                yield chunk
        finally:
            f.close()

    def _delete(self, key: str, path: str, missing_ok: bool) -> None:
        try:
            if not os.path.isdir(path):
                os.unlink(path)
                return
        except _NOT_FOUND:
            pass
        except OSError as e:
            raise self._unavailable(key, e) from e
        if not missing_ok:
            raise ObjectNotFoundError(key)

    async def delete(self, key: str, *, missing_ok: bool = True) -> None:
        path = self._path(key)
        await asyncio.to_thread(self._delete, key, path, missing_ok)

    # --- listing ---------------------------------------------------------------------

    def _walk(
        self, directory: str, key_prefix: str, name_prefix: str, after: str | None
    ) -> Iterator[ObjectMeta]:
        """Objects under ``directory`` in key order.

        A directory ``d`` sorts as ``d/``: every key below it starts with that string,
        so sorting entries that way and recursing yields keys in lexicographic order.
        """
        try:
            with os.scandir(directory) as it:
                entries = [
                    (e.name + "/" if e.is_dir(follow_symlinks=False) else e.name, e)
                    for e in it
                    if e.name.startswith(name_prefix) and not e.name.startswith(TMP_MARK)
                ]
        except _NOT_FOUND:
            return
        except OSError as e:
            raise self._unavailable(key_prefix or "/", e) from e
        entries.sort(key=lambda item: item[0])
        for name, entry in entries:
            key = key_prefix + name
            if name.endswith("/"):
                if after is not None and after > key and not after.startswith(key):
                    continue  # every key below sorts at or before `after`
                yield from self._walk(entry.path, key, "", after)
            elif after is None or key > after:
                try:
                    size = entry.stat().st_size
                except FileNotFoundError:
                    continue  # deleted while we listed
                yield ObjectMeta(key, size)

    async def list(
        self, prefix: str = "", *, after: str | None = None
    ) -> AsyncIterator[ObjectMeta]:
        self._check_open()
        dir_part, _, name_prefix = prefix.rpartition("/")
        if dir_part:
            try:
                self._path(dir_part)
            except InvalidNameError:
                return  # no valid key starts with this prefix
        walker = self._walk(
            os.path.join(self._root, dir_part) if dir_part else self._root,
            dir_part + "/" if dir_part else "",
            name_prefix,
            after,
        )
        while True:
            page = await asyncio.to_thread(lambda: [*itertools.islice(walker, self.PAGE)])
            for meta in page:
                yield meta
            if len(page) < self.PAGE:
                return
            self._check_open()
