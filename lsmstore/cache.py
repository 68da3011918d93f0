"""RAM and local-disk tiers of immutable files (SSTs, sidecars, commit objects).

Files under ``_lsm/`` never change once written, so a cached copy is never stale; it
is evicted only for space.

* **RAM tier**: the *parsed* value (``parse(data, key)``) per ``(store.url, key, kind)``,
  LRU, bounded by the sum of the objects' byte sizes (``ram_bytes``).  An object larger
  than the whole tier is returned but not kept.  Eviction only drops the cache's
  reference: a reader holding the parsed object keeps using it.
* **Disk tier** (optional, ``disk_dir``): the raw bytes per ``(store.url, key)`` in
  ``<disk_dir>/<h[:2]>/<h>`` with ``h = sha256(url NUL key)``, behind a 24-byte header
  (magic, xxh3-64 of the payload, length), so a torn or corrupted file is detected and
  refetched.  Files are written off the event loop after a store fetch (temp file +
  rename; not fsynced -- the checksum catches what a power loss leaves), LRU-evicted to
  stay within ``disk_bytes``.  An existing ``disk_dir`` is re-indexed on first use (by
  modification time, oldest evicted first; leftover temp files are removed), so a
  restarted process starts warm.  One process per ``disk_dir``.  Disk writes waiting in
  the background are bounded (``MAX_PENDING_WRITE_BYTES``); beyond that a fetched
  object is simply not written to disk.

Concurrent ``get``\\ s of one ``(store, key, kind)`` share one load (single flight): the
store sees one ``get``; a cancelled caller does not cancel the load for the others.
A RAM hit is a dict lookup and an LRU touch with no await that yields; ``peek`` is the
synchronous form.  ``parse`` runs inline unless ``parse_in_thread_bytes`` is set and the
object is at least that big: measured with ``SSTReader`` (BENCHMARKS.md, "File cache"),
a worker thread adds 0.1-0.9 ms per parse and, the parse holding the GIL, does not
shorten the event loop's stall; it pays only for a ``parse`` that releases the GIL.

Errors: :class:`ObjectNotFoundError` and :class:`UnavailableError` from the store
propagate and nothing is cached.  A :class:`CorruptFileError` from ``parse`` on
disk-tier bytes drops the disk copy and refetches from the store; on store bytes it
propagates.  The cache belongs to one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import struct
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import xxhash

from lsmstore import private
from lsmstore.errors import CorruptFileError
from lsmstore.storage.base import ObjectStore

_log = logging.getLogger(__name__)

T = TypeVar("T")

_MAGIC = b"LSMCACH1"
_HEADER = struct.Struct("<8sQQ")  # magic, xxh3-64 of the payload, payload length
_TMP = ".tmp-"

#: Bytes of fetched objects waiting to be written to the disk tier, at most.
MAX_PENDING_WRITE_BYTES = 256 << 20


@dataclass(slots=True)
class CacheStats:
    hits_ram: int = 0  # gets answered from the RAM tier (incl. peek hits)
    hits_disk: int = 0  # loads answered from the disk tier
    misses: int = 0  # gets not answered from RAM (joiners of a running load included)
    fetches: int = 0  # store gets
    evictions_ram: int = 0
    evictions_disk: int = 0
    bytes_ram: int = 0
    bytes_disk: int = 0


class _Load:
    """One in-flight load; ``stale`` once invalidated (its result is then not kept)."""

    __slots__ = ("stale", "task")

    def __init__(self) -> None:
        self.stale = False
        self.task: asyncio.Future[Any] | None = None


def _identity(data: bytes, name: str) -> bytes:
    return data


def _read_file(path: str) -> bytes | None:
    """The payload, or None if the file is gone, torn or corrupt."""
    try:
        with open(path, "rb") as f:
            header = f.read(_HEADER.size)
            payload = f.read()
    except OSError:
        return None
    if len(header) != _HEADER.size:
        return None
    magic, checksum, length = _HEADER.unpack(header)
    if magic != _MAGIC or length != len(payload) or xxhash.xxh3_64_intdigest(payload) != checksum:
        return None
    return payload


def _write_file(path: str, data: bytes) -> None:
    header = _HEADER.pack(_MAGIC, xxhash.xxh3_64_intdigest(data), len(data))
    private.write_file(path, header, data, tmp_mark=_TMP)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _scan(root: str) -> list[tuple[float, str, int]]:
    """(mtime, name, size) of every cache file under ``root``; removes temp leftovers."""
    found = []
    try:
        with os.scandir(root) as shards:
            dirs = [s.path for s in shards if s.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    except OSError as e:  # unusable (not a directory, no permission): no disk tier
        _log.warning("file cache: cannot use %s as its disk tier: %s", root, e.strerror or e)
        return []
    for shard in dirs:
        with contextlib.suppress(OSError), os.scandir(shard) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if _TMP in entry.name:
                        os.unlink(entry.path)
                    else:
                        st = entry.stat(follow_symlinks=False)
                        found.append((st.st_mtime, entry.name, st.st_size))
    found.sort()
    return found


class FileCache:
    def __init__(
        self,
        *,
        ram_bytes: int = 256 << 20,
        disk_dir: Path | None = None,
        disk_bytes: int = 1 << 30,
        parse_in_thread_bytes: int | None = None,
    ) -> None:
        self.ram_bytes = ram_bytes
        self.disk_dir = disk_dir
        self.disk_bytes = disk_bytes
        self.parse_in_thread_bytes = parse_in_thread_bytes
        self.stats = CacheStats()
        self._ram: OrderedDict[tuple[str, str, str], tuple[Any, int]] = OrderedDict()
        self._kinds: set[str] = set()  # every kind ever cached (invalidate drops all)
        self._loads: dict[tuple[str, str, str], _Load] = {}
        self._disk: OrderedDict[str, int] = OrderedDict()  # file name -> size, LRU first
        self._disk_ready: asyncio.Future[None] | None = None
        self._writing: dict[str, _Load] = {}  # disk writes in flight, by file name
        self._pending_bytes = 0
        self._disk_jobs: dict[str, asyncio.Future[None]] = {}  # newest job per file name
        self._background: set[asyncio.Future[Any]] = set()

    # --- RAM tier (the hot path) -----------------------------------------------------

    def peek(self, store: ObjectStore, key: str, kind: str = "raw") -> Any | None:
        """The parsed value if it is in RAM, else None (no I/O, no await)."""
        k = (store.url, key, kind)
        entry = self._ram.get(k)
        if entry is None:
            return None
        self._ram.move_to_end(k)
        self.stats.hits_ram += 1
        return entry[0]

    async def get(
        self,
        store: ObjectStore,
        key: str,
        parse: Callable[[bytes, str], T],
        *,
        kind: str = "raw",
    ) -> T:
        """``parse(data, key)`` of the object, from RAM, disk or the store (module doc)."""
        k = (store.url, key, kind)
        entry = self._ram.get(k)
        if entry is not None:
            self._ram.move_to_end(k)
            self.stats.hits_ram += 1
            return cast(T, entry[0])
        self.stats.misses += 1
        load = self._loads.get(k)
        if load is None:
            load = _Load()
            load.task = asyncio.ensure_future(self._load(store, key, parse, k, load))
            self._loads[k] = load
            load.task.add_done_callback(partial(self._load_done, k, load))
        assert load.task is not None
        return cast(T, await asyncio.shield(load.task))

    async def get_bytes(self, store: ObjectStore, key: str) -> bytes:
        return await self.get(store, key, _identity, kind="raw")

    def _load_done(self, k: tuple[str, str, str], load: _Load, task: asyncio.Future[Any]) -> None:
        if self._loads.get(k) is load:
            del self._loads[k]
        if not task.cancelled():
            task.exception()  # retrieved: every caller may have gone

    def _remember(self, k: tuple[str, str, str], value: Any, size: int) -> None:
        if size > self.ram_bytes:
            return
        old = self._ram.pop(k, None)
        if old is not None:
            self.stats.bytes_ram -= old[1]
        self._ram[k] = (value, size)
        self._kinds.add(k[2])
        self.stats.bytes_ram += size
        while self.stats.bytes_ram > self.ram_bytes:
            _, (_, evicted) = self._ram.popitem(last=False)
            self.stats.bytes_ram -= evicted
            self.stats.evictions_ram += 1

    def invalidate(self, store: ObjectStore, key: str) -> None:
        """Drop ``key`` (every kind) from both tiers; a load already running is not kept."""
        url = store.url
        for kind in self._kinds:
            entry = self._ram.pop((url, key, kind), None)
            if entry is not None:
                self.stats.bytes_ram -= entry[1]
        for (u, k, _), load in list(self._loads.items()):
            if u == url and k == key:
                load.stale = True
                del self._loads[(u, k, _)]
        if self.disk_dir is not None:
            name = self._disk_name(url, key)
            writing = self._writing.get(name)
            if writing is not None:
                writing.stale = True
            self._disk_drop(name)

    # --- loading ---------------------------------------------------------------------

    async def _load(
        self,
        store: ObjectStore,
        key: str,
        parse: Callable[[bytes, str], Any],
        k: tuple[str, str, str],
        load: _Load,
    ) -> Any:
        name = None
        if self.disk_dir is not None:
            name = self._disk_name(store.url, key)
            data = await self._disk_read(name)
            if data is not None:
                try:
                    value = await self._parse(parse, data, key)
                except CorruptFileError:
                    self._disk_drop(name)
                else:
                    self.stats.hits_disk += 1
                    if not load.stale:
                        self._remember(k, value, len(data))
                    return value
        self.stats.fetches += 1
        data = await store.get(key)
        value = await self._parse(parse, data, key)
        if not load.stale:
            self._remember(k, value, len(data))
            if name is not None:
                self._disk_write(name, data)
        return value

    async def _parse(self, parse: Callable[[bytes, str], Any], data: bytes, key: str) -> Any:
        if self.parse_in_thread_bytes is not None and len(data) >= self.parse_in_thread_bytes:
            return await asyncio.to_thread(parse, data, key)
        return parse(data, key)

    # --- disk tier -------------------------------------------------------------------

    @staticmethod
    def _disk_name(url: str, key: str) -> str:
        return hashlib.sha256(f"{url}\0{key}".encode("utf-8", "surrogatepass")).hexdigest()

    def _disk_path(self, name: str) -> str:
        assert self.disk_dir is not None
        return os.path.join(self.disk_dir, name[:2], name)

    async def _ensure_disk_index(self) -> None:
        if self._disk_ready is None:
            self._disk_ready = asyncio.ensure_future(self._index_disk())
        await asyncio.shield(self._disk_ready)

    async def _index_disk(self) -> None:
        assert self.disk_dir is not None
        for _, name, size in await asyncio.to_thread(_scan, str(self.disk_dir)):
            self._disk[name] = size
            self.stats.bytes_disk += size
        self._evict_disk()

    async def _disk_read(self, name: str) -> bytes | None:
        await self._ensure_disk_index()
        if name not in self._disk:
            return None
        self._disk.move_to_end(name)
        data = await asyncio.to_thread(_read_file, self._disk_path(name))
        if data is None:  # gone, torn or corrupt: forget it and remove what is left
            self._disk_drop(name)
        return data

    def _disk_drop(self, name: str) -> None:
        size = self._disk.pop(name, None)
        if size is not None:
            self.stats.bytes_disk -= size
            self._remove(name)

    def _remove(self, name: str) -> None:
        self._disk_job(name, partial(asyncio.to_thread, _unlink, self._disk_path(name)))

    def _disk_job(self, name: str, job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job`` in the background after every earlier job on the file ``name``
        (so a removal scheduled before a rewrite never deletes the new file)."""
        before = self._disk_jobs.get(name)

        async def run() -> None:
            if before is not None:
                await asyncio.wait([before])
            await job()

        task = asyncio.ensure_future(run())
        self._disk_jobs[name] = task
        self._background.add(task)
        task.add_done_callback(partial(self._disk_job_done, name))

    def _disk_job_done(self, name: str, task: asyncio.Future[None]) -> None:
        self._background.discard(task)
        if self._disk_jobs.get(name) is task:
            del self._disk_jobs[name]
        if not task.cancelled():
            task.exception()  # retrieved; failures only cost a later refetch

    def _disk_write(self, name: str, data: bytes) -> None:
        size = _HEADER.size + len(data)
        if size > self.disk_bytes or self._pending_bytes + len(data) > MAX_PENDING_WRITE_BYTES:
            return
        ticket = _Load()
        self._writing[name] = ticket
        self._pending_bytes += len(data)
        self._disk_job(name, partial(self._write, name, data, size, ticket))

    async def _write(self, name: str, data: bytes, size: int, ticket: _Load) -> None:
        try:
            await self._ensure_disk_index()
            await asyncio.to_thread(_write_file, self._disk_path(name), data)
        except OSError:
            return  # a full or read-only disk only costs a later refetch
        finally:
            self._pending_bytes -= len(data)
            if self._writing.get(name) is ticket:
                del self._writing[name]
        if ticket.stale:  # invalidated while it was being written
            await asyncio.to_thread(_unlink, self._disk_path(name))
            return
        old = self._disk.pop(name, None)
        self.stats.bytes_disk += size - (old or 0)
        self._disk[name] = size
        self._evict_disk()

    def _evict_disk(self) -> None:
        while self.stats.bytes_disk > self.disk_bytes and self._disk:
            name, size = self._disk.popitem(last=False)
            self.stats.bytes_disk -= size
            self.stats.evictions_disk += 1
            self._remove(name)

    async def drain(self) -> None:
        """Wait until background disk writes and removals have finished."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def aclose(self) -> None:
        """Finish background disk work; the cache stays usable."""
        await self.drain()
