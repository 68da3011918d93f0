"""Records as Arrow record batches and back: object entries, or raw key/identity/value.

The data source moves rows between Spark and Python as Arrow record batches, a column
at a time (no Python object per row on Spark's side).  ``objects`` (the default) reads
each record as a lakeFS object entry (``catalog.Entry``, :mod:`lsmstore.objects.entry`):
``path, physical_address, size, checksum, mtime, content_type, metadata``, the address a
full URI as ``stat_object`` gives it.  ``raw`` reads ``key, identity, value`` as bytes.
Writes take the same columns (extra columns are ignored): for objects ``path``,
``physical_address``, ``size`` and ``checksum`` are required, ``mtime`` defaults to the
job's start, ``content_type`` to ``application/octet-stream``; for raw ``key`` and
``value`` (bytes or text) and optionally ``identity`` (default: SHA-256 of the value).
Every field is checked as the object API checks it (path rules, address inside the
namespace or an allowed external prefix, bounds): a bad row fails its task, and the job
stages nothing.  Entries without metadata are encoded by the objects layer's
:class:`~lsmstore.objects.entry.BatchEncoder` (one per modification time, address type
and content type), the same bytes as one message per entry.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmstore import layout
from lsmstore.errors import CorruptFileError, InvalidInputError
from lsmstore.graveler.record import Record, RecordTuple, columns, default_identity
from lsmstore.objects.addresses import (
    ALLOWED_EXTERNAL_PREFIXES_KEY,
    MAX_ADDRESS_BYTES,
    PLAIN_KEY,
    Namespace,
    parse_allowed_prefixes,
)
from lsmstore.objects.entry import (
    DEFAULT_CONTENT_TYPE,
    AddressType,
    BatchEncoder,
    ObjectEntry,
    encode_value,
    is_relative,
    parse_entry,
)
from lsmstore.objects.model import inline_stats
from lsmstore.objects.rules import (
    MAX_FIELD_BYTES,
    MAX_MTIME,
    MAX_PATH_BYTES,
    MAX_SIZE,
    check_checksum,
    check_content_type,
    check_metadata,
    check_mtime,
    check_path,
    check_size,
)
from lsmstore.spark.entry_columns import decode_entries

Mode = Literal["objects", "raw"]
MODES: tuple[Mode, ...] = ("objects", "raw")

OBJECT_SCHEMA = (
    "path string, physical_address string, size long, checksum string, mtime long, "
    "content_type string, metadata map<string,string>"
)
RAW_SCHEMA = "key binary, identity binary, value binary"
OBJECT_ARROW = pa.schema(
    [
        ("path", pa.string()),
        ("physical_address", pa.string()),
        ("size", pa.int64()),
        ("checksum", pa.string()),
        ("mtime", pa.int64()),
        ("content_type", pa.string()),
        ("metadata", pa.map_(pa.string(), pa.string())),
    ]
)
RAW_ARROW = pa.schema([("key", pa.binary()), ("identity", pa.binary()), ("value", pa.binary())])

#: Upper bound on a key written by a job (the client's default ``max_key_bytes``).
MAX_KEY_BYTES = 1024
#: Upper bound on a raw value written by a job (the client's ``max_value_bytes``).
MAX_VALUE_BYTES = 1024 * 1024
#: Rows per record batch a read yields.
BATCH_ROWS = 8192
#: Entry encoders kept per task (one per modification time, address type, content type).
MAX_ENCODERS = 4096


def check_mode(mode: object) -> Mode:
    if mode == "objects":
        return "objects"
    if mode == "raw":
        return "raw"
    raise InvalidInputError(f"format must be one of {MODES}, not {mode!r}")


def schema(mode: Mode) -> str:
    return OBJECT_SCHEMA if mode == "objects" else RAW_SCHEMA


def arrow_schema(mode: Mode) -> pa.Schema:
    return OBJECT_ARROW if mode == "objects" else RAW_ARROW


def namespace_of(store_url: str, storage_namespace: str, metadata: Mapping[str, str]) -> Namespace:
    """A repository's address rules (as :func:`lsmstore.objects.api.namespace`)."""
    scheme = storage_namespace.partition("://")[0].lower()
    allowed = parse_allowed_prefixes(metadata.get(ALLOWED_EXTERNAL_PREFIXES_KEY), scheme)
    return Namespace(store_url, storage_namespace, allowed)


# --- reads: records -> batches -------------------------------------------------------------


