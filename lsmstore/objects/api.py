"""The object API of ``Ref`` and ``Branch`` (docs/client.md, "Objects API").

:class:`ObjectReads` (``stat_object``, ``open``, ``list_objects``) is mixed into both;
:class:`ObjectWrites` (``upload``, ``link``, ``link_many``, ``delete_object(s)``,
``copy_object``) into ``Branch``.  An object is a graveler record whose key is the path
(UTF-8) and whose value is lakeFS's ``catalog.Entry`` (:mod:`lsmstore.objects.entry`);
its data lives in the repository's storage namespace (``data/<id>``) or, when linked,
wherever its physical address says (:mod:`lsmstore.objects.addresses`).

Crash safety of an upload (docs/objects.md, "Crashes"): the data object is written
completely (atomically) under a fresh key *before* the entry is staged; the upload is
acknowledged only when the entry is.  A crash or failure in between leaves at most an
unreferenced data object and no entry.  When staging fails with a definite error the
data object is deleted at once; when its outcome is unknown (or the caller was
cancelled while it was in flight) the data object is recorded as a garbage candidate
instead, since the entry may have landed.

``if_absent`` (lakeFS's ``If-None-Match: *``) is checked against the branch as of the
write, and check and write are serialised per path within one process; writers in
different processes that race on one path may both succeed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from lsmstore import layout, validate
from lsmstore.errors import (
    CorruptFileError,
    InvalidInputError,
    LsmError,
    ObjectExistsError,
    ObjectNotFoundError,
    UnavailableError,
)
from lsmstore.gc.data import record_candidates
from lsmstore.graveler.record import Record
from lsmstore.objects.addresses import (
    ALLOWED_EXTERNAL_PREFIXES_KEY,
    Namespace,
    parse_allowed_prefixes,
)
from lsmstore.objects.entry import (
    DEFAULT_CONTENT_TYPE,
    AddressType,
    ObjectEntry,
    decode_entry,
    encode_value,
    parse_entry,
)
from lsmstore.objects.linking import LinkStager, link_entry, made_record
from lsmstore.objects.model import LinkItem, inline_stats
from lsmstore.objects.reader import InlineReader, ObjectReader
from lsmstore.objects.rules import (
    MAX_PATH_BYTES,
    check_content_type,
    check_metadata,
    check_path,
)
from lsmstore.objects.source import Source
from lsmstore.staging.files import new_file_id
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.types import Entry, ObjectLink, ObjectStats

if TYPE_CHECKING:
    from lsmstore.client import Repository
    from lsmstore.staging.writer import BranchWriter

_new_tuple = tuple.__new__
_LSM = f"/{layout.PREFIX}/"
#: Checksums that need no stripping or checking: MD5 hex, S3 multipart ETags, ...
_PLAIN_ETAG = re.compile(r"[0-9A-Za-z_.:+/=-]{1,1024}")


def namespace(repo: Repository) -> Namespace:
    """The address rules of ``repo`` (InvalidInputError for bad allowed prefixes)."""
    ns = _namespaces.get(repo)
    if ns is None:
        scheme = repo.storage_namespace.partition("://")[0].lower()
        allowed = parse_allowed_prefixes(
            repo.info.metadata.get(ALLOWED_EXTERNAL_PREFIXES_KEY), scheme
        )
        ns = _namespaces[repo] = Namespace(repo.objects.url, repo.storage_namespace, allowed)
    return ns


_namespaces: weakref.WeakKeyDictionary[Repository, Namespace] = weakref.WeakKeyDictionary()
#: Per repository, a :class:`LinkStager` whose ``at`` makes each call's (its rules are
#: the namespace's and the store configuration's, both fixed for a repository object).
_stagers: weakref.WeakKeyDictionary[Repository, LinkStager] = weakref.WeakKeyDictionary()

#: One lock per (store, repository, branch, path) while an ``if_absent`` write checks and
#: stages; weakly held, so a lock lives only while someone waits on or holds it.
_path_locks: weakref.WeakValueDictionary[tuple[int, str, str, bytes], asyncio.Lock] = (
    weakref.WeakValueDictionary()
)


def _stats_of(path: str, data: bytes, identity: bytes, ns: Namespace) -> ObjectStats:
    """ObjectStats straight from a record's value (the hot path of stat and list)."""
    try:
        msg = parse_entry(data, path)
    except CorruptFileError:
        return inline_stats(path, data, identity)
    address = msg.address
    atype = msg.address_type
    if atype == 1 or (atype == 0 and "://" not in address):
        address = ns.base + address
    md = msg.metadata
    return ObjectStats(
        path,
        "object",
        address,
        msg.e_tag,
        msg.size,
        msg.last_modified.seconds,
        msg.content_type or DEFAULT_CONTENT_TYPE,
        dict(md) if md else {},
    )


