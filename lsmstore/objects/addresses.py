"""Physical addresses: where an object's data lives, and which addresses a link may use.

An entry's address is either relative to the repository's storage namespace
(``data/<id>``, :attr:`AddressType.RELATIVE`: what uploads write) or a full URI
(:attr:`AddressType.FULL`).  Users always see full URIs: the namespace's URI (the
store's ``url``: ``s3://bucket/prefix``, ``file:///abs/dir``, ``mem://name``; for a
``local://rel`` namespace the namespace as named, never the server's directory) joined
with the relative address, and may give either form back to a link.

A linked address (``Branch.link``) must be a full URI inside the namespace -- as lakeFS
does, one under ``<namespace>/data/`` is stored relative, any other as given -- and
never with an ``_lsm`` segment (the service's own files, of this repository or of one
whose namespace lies inside this one).  Its key part obeys the object-key
rules (no empty, ``.`` or ``..`` segment, no control character).  An address outside
the namespace is refused (:class:`InvalidInputError`) unless it starts with one of the
repository's *allowed external prefixes*: repository metadata
:data:`ALLOWED_EXTERNAL_PREFIXES_KEY`, space-separated URI prefixes, each of the
namespace's scheme, each ending with ``/`` (set when the repository is created; like
lakeFS's ``blockstore.*.allowed_external_prefixes``).  External S3 addresses are read
with the namespace's store options (endpoint, region ...); external data is never
recorded as garbage.

A process may also *grant* import sources of its own (the setting
``server_import_sources``, :func:`granted_prefixes`): an import may read under them
(the caller checks that they overlap no repository's namespace,
:mod:`lsmstore.operations.imports`) and reads follow the addresses it recorded; a link
may not name them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from lsmstore import layout
from lsmstore.errors import (
    CorruptFileError,
    ImportSourceNotAllowedError,
    InvalidInputError,
    InvalidNameError,
)
from lsmstore.objects.entry import AddressType, ObjectEntry
from lsmstore.storage.base import check_key

#: Repository metadata key holding the allowed external prefixes (space-separated).
ALLOWED_EXTERNAL_PREFIXES_KEY = "lsmstore.allowed_external_prefixes"
MAX_ADDRESS_BYTES = 4096
#: A key segment naming the service's own files (of this repository, or of another
#: whose namespace lies below this one).
_LSM_SEGMENT = f"/{layout.PREFIX}/"
#: Keys that pass ``check_key`` and need no unquoting: segments of safe characters
#: that do not start with a dot.
PLAIN_KEY = re.compile(r"(?:[A-Za-z0-9_=+-][A-Za-z0-9._=+-]*/)*[A-Za-z0-9_=+-][A-Za-z0-9._=+-]*")
#: The characters of a :data:`PLAIN_KEY` (all ASCII), as bytes: ``not
#: key.encode().translate(None, PLAIN_KEY_BYTES)`` tells that an ASCII ``key`` has no
#: other character, in one pass of a table look-up per byte.
PLAIN_KEY_BYTES = bytes(c for c in range(128) if PLAIN_KEY.fullmatch(f"a{chr(c)}a"))


def check_address(address: object) -> str:
    """A linked physical address checked for what needs no namespace: a non-empty
    ``str`` of valid UTF-8, at most :data:`MAX_ADDRESS_BYTES`; InvalidInputError."""
    if not isinstance(address, str) or not address:
        raise InvalidInputError(f"physical address must be a non-empty str, not {address!r}")
    try:
        size = len(address.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInputError(f"physical address {address[:64]!r} is not valid UTF-8") from None
    if size > MAX_ADDRESS_BYTES:
        raise InvalidInputError(f"physical address is {size} bytes, over {MAX_ADDRESS_BYTES}")
    return address


def parse_allowed_prefixes(value: str | None, scheme: str) -> tuple[str, ...]:
    """The allowed external prefixes of a repository's metadata value; InvalidInputError
    for a prefix of another scheme or without a trailing ``/``."""
    if not value:
        return ()
    prefixes = tuple(value.split())
    for p in prefixes:
        parts = urlsplit(p)
        if parts.scheme.lower() != scheme or not p.endswith("/") or parts.query or ".." in p:
            raise InvalidInputError(
                f"allowed external prefix {p!r} must be a {scheme}:// URI ending with '/'"
            )
    return prefixes


#: The setting naming the import sources a process grants every repository.
IMPORT_SOURCES_SETTING = "server.import_sources"


def import_source_list(value: str) -> list[str]:
    """The prefixes of a ``server_import_sources`` value (spaces or commas between
    them), checked for form: ``s3://``, ``local://`` or ``file://`` URIs ending with
    ``/``, without query; InvalidInputError."""
    out = value.replace(",", " ").split()
    for p in out:
        scheme = urlsplit(p).scheme.lower()
        if scheme not in ("s3", "local", "file"):
            raise InvalidInputError(
                f"import source {p!r}: must be an s3://, local:// or file:// URI prefix"
            )
        parse_allowed_prefixes(p, scheme)
    return out


def granted_prefixes(value: str, scheme: str) -> tuple[str, ...]:
    """The granted import sources of a ``server_import_sources`` value that a
    namespace of ``scheme`` may read (the others are of another scheme)."""
    return tuple(p for p in import_source_list(value) if urlsplit(p).scheme.lower() == scheme)


@dataclass(frozen=True, slots=True)
class Location:
    """Where an entry's data is: ``key`` in the repository's store (``store_url`` None)
    or in the store opened from ``store_url``."""

    key: str
    store_url: str | None = None


class Namespace:
    """The address rules of one repository (see the module docstring)."""

    def __init__(
        self,
        store_url: str,
        storage_namespace: str,
        allowed: tuple[str, ...],
        granted: tuple[str, ...] = (),
    ) -> None:
        self.uri = store_url.rstrip("/")
        self.base = self.uri + "/"
        parts = urlsplit(storage_namespace)
        self.scheme = parts.scheme.lower()
        self._query = parts.query
        #: The repository's allowed external prefixes, then the process's granted
        #: import sources (reads follow both; links, only the first).
        self.allowed = allowed + granted
        self.own = allowed
        self.granted = granted
        #: The prefix users see and may give back: for a ``local://`` namespace the
        #: namespace as named (``local://rel/``), not the server's directory.
        self.public = storage_namespace.rstrip("/") + "/" if self.scheme == "local" else self.base

    def shown(self, address: str) -> str:
        """A full address as users see it (inside a ``local://`` namespace: relative to
        the data directory, as lakeFS's local block adapter names it)."""
        if self.public != self.base and address.startswith(self.base):
            return self.public + address[len(self.base) :]
        return address

    def full_address(self, entry: ObjectEntry) -> str:
        """The entry's data as a full URI (as users see it: :meth:`shown`)."""
        if entry.is_relative():
            return self.public + entry.address
        return self.shown(entry.address)

    def _key_in_namespace(self, rest: str) -> str:
        if PLAIN_KEY.fullmatch(rest):
            return rest  # the common case: no escapes, no dot segments, nothing to check
        key = unquote(rest) if self.scheme == "file" else rest
        check_key(key)
        return key

    def locate(self, entry: ObjectEntry, path: str) -> Location:
        """Where to read the entry's data; CorruptFileError for an address that no rule
        can read (e.g. another scheme), or that is outside the namespace and the allowed
        external prefixes: entries come from raw writes and staged SSTs too, unchecked,
        so reads keep to the places a link may name."""
        if not entry.is_relative():
            return self.locate_address(entry.address, path)
        try:
            return Location(check_key(entry.address))
        except InvalidInputError as e:
            raise CorruptFileError(path, f"unreadable physical address: {e}") from None

    def locate_address(self, address: str, path: str) -> Location:
        """:meth:`locate` of a full address (an entry's, or one a listing rendered from a
        relative one by prefixing the namespace's base)."""
        try:
            if self.public != self.base and address.startswith(self.public):
                address = self.base + address[len(self.public) :]
            if address.startswith(self.base):
                return Location(self._key_in_namespace(address[len(self.base) :]))
            if not any(address.startswith(p) for p in self.allowed):
                raise InvalidInputError(
                    f"{address!r} is outside the storage namespace and the allowed "
                    "external prefixes"
                )
            return self._external(address)
        except InvalidInputError as e:
            raise CorruptFileError(path, f"unreadable physical address: {e}") from None

    def _external(self, address: str) -> Location:
        parts = urlsplit(address)
        scheme = parts.scheme.lower()
        if scheme != self.scheme or parts.query or parts.fragment:
            raise InvalidInputError(f"{address!r} is not a {self.scheme}:// address")
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise InvalidInputError(f"{address!r}: a file URI names no host")
            return Location(check_key(unquote(parts.path).lstrip("/")), "file:///")
        if not parts.netloc:
            raise InvalidInputError(f"{address!r} names no bucket")
        root = f"{scheme}://{parts.netloc}"
        if scheme == "s3" and self._query:
            root += "?" + self._query  # the namespace's endpoint, region, ...
        return Location(check_key(parts.path.lstrip("/")), root)

    def import_source(self, uri: object) -> tuple[Location, str]:
        """Where to list the import source ``uri`` (a prefix, or one object's URI): the
        key prefix and its store (:class:`Location`; ``store_url`` None: the
        namespace's own store), and the full address that prefix stands for (an
        object's address is it + the rest of its key).  The rule is a link's
        (:meth:`for_link`): inside the namespace or under an allowed external prefix,
        never in an ``_lsm`` segment; InvalidInputError naming the rule it breaks."""
        address = check_address(uri)
        if self.public != self.base and address.startswith(self.public):
            address = self.base + address[len(self.public) :]
        parts = urlsplit(address)
        if parts.query or parts.fragment:
            raise InvalidInputError(f"import source {address!r}: no query or fragment")
        if address.startswith(self.base) or address + "/" == self.base:
            rest = address[len(self.base) :]
            key = unquote(rest) if self.scheme == "file" else rest
            loc = Location(key)
        elif any(address.startswith(p) for p in self.allowed):  # own, then granted
            scheme = parts.scheme.lower()
            remote_file = scheme == "file" and parts.netloc not in ("", "localhost")
            if scheme != self.scheme or remote_file:
                raise InvalidInputError(f"import source {address!r} is not a {self.scheme}:// URI")
            if scheme == "file":
                key, root = unquote(parts.path).lstrip("/"), "file:///"
            else:
                key, root = parts.path.lstrip("/"), f"{scheme}://{parts.netloc}"
                if scheme == "s3" and self._query:
                    root += "?" + self._query
            loc = Location(key, root)
        else:
            raise ImportSourceNotAllowedError(
                f"import source {address!r} is outside the repository's storage namespace "
                f"{self.public!r}, its allowed external prefixes (repository metadata "
                f"{ALLOWED_EXTERNAL_PREFIXES_KEY!r}) and the import sources the server "
                f"allows (setting {IMPORT_SOURCES_SETTING!r})"
            )
        segments = loc.key.split("/")
        if any(s in (".", "..") for s in segments) or layout.PREFIX in segments[:-1]:
            raise InvalidInputError(
                f"import source {address!r}: a dot segment, or inside a repository's own files"
            )
        return loc, address

    def granted_source(self, address: str) -> str | None:
        """The granted prefix an import source ``address`` (as :meth:`import_source`
        returned it) is read through, or None when the namespace or an allowed
        external prefix of the repository holds it."""
        if address.startswith(self.base) or address + "/" == self.base:
            return None
        if any(address.startswith(p) for p in self.own):
            return None
        return next((p for p in self.granted if address.startswith(p)), None)

    def for_link(self, address: object, *, granted: bool = False) -> tuple[str, AddressType]:
        """The ``(address, type)`` to store for a linked physical address, or
        InvalidInputError naming the rule it breaks.  ``granted``: an address under a
        granted import source is accepted too (an import's entries)."""
        address = check_address(address)
        if self.public != self.base and address.startswith(self.public):
            address = self.base + address[len(self.public) :]
        try:
            if address.startswith(self.base):
                key = self._key_in_namespace(address[len(self.base) :])
                if _LSM_SEGMENT in f"/{key}":
                    raise InvalidInputError(
                        f"physical address {address!r} is inside a repository's own files"
                    )
                if key.startswith(layout.DATA):
                    return key, AddressType.RELATIVE
                return address, AddressType.FULL
            reach = self.allowed if granted else self.own
            if not any(address.startswith(p) for p in reach):
                raise InvalidInputError(
                    f"physical address {address!r} is outside the repository's storage "
                    f"namespace {self.base!r} (allow other places with the repository "
                    f"metadata {ALLOWED_EXTERNAL_PREFIXES_KEY!r})"
                )
            loc = self._external(address)
            if _LSM_SEGMENT in f"/{loc.key}":
                raise InvalidInputError(
                    f"physical address {address!r} is inside a repository's own files"
                )
            return address, AddressType.FULL
        except InvalidNameError as e:
            raise InvalidInputError(f"physical address {address!r}: {e}") from None
