"""How tree code reads committed ranges and metaranges.

A :class:`RangeSource` turns a range or metarange ID into a parsed file.  Both live at
``layout.range_key(id)`` and are immutable, so a source may cache them forever.
:class:`DirectSource` fetches and parses on every call (tools, tests, one-shot jobs);
:class:`CachedSource` goes through the shared file cache (the read path, committers).

Errors: a missing object raises :class:`ObjectNotFoundError` naming the ID; a malformed
one :class:`CorruptFileError`; an unreachable store :class:`UnavailableError`.  The
empty tree (:data:`EMPTY_METARANGE_ID`) is never fetched.  Sources are safe for
concurrent use by the tasks of one event loop.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from lsmstore import layout
from lsmstore.errors import ObjectNotFoundError
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID, Metarange
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.storage.base import ObjectStore
from lsmstore.types import check_tree_id

T = TypeVar("T")

_EMPTY = Metarange.empty()


class RangeSource(Protocol):
    async def reader(self, range_id: str) -> SSTReader:
        """The parsed range (or metarange) SST named ``range_id``."""
        ...

    async def metarange(self, metarange_id: str) -> Metarange:
        """The parsed metarange named ``metarange_id`` (empty for EMPTY_METARANGE_ID)."""
        ...


class FileCacheLike(Protocol):
    """What :class:`CachedSource` needs of ``lsmstore.cache.FileCache``."""

    async def get(
        self, store: ObjectStore, key: str, parse: Callable[[bytes, str], T], *, kind: str = ...
    ) -> T: ...


def _missing(store: ObjectStore, range_id: str, e: ObjectNotFoundError) -> ObjectNotFoundError:
    return ObjectNotFoundError(
        e.key, f"range or metarange {range_id} is missing: {e.key} not found in {store.url}"
    )


def _parse_metarange(metarange_id: str, data: bytes, name: str) -> Metarange:
    return Metarange.from_reader(metarange_id, SSTReader(data, name))


class DirectSource:
    """Fetches and parses each file on every call; nothing is kept."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    async def _fetch(self, range_id: str) -> tuple[bytes, str]:
        key = layout.range_key(check_tree_id(range_id, "range"))
        try:
            return await self.store.get(key), key
        except ObjectNotFoundError as e:
            raise _missing(self.store, range_id, e) from e

    async def reader(self, range_id: str) -> SSTReader:
        data, key = await self._fetch(range_id)
        return SSTReader(data, key)

    async def metarange(self, metarange_id: str) -> Metarange:
        if metarange_id == EMPTY_METARANGE_ID:
            return _EMPTY
        data, key = await self._fetch(metarange_id)
        return await asyncio.to_thread(_parse_metarange, metarange_id, data, key)


class CachedSource:
    """Reads through a shared file cache (``kind="sst"``); parsed metaranges are also kept
    in a small LRU of their own (``metaranges`` entries), so a warm lookup costs a dict
    hit and a bisect."""

    def __init__(self, store: ObjectStore, cache: FileCacheLike, *, metaranges: int = 64) -> None:
        self.store = store
        self.cache = cache
        self._metaranges: OrderedDict[str, Metarange] = OrderedDict()
        self._capacity = max(1, metaranges)

    async def _get(self, range_id: str, parse: Callable[[bytes, str], Any]) -> Any:
        key = layout.range_key(check_tree_id(range_id, "range"))
        try:
            return await self.cache.get(self.store, key, parse, kind="sst")
        except ObjectNotFoundError as e:
            raise _missing(self.store, range_id, e) from e

    async def reader(self, range_id: str) -> SSTReader:
        reader: SSTReader = await self._get(range_id, SSTReader)
        return reader

    async def metarange(self, metarange_id: str) -> Metarange:
        if metarange_id == EMPTY_METARANGE_ID:
            return _EMPTY
        found = self._metaranges.get(metarange_id)
        if found is not None:
            self._metaranges.move_to_end(metarange_id)
            return found
        reader = await self.reader(metarange_id)
        parsed = await asyncio.to_thread(Metarange.from_reader, metarange_id, reader)
        self._metaranges[metarange_id] = parsed
        while len(self._metaranges) > self._capacity:
            self._metaranges.popitem(last=False)
        return parsed
