"""Records as DataFrame rows and back: object entries, or raw key/identity/value.

``objects`` (the default) reads each record as a lakeFS object entry (``catalog.Entry``,
:mod:`lsmstore.objects.entry`): ``path, physical_address, size, checksum, mtime,
content_type, metadata``, the address a full URI as ``stat_object`` gives it.  ``raw``
reads ``key, identity, value`` as bytes.  Writes take the same columns (extra columns
are ignored): for objects ``path``, ``physical_address``, ``size`` and ``checksum`` are
required, ``mtime`` defaults to the job's start, ``content_type`` to
``application/octet-stream``; for raw ``key`` and ``value`` (bytes or text) and
optionally ``identity`` (default: SHA-256 of the value).  Every field is checked as the
object API checks it (path rules, address inside the namespace or an allowed external
prefix, bounds): a bad row fails its task, and the job stages nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, Literal

from lsmstore.errors import CorruptFileError, InvalidInputError
from lsmstore.graveler.record import Record, default_identity
from lsmstore.objects.addresses import (
    ALLOWED_EXTERNAL_PREFIXES_KEY,
    Namespace,
    parse_allowed_prefixes,
)
from lsmstore.objects.entry import (
    DEFAULT_CONTENT_TYPE,
    ObjectEntry,
    decode_entry,
    encode_value,
)
from lsmstore.objects.model import inline_stats
from lsmstore.objects.rules import (
    check_checksum,
    check_content_type,
    check_metadata,
    check_mtime,
    check_path,
    check_size,
)

Mode = Literal["objects", "raw"]
MODES: tuple[Mode, ...] = ("objects", "raw")

OBJECT_SCHEMA = (
    "path string, physical_address string, size long, checksum string, mtime long, "
    "content_type string, metadata map<string,string>"
)
RAW_SCHEMA = "key binary, identity binary, value binary"

#: Upper bound on a key written by a job (the client's default ``max_key_bytes``).
MAX_KEY_BYTES = 1024
#: Upper bound on a raw value written by a job (the client's ``max_value_bytes``).
MAX_VALUE_BYTES = 1024 * 1024


def check_mode(mode: object) -> Mode:
    if mode == "objects":
        return "objects"
    if mode == "raw":
        return "raw"
    raise InvalidInputError(f"format must be one of {MODES}, not {mode!r}")


def schema(mode: Mode) -> str:
    return OBJECT_SCHEMA if mode == "objects" else RAW_SCHEMA


def namespace_of(store_url: str, storage_namespace: str, metadata: Mapping[str, str]) -> Namespace:
    """A repository's address rules (as :func:`lsmstore.objects.api.namespace`)."""
    scheme = storage_namespace.partition("://")[0].lower()
    allowed = parse_allowed_prefixes(metadata.get(ALLOWED_EXTERNAL_PREFIXES_KEY), scheme)
    return Namespace(store_url, storage_namespace, allowed)


def object_row(rec: Record, ns: Namespace) -> tuple[Any, ...]:
    assert rec.value is not None
    path = rec.key.decode("utf-8", "surrogateescape")
    try:
        e = decode_entry(rec.value, path)
    except CorruptFileError:  # a raw value: an inline object (docs/objects.md)
        s = inline_stats(path, rec.value, rec.identity)
        return (path, s.physical_address, s.size, s.checksum, s.mtime, s.content_type, {})
    return (
        path,
        ns.full_address(e),
        e.size,
        e.etag,
        e.mtime,
        e.content_type or DEFAULT_CONTENT_TYPE,
        dict(e.metadata),
    )


def raw_row(rec: Record) -> tuple[Any, ...]:
    return (rec.key, rec.identity, rec.value)


def row_reader(mode: Mode, ns: Namespace) -> Callable[[Record], tuple[Any, ...]]:
    if mode == "raw":
        return raw_row
    return lambda rec: object_row(rec, ns)


def _field(row: Any, name: str, default: Any = None) -> Any:
    try:
        value = row[name]
    except (KeyError, ValueError, IndexError):
        return default
    return default if value is None else value


def _bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidInputError(f"{what} must be bytes or text, not {type(value).__name__}")


def raw_record(row: Any) -> Record:
    key = _bytes(_field(row, "key"), "key")
    if not 0 < len(key) <= MAX_KEY_BYTES:
        raise InvalidInputError(f"key of {len(key)} bytes: must be 1..{MAX_KEY_BYTES}")
    value = _bytes(_field(row, "value"), f"value of {key!r}")
    if len(value) > MAX_VALUE_BYTES:
        raise InvalidInputError(f"value of {key!r} is {len(value)} bytes, over {MAX_VALUE_BYTES}")
    ident = _field(row, "identity")
    identity = default_identity(value) if ident is None else _bytes(ident, "identity")
    return Record(key, identity, value)


def epoch_seconds(value: Any) -> Any:
    """Seconds since the epoch of a timestamp column (``datetime``), else the value."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp())
    return value


def object_record(row: Any, ns: Namespace, default_mtime: int) -> Record:
    path = _field(row, "path")
    key = check_path(path, MAX_KEY_BYTES)
    address, atype = ns.for_link(_field(row, "physical_address"))
    mtime = _field(row, "mtime")
    entry = ObjectEntry(
        address,
        atype,
        check_size(_field(row, "size")),
        check_checksum(_field(row, "checksum")),
        default_mtime if mtime is None else check_mtime(epoch_seconds(mtime)),
        0,
        check_content_type(_field(row, "content_type")),
        check_metadata(_field(row, "metadata")),
    )
    identity, data = encode_value(entry)
    return Record(key, identity, data)


def record_writer(mode: Mode, ns: Namespace, default_mtime: int) -> Callable[[Any], Record]:
    if mode == "raw":
        return raw_record
    return lambda row: object_record(row, ns, default_mtime)
