"""Many links into staged records: the checks on the caller's side, the encoding off it.

:class:`LinkStager` turns the links of one call (``Branch.link_many``, the server's
batch endpoint) into records for the branch's writer.  Every link is checked here, on
the caller's side, before anything is staged -- path, address (inside the namespace or
under an allowed prefix), size, checksum, content type, mtime, metadata, the value
bound -- so one bad link fails its call and stages nothing.  What is left is pure
encoding: lakeFS's identity (SHA-256 over the typed encoding) and the ``catalog.Entry``
bytes.  A link without metadata is staged as a *pending* record
(:mod:`lsmstore.staging.pending`): its address, size and checksum plus a
:class:`~lsmstore.objects.entry.BatchEncoder` shared by the links with the same mtime,
address type and content type; the writer's encoder makes identity and value while it
encodes the L1 file, in its worker process.  Entries come out byte for byte what
:func:`~lsmstore.objects.entry.encode_value` makes (``tests/test_object_entry.py``).
Links with metadata are encoded here (they are rare, and their metadata would have to
travel too).

The common link -- an ASCII path, an address under ``<namespace>/data/`` of plain
characters (a local namespace's in either form: ``local://<name>/data/...`` as users
see it, or the store's ``file://`` URI), a plain checksum, no content type, mtime or
metadata -- takes a fast path whose outcome equals the full checks', which every other
link goes through.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import attrgetter
from typing import Any

from lsmstore import layout, validate
from lsmstore.config import Config
from lsmstore.errors import InvalidInputError
from lsmstore.graveler.record import Record
from lsmstore.objects.addresses import MAX_ADDRESS_BYTES, PLAIN_KEY, PLAIN_KEY_BYTES, Namespace
from lsmstore.objects.entry import (
    DEFAULT_CONTENT_TYPE,
    AddressType,
    BatchEncoder,
    ObjectEntry,
    encode_value,
)
from lsmstore.objects.model import as_link
from lsmstore.objects.rules import (
    MAX_FIELD_BYTES,
    MAX_PATH_BYTES,
    MAX_SIZE,
    check_checksum,
    check_content_type,
    check_metadata,
    check_mtime,
    check_path,
    check_size,
)
from lsmstore.staging.memstore import pending_bytes
from lsmstore.staging.pending import PendingCall, Staged
from lsmstore.types import ObjectLink

#: An upper bound of the ``catalog.Entry`` bytes of an entry without metadata: its
#: address, checksum and content type at their limits plus every other field and the
#: framing (36 bytes at most; ``tests/test_object_entry.py`` builds the largest).
MAX_ENTRY_WITHOUT_METADATA = MAX_ADDRESS_BYTES + 2 * MAX_FIELD_BYTES + 64

_new_tuple = tuple.__new__
_LSM = f"/{layout.PREFIX}/"
#: Checksums that need no stripping or checking: MD5 hex, S3 multipart ETags, ...
_plain_etag = re.compile(r"[0-9A-Za-z_.:+/=-]{1,1024}").fullmatch
_plain_key = PLAIN_KEY.fullmatch
#: The characters of plain checksums (all ASCII), as bytes for ``bytes.translate``.
_ETAG_BYTES = bytes(c for c in range(128) if _plain_etag(chr(c)))
#: What makes "\n"-joined relative addresses (``data/<key>`` each) other than plain
#: keys: an empty or dot segment, a trailing "/", an ``_lsm`` segment.
_NOT_PLAIN = re.compile(f"/(?:[/.\n]|{layout.PREFIX}/)").search
_DATA_AFTER_JOINT = "\n" + layout.DATA
_LINK_FIELDS = tuple(map(attrgetter, ("path", "physical_address", "size", "checksum")))
_UNSET_FIELDS = tuple(map(attrgetter, ("content_type", "metadata", "mtime")))
LINKS = "link_many links"


def link_entry(ns: Namespace, link: ObjectLink, now: tuple[int, int]) -> ObjectEntry:
    """The checked entry of ``link`` (InvalidInputError naming the rule it breaks);
    ``now`` is the ``(seconds, nanos)`` of a link without mtime."""
    address, atype = ns.for_link(link.physical_address)
    size = check_size(link.size)
    etag = check_checksum(link.checksum)
    ct = check_content_type(link.content_type)
    md = check_metadata(link.metadata)
    if link.mtime is None:
        secs, nanos = now
    else:
        secs, nanos = check_mtime(link.mtime), 0
    return ObjectEntry(address, atype, size, etag, secs, nanos, ct, md)


def made_record(key: bytes, identity: bytes, data: bytes, max_value: int) -> Record:
    """The record of an encoded entry; InvalidInputError when over ``max_value``."""
    if len(data) > max_value:
        raise InvalidInputError(f"entry of {key[:64]!r} is {len(data)} bytes, over max_value_bytes")
    rec: Record = _new_tuple(Record, (key, identity, data))
    return rec


def _lengths(joined: Any, joint: Any, items: list[Any]) -> tuple[int, int]:
    """The least and the greatest length of some items (all str or all bytes), given
    them ``joined`` by ``joint``, a character that only the joints hold: from one look
    at the joints when all items have the first one's length (ids, MD5 checksums ...),
    else from every item's length."""
    size = len(items[0])
    n = len(items)
    if len(joined) == n * (size + 1) - 1 and joined[size :: size + 1] == joint * (n - 1):
        return size, size
    lengths = set(map(len, items))
    return min(lengths), max(lengths)


