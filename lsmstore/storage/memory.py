"""An in-process object store: unit tests and ``mem://name`` URLs.

Named stores are shared within the process: every ``MemoryStore("x")`` (and every
``open_object_store("mem://x")``) sees the same objects until :meth:`MemoryStore.forget`
drops the name.  ``MemoryStore()`` with no name is private to that instance.
Objects are copied in and out (``bytes(data)``), so callers cannot mutate stored data.
Nothing survives the process.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import AsyncIterator
from typing import ClassVar

from sortedcontainers import SortedDict

from lsmstore.errors import InvalidInputError, ObjectExistsError, ObjectNotFoundError
from lsmstore.storage.base import ObjectMeta, ObjectStore, PutMode, check_key


class _Bucket:
    """The objects behind one name; a lock makes it safe across threads and loops."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: SortedDict = SortedDict()  # key -> bytes


class MemoryStore(ObjectStore):
    _registry: ClassVar[dict[str, _Bucket]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()
    _anonymous: ClassVar[itertools.count[int]] = itertools.count()

    #: Keys returned per internal page of :meth:`list` (the lock is released between pages).
    PAGE = 1000

    def __init__(self, name: str | None = None) -> None:
        if name is None:
            self.name = f"anonymous-{next(self._anonymous)}"
            self._bucket = _Bucket()
        else:
            if not name or "/" in name or any(ord(c) < 0x20 for c in name):
                raise InvalidInputError(f"invalid memory store name {name!r}")
            self.name = name
            with self._registry_lock:
                self._bucket = self._registry.setdefault(name, _Bucket())
        self.url = f"mem://{self.name}"

    @classmethod
    def forget(cls, name: str) -> None:
        """Drop the shared objects of ``name``; open instances keep their (now private) data."""
        with cls._registry_lock:
            cls._registry.pop(name, None)

    def _lookup(self, key: str) -> bytes:
        check_key(key)
        self._check_open()
        with self._bucket.lock:
            data: bytes | None = self._bucket.objects.get(key)
        if data is None:
            raise ObjectNotFoundError(key)
        return data

    async def get(self, key: str) -> bytes:
        return self._lookup(key)  # bytes are immutable: sharing them is a copy-out

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        if start < 0:
            raise InvalidInputError(f"get_range of {key!r}: negative start {start}")
        data = self._lookup(key)
        return data[start:end] if end > start else b""

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        check_key(key)
        self._check_open()
        copy = bytes(data)
        with self._bucket.lock:
            if mode is PutMode.CREATE and key in self._bucket.objects:
                raise ObjectExistsError(key)
            self._bucket.objects[key] = copy

    async def head(self, key: str) -> ObjectMeta:
        return ObjectMeta(key, len(self._lookup(key)))

    async def delete(self, key: str, *, missing_ok: bool = True) -> None:
        check_key(key)
        self._check_open()
        with self._bucket.lock:
            found = self._bucket.objects.pop(key, None)
        if found is None and not missing_ok:
            raise ObjectNotFoundError(key)

    async def list(
        self, prefix: str = "", *, after: str | None = None
    ) -> AsyncIterator[ObjectMeta]:
        self._check_open()
        start = prefix if after is None or after < prefix else after
        inclusive = after is None or after < prefix
        while True:
            with self._bucket.lock:
                objects = self._bucket.objects
                page = [
                    ObjectMeta(k, len(objects[k]))
                    for k in itertools.islice(
                        objects.irange(minimum=start, inclusive=(inclusive, True)), self.PAGE
                    )
                ]
            for meta in page:
                if not meta.key.startswith(prefix):
                    return
                yield meta
            if len(page) < self.PAGE:
                return
            start, inclusive = page[-1].key, False
            self._check_open()