def object_batch(records: Sequence[RecordTuple], ns: Namespace) -> pa.RecordBatch:
    """Object entries as one batch (:data:`OBJECT_ARROW`): a batch of entries in the
    usual layout decoded a column at a time (:mod:`lsmstore.spark.entry_columns`), any
    other by :func:`parsed_batch`.  Raw keys that no object path names -- not UTF-8, or
    over ``MAX_PATH_BYTES`` -- are left out, as ``list_objects`` leaves them out (a raw
    read shows them); the keys are checked all at once, one by one only when one fails."""
    keys = [r[0] for r in records]
    # joined by a byte no UTF-8 sequence continues with: valid exactly when each is
    if keys and (max(map(len, keys)) > MAX_PATH_BYTES or not _is_utf8(b"\x00".join(keys))):
        records = [r for r in records if len(r[0]) <= MAX_PATH_BYTES and _is_utf8(r[0])]
    fast = _decoded_batch(records, ns)
    return fast if fast is not None else parsed_batch(records, ns)


def _is_utf8(key: bytes) -> bool:
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def parsed_batch(records: Sequence[RecordTuple], ns: Namespace) -> pa.RecordBatch:
    """:func:`object_batch` by the protobuf library, one message per record: reads the
    parsed messages' fields straight into the columns (an :class:`ObjectEntry` per
    record would cost three times the parse)."""
    paths: list[str] = []
    addresses: list[str] = []
    sizes: list[int] = []
    etags: list[str] = []
    mtimes: list[int] = []
    types: list[str] = []
    metadata: list[list[tuple[str, str]]] = []
    base = ns.base
    for key, identity, value in records:
        assert value is not None
        path = key.decode("utf-8", "surrogateescape")
        try:
            m = parse_entry(value, path)
        except CorruptFileError:  # a raw value: an inline object (docs/objects.md)
            s = inline_stats(path, value, identity)
            paths.append(path)
            addresses.append(s.physical_address)
            sizes.append(s.size)
            etags.append(s.checksum)
            mtimes.append(s.mtime)
            types.append(s.content_type)
            metadata.append([])
            continue
        address = m.address
        if is_relative(address, m.address_type):
            address = base + address
        paths.append(path)
        addresses.append(address)
        sizes.append(m.size)
        etags.append(m.e_tag)
        mtimes.append(m.last_modified.seconds)
        types.append(m.content_type or DEFAULT_CONTENT_TYPE)
        md = m.metadata
        metadata.append(sorted(md.items()) if md else [])
    fields = (paths, addresses, sizes, etags, mtimes, types, metadata)
    return pa.RecordBatch.from_arrays(
        [pa.array(c, f.type) for c, f in zip(fields, OBJECT_ARROW, strict=True)],
        schema=OBJECT_ARROW,
    )


def _decoded_batch(records: Sequence[RecordTuple], ns: Namespace) -> pa.RecordBatch | None:
    """:func:`object_batch` by :func:`~lsmstore.spark.entry_columns.decode_entries` (of
    records whose keys are object paths), or None when it does not read the entries."""
    keys, _, values = columns(records)
    if None in values:
        return None
    decoded = decode_entries(values, ns.base)  # type: ignore[arg-type]  # no tombstones
    if decoded is None:
        return None
    paths = pa.array(keys, pa.binary()).cast(pa.string())
    n = len(records)
    metadata = pa.MapArray.from_arrays(
        pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.string()), pa.array([], pa.string())
    )
    return pa.RecordBatch.from_arrays([paths, *decoded, metadata], schema=OBJECT_ARROW)


def raw_batch(records: Sequence[RecordTuple]) -> pa.RecordBatch:
    """Raw records as one batch (:data:`RAW_ARROW`)."""
    return pa.RecordBatch.from_arrays(
        [pa.array(column, pa.binary()) for column in columns(records)], schema=RAW_ARROW
    )


def batch_reader(mode: Mode, ns: Namespace) -> Callable[[Sequence[RecordTuple]], pa.RecordBatch]:
    if mode == "raw":
        return raw_batch
    return lambda records: object_batch(records, ns)


# --- writes: batches -> records ------------------------------------------------------------


def _column(batch: pa.RecordBatch, name: str) -> list[Any]:
    i = batch.schema.get_field_index(name)
    if i < 0:
        return [None] * batch.num_rows
    return batch.column(i).to_pylist()  # type: ignore[no-any-return]


def _bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidInputError(f"{what} must be bytes or text, not {type(value).__name__}")


def raw_records(batch: pa.RecordBatch) -> Iterator[Record]:
    """The records of a batch of ``key, value[, identity]`` rows."""
    for k, v, ident in zip(
        _column(batch, "key"), _column(batch, "value"), _column(batch, "identity"), strict=True
    ):
        key = _bytes(k, "key")
        if not 0 < len(key) <= MAX_KEY_BYTES:
            raise InvalidInputError(f"key of {len(key)} bytes: must be 1..{MAX_KEY_BYTES}")
        value = _bytes(v, f"value of {key!r}")
        if len(value) > MAX_VALUE_BYTES:
            raise InvalidInputError(
                f"value of {key!r} is {len(value)} bytes, over {MAX_VALUE_BYTES}"
            )
        identity = default_identity(value) if ident is None else _bytes(ident, "identity")
        yield Record(key, identity, value)