class LinkStager:
    """Checks links and makes their staged records, for one call (see the module
    docstring); ``now`` is the ``(seconds, nanos)`` of links without mtime."""

    def __init__(self, ns: Namespace, config: Config, now: tuple[int, int]) -> None:
        self._ns = ns
        self._max_key = config.max_key_bytes
        self._max_value = config.max_value_bytes
        #: Pending records only where every entry without metadata fits the bound.
        self._defer = config.max_value_bytes >= MAX_ENTRY_WITHOUT_METADATA
        self._timed(now)
        # The namespace's prefixes a link may give, as ``Namespace.for_link`` tries them:
        # the one users see first (``local://name/`` of a local namespace), then the
        # store's.  ASCII ones only: then an address of plain characters has as many
        # bytes as characters, and its length is its UTF-8 size.  A prefix that starts
        # the other is left to the full checks (neither is then read for the other).
        prefixes = [ns.public]
        if ns.base != ns.public:
            if ns.base.startswith(ns.public) or ns.public.startswith(ns.base):
                prefixes = []
            else:
                prefixes.append(ns.base)
        #: ``(prefix, prefix + "data/")`` of each prefix the fast paths take.
        self._prefixes = tuple(
            (p, p + layout.DATA) for p in prefixes if (p + layout.DATA).isascii()
        )
        self._max_path = min(self._max_key, MAX_PATH_BYTES)
        self._by_columns = self._defer and any(_LSM not in d for _, d in self._prefixes)

    def _timed(self, now: tuple[int, int]) -> None:
        self._now = now
        self._makers: dict[tuple[int, int, AddressType, str], BatchEncoder] = {}
        self._common = self._maker(now[0], now[1], AddressType.RELATIVE, DEFAULT_CONTENT_TYPE)

    def at(self, now: tuple[int, int]) -> LinkStager:
        """A stager of the same namespace and configuration for a call at ``now``: the
        derived rules are copied, not worked out again (the server's one-link requests
        make one per request)."""
        new = object.__new__(LinkStager)
        new.__dict__.update(self.__dict__)
        new._now = now
        common = self._common.at(now[0], now[1])
        new._makers = {(now[0], now[1], AddressType.RELATIVE, DEFAULT_CONTENT_TYPE): common}
        new._common = common
        return new

    def _maker(self, secs: int, nanos: int, atype: AddressType, ct: str) -> BatchEncoder:
        shared = (secs, nanos, atype, ct)
        maker = self._makers.get(shared)
        if maker is None:
            maker = self._makers[shared] = BatchEncoder(secs, nanos, int(atype), ct)
        return maker

    def _record(
        self, key: bytes, maker: BatchEncoder, address: str, size: int, etag: str
    ) -> Staged:
        if self._defer:
            return (key, maker.spec, address, size, etag)
        return made_record(key, *maker.encode(address, size, etag), self._max_value)

    def _plain(self, link: ObjectLink) -> str | None:
        """The relative address of a common link (see the module docstring), else
        None: its outcome is the full checks' for such a link."""
        addr = link.physical_address
        if type(addr) is not str:
            return None
        for found in self._prefixes:  # no prefix starts another: at most one matches
            if addr.startswith(found[1]):
                break
        else:
            return None
        prefix, data_base = found
        size = link.size
        etag = link.checksum
        if (
            link.metadata is None
            and link.content_type is None
            and link.mtime is None
            and len(addr) <= MAX_ADDRESS_BYTES
            and _plain_key(addr, len(data_base))
            and _LSM not in addr
            and type(size) is int
            and 0 <= size <= MAX_SIZE
            and type(etag) is str
            and _plain_etag(etag)
        ):
            return addr[len(prefix) :]
        return None

    def stage(self, key: bytes, link: ObjectLink) -> tuple[Staged, str | None]:
        """The record of ``link`` at ``key`` (a checked path), and the relative data
        address it points to (None for a full URI: data that is not ours)."""
        relative = self._plain(link)
        if relative is not None:
            return self._record(key, self._common, relative, link.size, link.checksum), relative
        if link.metadata is not None and check_metadata(link.metadata):
            entry = link_entry(self._ns, link, self._now)
            rec = made_record(key, *encode_value(entry), self._max_value)
            return rec, entry.address if entry.address_type is AddressType.RELATIVE else None
        address, atype = self._ns.for_link(link.physical_address)
        size = check_size(link.size)
        etag = check_checksum(link.checksum)
        ct = link.content_type
        ct = DEFAULT_CONTENT_TYPE if ct is None else check_content_type(ct)
        secs, nanos = self._now if link.mtime is None else (check_mtime(link.mtime), 0)
        maker = self._maker(secs, nanos, atype, ct)
        rec2 = self._record(key, maker, address, size, etag)
        return rec2, address if atype is AddressType.RELATIVE else None

    def stage_all(self, links: Iterable[Any]) -> list[Staged] | PendingCall:
        """The records of ``links`` (``Branch.link_many``'s argument: ObjectLinks and
        link tuples, :data:`~lsmstore.objects.model.LinkTuple`): a :class:`PendingCall`
        when they are pending records checked a column at a time (the columns as they
        were checked, held by the memstore as one object), else a list."""
        seq = links if type(links) is list else list(validate.check_items(links, LINKS))
        if not seq:
            return []
        made = self._columns(seq) if self._by_columns else None
        return self._one_by_one(seq) if made is None else made

    def _columns(self, seq: list[Any]) -> PendingCall | None:
        """The pending records of a call whose every link is common (see the module
        docstring), checked a column at a time: a few passes in C over all paths, all
        addresses ... instead of a Python loop per link; None when a check fails (then
        :meth:`_one_by_one` finds the first bad link and its exact error, or stages
        links that are valid but not common).  Its outcome equals the full checks'.
        The call's charge is summed from the lengths the checks measured."""
        n = len(seq)
        kinds = list(map(type, seq))
        tuples = kinds.count(tuple) == n
        if not tuples and kinds.count(ObjectLink) != n:
            return None
        paths: Sequence[Any]
        addrs: Sequence[Any]
        sizes: Sequence[Any]
        etags: Sequence[Any]
        if tuples:
            if list(map(len, seq)).count(4) != n:
                return None
            # the links' items in one list, a column every fourth item: list.extend
            # takes a tuple's items without an iterator (zip(*seq) makes one per link,
            # each a new object for the cyclic collector)
            flat: list[Any] = []
            deque(map(flat.extend, seq), 0)
            paths, addrs, sizes, etags = flat[0::4], flat[1::4], flat[2::4], flat[3::4]
            del flat
        else:
            for unset in _UNSET_FIELDS:
                if list(map(unset, seq)).count(None) != n:
                    return None
            paths, addrs, sizes, etags = (list(map(get, seq)) for get in _LINK_FIELDS)
        # exact types, as the per-link fast path wants: the full checks take a str
        # subclass, but store the checksum (stripped) and the address (sliced) as str
        for column, kind in ((paths, str), (addrs, str), (sizes, int), (etags, str)):
            if list(map(type, column)).count(kind) != n:
                return None  # bools among the sizes too
        if not 0 <= min(sizes) <= max(sizes) <= MAX_SIZE:
            return None
        all_paths = "".join(paths)
        if not all_paths.isascii():
            return None
        keys = list(map(str.encode, paths))
        lo, hi = _lengths(b"\xff".join(keys), b"\xff", keys)  # no ASCII key holds it
        if not 0 < lo <= hi <= self._max_path:
            return None
        # the prefix the first address starts with (as ``_plain`` picks it): every other
        # must start with it too (checked below), or the call goes link by link
        first = addrs[0]
        base = next((p for p, d in self._prefixes if first.startswith(p) and _LSM not in d), None)
        if base is None:
            return None
        relative = list(map(str.removeprefix, addrs, repeat(base)))
        # ASCII addresses of plain characters joined by "\n" (a character of none): the
        # joints are the only "\n"s, so every address is "data/<key>" when every joint
        # is followed by "data/", and its key is plain when no "/" is followed by "/",
        # "." or "\n" (a trailing "/"), or starts an _lsm segment (the namespace has
        # none, and none can straddle it and "data/")
        joined = "\n".join(relative)
        joints = b"\n" * (n - 1)
        if not joined.isascii() or joined.encode().translate(None, PLAIN_KEY_BYTES) != joints:
            return None
        # each address lost its namespace prefix (removeprefix keeps one without it)
        if len(joined) - n + 1 != len("".join(addrs)) - n * len(base):
            return None
        if not joined.startswith(layout.DATA) or joined.count(_DATA_AFTER_JOINT) != n - 1:
            return None
        if joined.endswith("/") or _NOT_PLAIN(joined):
            return None
        if len(base) + _lengths(joined, "\n", relative)[1] > MAX_ADDRESS_BYTES:
            return None
        all_etags = "\n".join(etags)  # "\n" is no checksum character either
        if not all_etags.isascii() or all_etags.encode().translate(None, _ETAG_BYTES) != joints:
            return None
        lo, hi = _lengths(all_etags, "\n", etags)
        if not 0 < lo <= hi <= MAX_FIELD_BYTES:
            return None
        # ASCII paths: as many bytes as characters; the addresses and checksums less
        # their n - 1 joints
        nbytes = pending_bytes(n, len(all_paths), len(joined) - n + 1, len(all_etags) - n + 1)
        return PendingCall(keys, self._common.spec, relative, sizes, etags, nbytes)

    def _one_by_one(self, seq: list[Any]) -> list[Staged]:
        """:meth:`stage_all` link by link, with the full checks where the common ones
        do not hold; raises the error of the first bad link."""
        max_key = self._max_key
        max_path = self._max_path
        records: list[Staged] = []
        add = records.append
        common = self._common.spec
        defer = self._defer
        plain = self._plain
        stage = self.stage
        for item in seq:
            link = item if type(item) is ObjectLink else as_link(item)
            path = link.path
            if type(path) is str and path.isascii() and 0 < len(path) <= max_path:
                key = path.encode()
            else:
                key = check_path(path, max_key)
            relative = plain(link)
            if relative is not None and defer:
                add((key, common, relative, link.size, link.checksum))
            else:
                add(stage(key, link)[0])
        return records