def _stats(path: str, entry: ObjectEntry, ns: Namespace) -> ObjectStats:
    return ObjectStats(
        path=path,
        path_type="object",
        physical_address=ns.full_address(entry),
        checksum=entry.etag,
        size=entry.size,
        mtime=entry.mtime,
        content_type=entry.content_type or DEFAULT_CONTENT_TYPE,
        metadata=dict(entry.metadata),
    )


def _opt_text(value: object, what: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"list_objects {what} must be a str, not {type(value).__name__}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"list_objects {what} {value!r} is not valid Unicode") from None


class ObjectReads:
    """``stat_object``, ``open`` and ``list_objects`` of a Ref or Branch."""

    repository: Repository

    def _snapshot_lookup(self, key: bytes) -> Awaitable[tuple[Record | None, bool]]:
        raise NotImplementedError

    def _list(
        self, prefix: bytes, after: bytes | None, limit: int | None, delimiter: bytes | None
    ) -> AsyncIterator[Entry]:
        raise NotImplementedError

    def _where(self) -> str:
        raise NotImplementedError

    async def _found(self, path: str) -> tuple[ObjectEntry | None, Record]:
        """The path's entry (None for a raw value: an inline object) and its record;
        ObjectNotFoundError if absent."""
        key = check_path(path, self.repository.store.config.max_key_bytes)
        rec, _ = await self._snapshot_lookup(key)
        if rec is None or rec.value is None:
            raise ObjectNotFoundError(path, f"object {path!r} not found in {self._where()}")
        try:
            return decode_entry(rec.value, path), rec
        except CorruptFileError:
            return None, rec

    async def stat_object(self, path: str) -> ObjectStats:
        """The object at ``path``: ObjectNotFoundError when absent or deleted,
        InvalidNameError for a bad path.  A raw value (written with ``put``) is an
        inline object (:func:`inline_stats`)."""
        key = check_path(path, self.repository.store.config.max_key_bytes)
        rec, _ = await self._snapshot_lookup(key)
        if rec is None or rec.value is None:
            raise ObjectNotFoundError(path, f"object {path!r} not found in {self._where()}")
        return _stats_of(path, rec.value, rec.identity, namespace(self.repository))

    async def open(self, path: str) -> ObjectReader:
        """A reader of the object's data as of now (see :class:`ObjectReader`); of a raw
        value, its bytes."""
        entry, rec = await self._found(path)
        if entry is None:
            value = cast(bytes, rec.value)
            return InlineReader(value, inline_stats(path, value, rec.identity))
        repo = self.repository
        ns = namespace(repo)
        loc = ns.locate(entry, path)
        store = repo.objects if loc.store_url is None else repo.store.objects(loc.store_url)
        return ObjectReader(store, loc.key, _stats(path, entry, ns))

    async def list_objects(
        self,
        prefix: str = "",
        delimiter: str = "",
        after: str | None = None,
        amount: int | None = None,
    ) -> AsyncIterator[ObjectStats]:
        """Objects whose path starts with ``prefix``, in path (UTF-8 byte) order,
        strictly after ``after``, at most ``amount``.  With a ``delimiter`` (e.g. "/"),
        paths holding it past the prefix fold into one ``path_type="common_prefix"``
        entry each (counted against ``amount``), as lakeFS lists them.  Raw values are
        inline objects; raw keys that cannot be object paths (not UTF-8, or over
        1,024 bytes) are left out: no object call could name them (``list`` shows
        them)."""
        p = _opt_text(prefix, "prefix") or b""
        d = _opt_text(delimiter, "delimiter") or None
        a = _opt_text(after, "after")
        if amount is not None and (
            isinstance(amount, bool) or not isinstance(amount, int) or amount < 0
        ):
            raise InvalidInputError(f"list_objects amount must be an int >= 0, not {amount!r}")
        ns = namespace(self.repository)
        if amount == 0:
            return
        left = amount
        async for e in self._list(p, a, None, d):  # ``amount`` counts what is yielded
            key = e.key
            try:
                path = key.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if e.common_prefix:
                yield ObjectStats(path, "common_prefix")
            elif len(key) > MAX_PATH_BYTES:
                continue
            else:
                assert e.value is not None
                yield _stats_of(path, e.value, e.identity, ns)
            if left is not None:
                left -= 1
                if not left:
                    return


class ObjectWrites(ObjectReads):
    """The object writes of a Branch."""

    name: str

    def _w(self) -> BranchWriter:
        raise NotImplementedError

    # --- helpers ----------------------------------------------------------------------

    def _lock(self, key: bytes) -> asyncio.Lock:
        ident = (id(self.repository.store), self.repository.name, self.name, key)
        lock = _path_locks.get(ident)
        if lock is None:
            lock = _path_locks[ident] = asyncio.Lock()
        return lock

    def _record(self, key: bytes, entry: ObjectEntry) -> Record:
        return made_record(key, *encode_value(entry), self.repository.store.config.max_value_bytes)

    async def _previous(self, key: bytes) -> tuple[bool, str | None]:
        """Whether ``key`` holds an object now, and the relative data address of its
        entry when that entry is staged (a garbage candidate once replaced)."""
        rec, staged = await self._snapshot_lookup(key)
        if rec is None or rec.value is None:
            return False, None
        if not staged:
            return True, None
        try:
            entry = decode_entry(rec.value, "")
        except LsmError:
            return True, None  # a raw value: no data of ours behind it
        if entry.is_relative() and entry.address.startswith(layout.DATA):
            return True, entry.address
        return True, None

    async def _replaced(
        self, items: Iterable[tuple[bytes, str | None, str | None]], reason: str
    ) -> None:
        """Record the old data addresses that ``(key, old, new)`` writes replaced."""
        found = [
            (key.decode("utf-8", "surrogateescape"), old)
            for key, old, new in items
            if old is not None and old != new
        ]
        if found:
            repo = self.repository
            await record_candidates(
                repo.objects, repo.name, self.name, found, reason=reason, clock=repo.store.clock
            )

    def _now(self) -> tuple[int, int]:
        t = self.repository.store.clock()
        s = int(t)
        return s, min(int((t - s) * 1e9), 999_999_999)

    def new_physical_address(self) -> str:
        """A fresh full URI under the namespace's ``data/`` for a client to write an
        object's data to before linking it (lakeFS's ``getPhysicalAddress``)."""
        repo = self.repository
        return namespace(repo).base + layout.data_key(new_file_id(repo.store.clock))

    # --- writes -----------------------------------------------------------------------

    async def upload(
        self,
        path: str,
        data: Any,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        if_absent: bool = False,
    ) -> ObjectStats:
        """Write ``data`` (bytes, a file path, a binary file object or an async iterable
        of chunks) as the object at ``path``, streamed to ``data/<id>`` in the storage
        namespace, then stage its entry; returns once the entry is durable and ordered.

        ``checksum`` is the MD5 hex of the contents.  ``if_absent``: ObjectExistsError
        when the path holds an object (nothing is uploaded).  Bad input raises
        InvalidNameError/InvalidInputError before any I/O.
        """
        repo = self.repository
        key = check_path(path, repo.store.config.max_key_bytes)
        ct = check_content_type(content_type)
        md = check_metadata(metadata)
        source = Source(data)
        ns = namespace(repo)
        lock = self._lock(key) if if_absent else contextlib.nullcontext()
        async with lock:
            exists, old = await self._previous(key)
            if if_absent and exists:
                raise ObjectExistsError(path)
            data_key = layout.data_key(new_file_id(repo.store.clock))
            payload = source.small()
            durable = None
            if payload is not None:
                # One worker-thread hop; its data becomes durable while the entry is
                # staged and batched, and the writer appends the entry only after.
                durable = await repo.objects.put_fresh(data_key, payload)
            else:
                await repo.objects.put_stream(data_key, source, PutMode.CREATE)
            secs, nanos = self._now()
            entry = ObjectEntry(
                data_key, AddressType.RELATIVE, source.size, source.md5hex, secs, nanos, ct, md
            )
            await self._stage_new_data(key, entry, durable)
        await self._replaced([(key, old, data_key)], "overwritten")
        return _stats(path, entry, ns)

    async def _stage_new_data(
        self, key: bytes, entry: ObjectEntry, durable: asyncio.Future[None] | None = None
    ) -> None:
        """Stage the entry of freshly written data (``durable``: the data's durability,
        when it is still being made durable); on failure delete the data (the entry
        surely did not land) or record it as a candidate (it may have)."""
        try:
            await self._w().write(self._record(key, entry), durable)
        except BaseException as e:
            repo = self.repository
            unknown = not isinstance(e, LsmError) or (
                isinstance(e, UnavailableError) and e.outcome_unknown
            )
            if unknown:
                await asyncio.shield(
                    record_candidates(
                        repo.objects,
                        repo.name,
                        self.name,
                        [(key.decode("utf-8", "surrogateescape"), entry.address)],
                        reason="stage-unknown",
                        clock=repo.store.clock,
                    )
                )
            else:
                with contextlib.suppress(Exception):
                    await asyncio.shield(repo.objects.delete(entry.address))
            raise

    def _link_entry(self, ns: Namespace, link: ObjectLink, now: tuple[int, int]) -> ObjectEntry:
        return link_entry(ns, link, now)

    async def link(
        self,
        path: str,
        physical_address: str,
        *,
        size: int,
        checksum: str,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        mtime: int | None = None,
        if_absent: bool = False,
        verify: bool = False,
    ) -> ObjectStats:
        """Register an object whose data is already at ``physical_address`` (a full URI
        inside the storage namespace, or under an allowed external prefix).
        ``verify`` checks that the data exists with exactly ``size`` bytes
        (InvalidInputError otherwise).  ``mtime`` defaults to now.

        Like ``link_many``, it looks nothing up unless ``if_absent`` asks it to (and
        then the path holds no object to replace): the data of a staged object it
        replaces is left to the GC job's orphan scan, no candidate is recorded."""
        repo = self.repository
        key = check_path(path, repo.store.config.max_key_bytes)
        ns = namespace(repo)
        link = ObjectLink(path, physical_address, size, checksum, content_type, metadata, mtime)
        entry = self._link_entry(ns, link, self._now())
        if verify:
            await self._verify(ns, path, entry)
        record = self._record(key, entry)
        if if_absent:
            async with self._lock(key):
                if (await self._previous(key))[0]:
                    raise ObjectExistsError(path)
                await self._w().write(record)
        else:
            await self._w().write(record)
        return _stats(path, entry, ns)

    async def _verify(self, ns: Namespace, path: str, entry: ObjectEntry) -> None:
        repo = self.repository
        loc = ns.locate(entry, path)
        store: ObjectStore = (
            repo.objects if loc.store_url is None else repo.store.objects(loc.store_url)
        )
        try:
            meta = await store.head(loc.key)
        except ObjectNotFoundError:
            raise InvalidInputError(
                f"link of {path!r}: no object at {ns.full_address(entry)}"
            ) from None
        if meta.size != entry.size:
            raise InvalidInputError(
                f"link of {path!r}: the object at {ns.full_address(entry)} has {meta.size} "
                f"bytes, not {entry.size}"
            )

    async def link_many(self, links: Iterable[LinkItem]) -> None:
        """Register many objects in one batch with one acknowledgement (the
        high-throughput write path).  A link is an :class:`ObjectLink` or its tuple form
        (:data:`~lsmstore.objects.model.LinkTuple`, cheaper to build).  Every link is
        checked first: one bad link stages none.  A path given twice keeps its last
        link.  Unlike the single-path writes, it looks nothing up, so it records no
        garbage candidates: data it replaced is found by the GC job's scan for
        unreferenced ``data/`` objects."""
        staged = self._link_stager(self._now()).stage_all(links)
        if staged:
            await self._w().write_staged(staged)

    def _link_stager(self, now: tuple[int, int]) -> LinkStager:
        """A :class:`LinkStager` of this branch's repository for one call."""
        repo = self.repository
        stager = _stagers.get(repo)
        if stager is None:
            stager = _stagers[repo] = LinkStager(namespace(repo), repo.store.config, now)
        return stager.at(now)  # never the cached one itself: its makers would grow

    async def delete_object(self, path: str) -> None:
        """Delete the object at ``path``; ObjectNotFoundError when there is none."""
        key = check_path(path, self.repository.store.config.max_key_bytes)
        exists, old = await self._previous(key)
        if not exists:
            raise ObjectNotFoundError(path, f"object {path!r} not found in {self._where()}")
        await self._w().write(Record(key, b"", None))
        await self._replaced([(key, old, None)], "deleted")

    async def delete_objects(self, paths: Iterable[str]) -> None:
        """Delete many objects in one batch; absent paths are ignored."""
        max_key = self.repository.store.config.max_key_bytes
        checked = validate.check_items(paths, "delete_objects paths")
        keys = list(dict.fromkeys(check_path(p, max_key) for p in checked))
        if not keys:
            return
        previous = [await self._previous(k) for k in keys]
        await self._w().write_many([Record(k, b"", None) for k in keys])
        await self._replaced(
            [(k, old, None) for k, (_, old) in zip(keys, previous, strict=True)], "deleted"
        )

    async def copy_object(
        self, src_path: str, dst_path: str, *, src_ref: str | None = None
    ) -> ObjectStats:
        """Make ``dst_path`` an object with the data of ``src_path`` (read on
        ``src_ref``, default this branch): the same physical address, no copy of data;
        a new mtime.  ObjectNotFoundError when the source is absent."""
        repo = self.repository
        max_key = repo.store.config.max_key_bytes
        check_path(src_path, max_key)
        key = check_path(dst_path, max_key)
        source: ObjectReads = repo.ref(src_ref) if src_ref is not None else self
        src, rec = await source._found(src_path)
        if src is None:  # an inline object: its copy is the same record
            _, old = await self._previous(key)
            await self._w().write(_new_tuple(Record, (key, rec.identity, rec.value)))
            await self._replaced([(key, old, None)], "overwritten")
            return inline_stats(dst_path, cast(bytes, rec.value), rec.identity)
        secs, nanos = self._now()
        entry = ObjectEntry(
            src.address,
            src.address_type,
            src.size,
            src.etag,
            secs,
            nanos,
            src.content_type,
            dict(src.metadata),
        )
        _, old = await self._previous(key)
        await self._w().write(self._record(key, entry))
        new = entry.address if entry.is_relative() else None
        await self._replaced([(key, old, new)], "overwritten")
        return _stats(dst_path, entry, namespace(repo))