def epoch_seconds(value: Any) -> Any:
    """Seconds since the epoch of a timestamp column (``datetime``), else the value."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp())
    return value


#: RE2 patterns of :meth:`ObjectRecords.fast_rows`: a field without control characters
#: (``rules._check_field``), and a checksum with nothing to strip either.
_NO_CONTROL = "[^\\x00-\\x1f\\x7f]"
_PLAIN_CHECKSUM = f'^[^\\x00-\\x1f\\x7f "]({_NO_CONTROL}*[^\\x00-\\x1f\\x7f "])?$'
_FIELD = f"^{_NO_CONTROL}+$"
_new_tuple = tuple.__new__


class ObjectRecords:
    """Converts batches of object rows to records (module docstring), keeping the entry
    encoders of one task.

    A batch is checked a column at a time first (:meth:`fast_rows`: Arrow compute
    kernels): the rows that pass are encoded a column at a time too
    (:meth:`BatchEncoder.encode_many` per modification time and content type); every
    other row -- user metadata, an address outside ``<namespace>/data/``, a checksum
    with quotes to strip, any value a check may refuse, a column of an unexpected type
    -- goes through the per-row checks of the object API (:meth:`row_records`), which
    raise the error naming it.  Both paths give the same records
    (``tests/test_spark_rows.py``)."""

    def __init__(self, ns: Namespace, default_mtime: int) -> None:
        self.ns = ns
        self.default_mtime = default_mtime
        self.encoders: dict[tuple[int, int, str], BatchEncoder] = {}
        self._data = f"{ns.base}{layout.DATA}"
        self._plain_rest = "^" + PLAIN_KEY.pattern + "$"
        self._lsm = f"/{layout.PREFIX}/"

    def __call__(self, batch: pa.RecordBatch) -> Iterator[Record]:
        fast = self.fast_rows(batch)
        if fast is None:
            yield from self.row_records(batch)
            return
        slow = pc.invert(fast)
        if pc.any(slow).as_py():
            yield from self.row_records(batch.filter(slow))
            batch = batch.filter(fast)
        yield from self.column_records(batch)

    def _encoder(self, mtime: int, atype: int, ctype: str) -> BatchEncoder:
        encoders = self.encoders
        enc = encoders.get((mtime, atype, ctype))
        if enc is None:
            if len(encoders) >= MAX_ENCODERS:
                encoders.clear()
            enc = encoders[mtime, atype, ctype] = BatchEncoder(mtime, 0, atype, ctype)
        return enc

    def fast_rows(self, batch: pa.RecordBatch) -> pa.Array | None:
        """A boolean mask of the rows the column-wise path takes (None: none of them,
        the batch has a column of a type that path does not take).  A row is taken when
        every check of :meth:`row_records` passes without changing a value: path of
        1..``MAX_KEY_BYTES`` bytes; address under ``<namespace>/data/`` with a plain
        key (no escapes, no dot or empty segment, no ``_lsm`` segment), at most
        ``MAX_ADDRESS_BYTES``; size >= 0; checksum of 1..``MAX_FIELD_BYTES`` bytes
        without control characters and nothing to strip; mtime absent or in range;
        content type absent or like the checksum; no metadata."""
        names = batch.schema.names
        if not {"path", "physical_address", "size", "checksum"} <= set(names):
            return None

        def col(name: str) -> pa.Array | None:
            return batch.column(name) if name in names else None

        path, address, size, checksum = map(
            batch.column, ("path", "physical_address", "size", "checksum")
        )
        mtime, ctype, metadata = col("mtime"), col("content_type"), col("metadata")
        strings = (
            pa.types.is_string(path.type),
            pa.types.is_string(address.type),
            pa.types.is_string(checksum.type),
        )
        if (
            not all(strings)
            or not pa.types.is_signed_integer(size.type)
            or (
                mtime is not None
                and not pa.types.is_signed_integer(mtime.type)
                and not pa.types.is_null(mtime.type)
            )
            or (
                ctype is not None
                and not pa.types.is_string(ctype.type)
                and not pa.types.is_null(ctype.type)
            )
            or (
                metadata is not None
                and not pa.types.is_map(metadata.type)
                and not pa.types.is_null(metadata.type)
            )
        ):
            return None
        key_bytes = pc.binary_length(path)
        rest = pc.utf8_slice_codeunits(address, len(self.ns.base))
        masks = [
            pc.greater(key_bytes, 0),
            pc.less_equal(key_bytes, min(MAX_KEY_BYTES, MAX_PATH_BYTES)),
            pc.starts_with(address, self._data),
            pc.less_equal(pc.binary_length(address), MAX_ADDRESS_BYTES),
            pc.match_substring_regex(rest, self._plain_rest),
            pc.invert(pc.match_substring(rest, self._lsm)),
            pc.greater_equal(size, 0),
            pc.less_equal(size, MAX_SIZE),
            pc.match_substring_regex(checksum, _PLAIN_CHECKSUM),
            pc.less_equal(pc.binary_length(checksum), MAX_FIELD_BYTES),
        ]
        if mtime is not None and not pa.types.is_null(mtime.type):
            masks.append(pc.fill_null(pc.greater_equal(mtime, 0), True))
            masks.append(pc.fill_null(pc.less_equal(mtime, MAX_MTIME), True))
        if ctype is not None and not pa.types.is_null(ctype.type):
            masks.append(pc.fill_null(pc.match_substring_regex(ctype, _FIELD), True))
            masks.append(
                pc.fill_null(pc.less_equal(pc.binary_length(ctype), MAX_FIELD_BYTES), True)
            )
        if metadata is not None and not pa.types.is_null(metadata.type):
            offsets = metadata.offsets  # a map's entries per row (no kernel takes maps)
            empty = pc.equal(pc.subtract(offsets[1:], offsets[:-1]), 0)
            masks.append(pc.or_(metadata.is_null(), empty))
        mask = masks[0]
        for m in masks[1:]:
            mask = pc.and_kleene(mask, m)
        return pc.fill_null(mask, False)  # a null in a required column: the row path

    def column_records(self, batch: pa.RecordBatch) -> Iterator[Record]:
        """The records of rows :meth:`fast_rows` took, encoded a column at a time."""
        n = batch.num_rows
        if not n:
            return
        keys = batch.column("path").cast(pa.binary()).to_pylist()
        base = len(self.ns.base)
        addresses = pc.utf8_slice_codeunits(batch.column("physical_address"), base).to_pylist()
        sizes = batch.column("size").to_pylist()
        etags = batch.column("checksum").to_pylist()
        names = batch.schema.names
        mtimes: list[int] = (
            pc.fill_null(batch.column("mtime"), self.default_mtime).to_pylist()
            if "mtime" in names and not pa.types.is_null(batch.column("mtime").type)
            else [self.default_mtime] * n
        )
        ctypes: list[str] = (
            pc.fill_null(batch.column("content_type"), DEFAULT_CONTENT_TYPE).to_pylist()
            if "content_type" in names and not pa.types.is_null(batch.column("content_type").type)
            else [DEFAULT_CONTENT_TYPE] * n
        )
        relative = int(AddressType.RELATIVE)
        groups: dict[tuple[int, str], list[int]] = {}
        if mtimes.count(mtimes[0]) == n and ctypes.count(ctypes[0]) == n:
            groups[mtimes[0], ctypes[0]] = list(range(n))
        else:
            for i, group in enumerate(zip(mtimes, ctypes, strict=True)):
                groups.setdefault(group, []).append(i)
        for (mtime, ctype), rows in groups.items():
            enc = self._encoder(mtime, relative, ctype)
            if len(rows) == n:
                k, a, s, e = keys, addresses, sizes, etags
            else:
                k, a, s, e = ([c[i] for i in rows] for c in (keys, addresses, sizes, etags))
            identities, data = enc.encode_many(a, s, e)
            yield from map(_new_tuple, repeat(Record), zip(k, identities, data, strict=True))

    def row_records(self, batch: pa.RecordBatch) -> Iterator[Record]:
        """The records of a batch, each row checked and encoded on its own."""
        for_link = self.ns.for_link
        default_mtime = self.default_mtime
        for path, address, size, checksum, mtime, content_type, metadata in zip(
            _column(batch, "path"),
            _column(batch, "physical_address"),
            _column(batch, "size"),
            _column(batch, "checksum"),
            _column(batch, "mtime"),
            _column(batch, "content_type"),
            _column(batch, "metadata"),
            strict=True,
        ):
            key = check_path(path, MAX_KEY_BYTES)
            addr, atype = for_link(address)
            size = check_size(size)
            etag = check_checksum(checksum)
            mtime = default_mtime if mtime is None else check_mtime(epoch_seconds(mtime))
            ctype = check_content_type(content_type)
            if metadata:
                md = check_metadata(dict(metadata) if isinstance(metadata, list) else metadata)
                entry = ObjectEntry(addr, atype, size, etag, mtime, 0, ctype, md)
                identity, data = encode_value(entry)
            else:
                identity, data = self._encoder(mtime, atype, ctype).encode(addr, size, etag)
            yield Record(key, identity, data)


def record_writer(
    mode: Mode, ns: Namespace, default_mtime: int
) -> Callable[[pa.RecordBatch], Iterable[Record]]:
    """A function from one batch of rows to its records."""
    if mode == "raw":
        return raw_records
    return ObjectRecords(ns, default_mtime)
