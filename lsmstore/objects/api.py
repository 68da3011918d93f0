"""The object reads of ``Ref`` and ``Branch`` (docs/client.md, "Objects API").

:class:`ObjectReads` (``stat_object``, ``open``, ``list_objects``) is mixed into both;
the writes (``upload``, ``link``, ``link_many``, ``delete_object(s)``, ``copy_object``)
are the operations layer's (:mod:`lsmstore.operations.objects`).  An object is a
graveler record whose key is the path (UTF-8) and whose value is lakeFS's
``catalog.Entry`` (:mod:`lsmstore.objects.entry`); its data lives in the repository's
storage namespace (``data/<id>``) or, when linked, wherever its physical address says
(:mod:`lsmstore.objects.addresses`).
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, cast

from lsmstore.errors import (
    CorruptFileError,
    InvalidInputError,
    ObjectNotFoundError,
)
from lsmstore.graveler.record import Record
from lsmstore.objects.addresses import (
    ALLOWED_EXTERNAL_PREFIXES_KEY,
    Namespace,
    granted_prefixes,
    parse_allowed_prefixes,
)
from lsmstore.objects.entry import (
    DEFAULT_CONTENT_TYPE,
    ObjectEntry,
    decode_entry,
    parse_entry,
)
from lsmstore.objects.model import inline_stats
from lsmstore.objects.reader import InlineReader, ObjectReader
from lsmstore.objects.rules import (
    MAX_PATH_BYTES,
    check_path,
)
from lsmstore.types import Entry, ObjectStats

if TYPE_CHECKING:
    from lsmstore.client import Repository


def namespace(repo: Repository) -> Namespace:
    """The address rules of ``repo``, with the import sources its process grants
    (``server_import_sources``); InvalidInputError for bad allowed prefixes."""
    ns = _namespaces.get(repo)
    if ns is None:
        scheme = repo.storage_namespace.partition("://")[0].lower()
        allowed = parse_allowed_prefixes(
            repo.info.metadata.get(ALLOWED_EXTERNAL_PREFIXES_KEY), scheme
        )
        granted = granted_prefixes(repo.store.config.server_import_sources, scheme)
        ns = Namespace(repo.objects.url, repo.storage_namespace, allowed, granted)
        _namespaces[repo] = ns
    return ns


_namespaces: weakref.WeakKeyDictionary[Repository, Namespace] = weakref.WeakKeyDictionary()


def _stats_of(path: str, data: bytes, identity: bytes, ns: Namespace) -> ObjectStats:
    """ObjectStats straight from a record's value (the hot path of stat and list)."""
    try:
        msg = parse_entry(data, path)
    except CorruptFileError:
        return inline_stats(path, data, identity)
    address = msg.address
    atype = msg.address_type
    if atype == 1 or (atype == 0 and "://" not in address):
        address = ns.public + address
    else:
        address = ns.shown(address)
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


def object_stats(path: str, entry: ObjectEntry, ns: Namespace) -> ObjectStats:
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


def check_listing(
    prefix: object, delimiter: object, after: object, amount: object
) -> tuple[bytes, bytes | None, bytes | None]:
    """The checked arguments of ``list_objects`` (InvalidInputError): prefix, delimiter
    (None for none) and after as UTF-8; ``amount`` None or an int >= 0."""
    if amount is not None and (
        isinstance(amount, bool) or not isinstance(amount, int) or amount < 0
    ):
        raise InvalidInputError(f"list_objects amount must be an int >= 0, not {amount!r}")
    p = _opt_text(prefix, "prefix") or b""
    return p, _opt_text(delimiter, "delimiter") or None, _opt_text(after, "after")


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
        return ObjectReader(store, loc.key, object_stats(path, entry, ns))

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
        p, d, a = check_listing(prefix, delimiter, after, amount)
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


async def find_object(reads: ObjectReads, path: str) -> tuple[ObjectEntry | None, Record]:
    """The entry at ``path`` of a Ref or Branch (None for a raw value: an inline object)
    and its record; ObjectNotFoundError if absent, InvalidNameError for a bad path."""
    return await reads._found(path)
