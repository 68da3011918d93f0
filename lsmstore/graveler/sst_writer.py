"""Write records as one RocksDB block-based SST (docs/format.md, "SST container").

A put is a SET entry whose value is :func:`~lsmstore.graveler.value.encode_value`;
a tombstone is a DELETION entry with an empty value.  Every entry has sequence
number 0.  Two forms, both 4 KiB blocks, Snappy, a binary-search index:

* :func:`write_committed_sst` -- ranges and metaranges, in the form lakeFS's readers
  (Pebble) accept: ``format_version`` 2, CRC-32C checksums, and lakeFS's table
  properties (``type``, ``min_key``, ``max_key``, ``count``, ``estimated_size_bytes``);
* :func:`write_sst` -- staging files (L1/L2), read only by lsmstore: ``format_version``
  5, XXH3 checksums (smaller index blocks; docs/decisions.md says why it stays).

Debian's ``sst_dump`` (RocksDB 7.8) and our reader read both.

Synchronous and CPU-bound (about a microsecond per record): async callers run it in a
thread (``await asyncio.to_thread(write_sst, records)``).

RocksDB's writer needs a file, and fsyncs it when it finishes.  The bytes are read back
at once and the file removed, so it goes to a RAM-backed directory when there is one
(``/dev/shm``: the fsync costs nothing there; on disk it was ~0.8 ms of every flush),
else to the temporary directory -- also when ``/dev/shm`` is full.
"""

from __future__ import annotations

import contextlib
import os
import struct
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from operator import add, lt

from rocksdict import (
    BlockBasedOptions,
    ChecksumType,
    DBCompressionType,
    Options,
    SstFileWriter,
)

from lsmstore.errors import EntryTooLargeError, InvalidInputError
from lsmstore.graveler.block_checksum import CRC32C, crc32c_masked
from lsmstore.graveler.record import Record, columns
from lsmstore.graveler.sst_reader import MAGIC, MAX_BLOCK_SIZE, parse_plain_block
from lsmstore.graveler.value import encode_value, encode_values
from lsmstore.graveler.varint import encode_uvarint

FORMAT_VERSION = 5  # staging files
COMMITTED_FORMAT_VERSION = 2  # the only RocksDB format_version lakeFS's readers accept
BLOCK_SIZE = 4096

#: lakeFS's ``type`` table property of a range and of a metarange.
RANGE = "ranges"
METARANGE = "metaranges"

#: The largest entry (key and encoded value) written: one entry with up to a block's
#: worth of others before it must still fit the reader's MAX_BLOCK_SIZE.
MAX_ENTRY_BYTES = MAX_BLOCK_SIZE - (1 << 16)

#: Per-record overhead of the estimated size (as ``ranges.RECORD_OVERHEAD``).
_RECORD_OVERHEAD = 16
#: What an entry's two value length headers (varints of up to 10 bytes each) can add
#: beyond that overhead: an entry is at most its record's estimated size plus this.
_HEADERS_OVER_OVERHEAD = 2 * 10 - _RECORD_OVERHEAD

#: RAM-backed directories tried first for the writer's temporary file.
RAM_DIRS = ("/dev/shm",)


def _ram_dir() -> str | None:
    for d in RAM_DIRS:
        if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return d
    return None


_RAM_DIR = _ram_dir()


def _options(format_version: int, checksum: ChecksumType) -> Options:
    table = BlockBasedOptions()
    table.set_format_version(format_version)
    table.set_block_size(BLOCK_SIZE)
    table.set_checksum_type(checksum)
    options = Options(raw_mode=True)
    options.set_block_based_table_factory(table)
    options.set_compression_type(DBCompressionType.snappy())
    return options


def _staging_options() -> Options:
    return _options(FORMAT_VERSION, ChecksumType.xxh3())


def _committed_options() -> Options:
    return _options(COMMITTED_FORMAT_VERSION, ChecksumType.crc32c())


def write_sst(records: Iterable[Record]) -> bytes:
    """The SST bytes of ``records`` in the staging form.

    Keys must be non-empty and strictly increasing; otherwise, or when there are no
    records (RocksDB cannot write an empty SST), :class:`InvalidInputError` names the
    key at fault; a record over :data:`MAX_ENTRY_BYTES` (the reader's block bound) is
    :class:`EntryTooLargeError`.  The temporary file the RocksDB writer needs is always removed.
    """
    return _write(records, _staging_options)


def write_committed_sst(records: Sequence[Record], kind: str) -> bytes:
    """The SST bytes of a range (``kind`` :data:`RANGE`) or metarange (:data:`METARANGE`)
    of ``records``, in the form lakeFS reads, with lakeFS's table properties.

    As :func:`write_sst`; tombstones are refused too (:class:`InvalidInputError`).
    """
    return write_committed_columns(*columns(records), kind)


def write_committed_columns(
    keys: Sequence[bytes],
    identities: Sequence[bytes],
    values: Sequence[bytes | None],
    kind: str,
    *,
    size: int | None = None,
) -> bytes:
    """:func:`write_committed_sst` of records given as columns (one per field, in key
    order).  The records are checked, sized and value-encoded a column at a time (C
    loops: this is per-record work of every commit); a column that fails a check is
    handed to the record-at-a-time writer, which names the record at fault.

    ``size``: the records' estimated size (the sum of their ``ranges.record_size``),
    passed by a caller that has it and whose records are already checked -- non-empty,
    strictly increasing keys, no tombstone (a :class:`~lsmstore.graveler.ranges.
    RangeWriter`'s cut): then the columns are neither summed nor checked again."""
    if kind not in (RANGE, METARANGE):
        raise InvalidInputError(f"unknown committed file kind {kind!r}")
    if not keys:
        raise InvalidInputError("cannot write an SST with no records")
    if len(identities) != len(keys) or len(values) != len(keys):
        raise InvalidInputError(
            f"columns of {len(keys)} keys, {len(identities)} identities, {len(values)} values"
        )
    checked = size is not None
    if size is None:
        try:
            value_bytes = sum(map(len, values))  # type: ignore[arg-type]  # None: TypeError
        except TypeError:
            key = keys[[v is None for v in values].index(True)]
            raise InvalidInputError(f"tombstone for key {key!r} in a committed file") from None
        size = sum(map(len, keys)) + sum(map(len, identities)) + value_bytes
        size += _RECORD_OVERHEAD * len(keys)
    encoded = encode_values(identities, values)  # type: ignore[arg-type]  # no tombstones
    if (
        not checked and (not min(map(len, keys)) or not all(map(lt, keys, islice(keys, 1, None))))
    ) or (
        # an entry (key and encoded value) is at most its record's size plus two length
        # headers' worth of bytes beyond the overhead: only a big range can hold one
        # over the bound, so only a big range's entries are measured
        size + _HEADERS_OVER_OVERHEAD > MAX_ENTRY_BYTES
        and max(map(add, map(len, keys), map(len, encoded))) > MAX_ENTRY_BYTES
    ):  # the record-at-a-time writer raises the error naming the record
        _write(list(map(Record, keys, identities, values)), _committed_options)
        raise AssertionError("unreachable: the records failed a check")  # pragma: no cover
    data = _write_checked(keys, encoded, _committed_options)
    return add_user_properties(
        data,
        {
            b"type": kind.encode(),
            b"min_key": keys[0],
            b"max_key": keys[-1],
            b"count": b"%d" % len(keys),
            b"estimated_size_bytes": b"%d" % size,
        },
    )


def write_sst_columns(keys: Sequence[bytes], encoded: Sequence[bytes | None]) -> bytes:
    """:func:`write_sst` of entries given as columns, in key order: the keys and their
    encoded values (:func:`~lsmstore.graveler.value.encode_value`; None for a
    tombstone), checked a column at a time, with the same errors."""
    if not keys:
        raise InvalidInputError("cannot write an SST with no records")
    if len(encoded) != len(keys):
        raise InvalidInputError(f"columns of {len(keys)} keys and {len(encoded)} values")
    if not min(map(len, keys)):
        raise InvalidInputError("SST keys must be non-empty")
    ordered = list(map(lt, keys, islice(keys, 1, None)))
    if not all(ordered):
        i = ordered.index(False)
        raise InvalidInputError(
            f"SST keys must be strictly increasing: {keys[i + 1]!r} follows {keys[i]!r}"
        )
    live = encoded if None not in encoded else [e for e in encoded if e is not None]
    if live and max(map(len, keys)) + max(map(len, live)) > MAX_ENTRY_BYTES:  # type: ignore[arg-type]
        for key, value in zip(keys, encoded, strict=True):
            if value is not None and len(key) + len(value) > MAX_ENTRY_BYTES:
                raise EntryTooLargeError(
                    f"record {key!r} of {len(key) + len(value)} bytes exceeds the "
                    f"{MAX_ENTRY_BYTES} an SST entry may hold"
                )
    return _write_checked(keys, encoded, _staging_options)


def _write_checked(
    keys: Sequence[bytes], encoded: Sequence[bytes | None], options: Callable[[], Options]
) -> bytes:
    """SST bytes of checked entries (non-empty, strictly increasing keys; encoded values
    within bounds; None: a tombstone)."""

    def feed(writer: SstFileWriter) -> None:
        if None not in encoded:
            deque(map(writer.__setitem__, keys, encoded), maxlen=0)
            return
        for key, value in zip(keys, encoded, strict=True):
            if value is None:
                del writer[key]
            else:
                writer[key] = value

    return _ram_first(lambda directory: _write_file(feed, directory, options))


def _write(records: Iterable[Record], options: Callable[[], Options]) -> bytes:
    records = records if isinstance(records, list | tuple) else list(records)
    return _ram_first(lambda directory: _write_sst(records, directory, options))


def _ram_first(write: Callable[[str | None], bytes]) -> bytes:
    """``write(directory)`` in the RAM-backed directory, else in the temporary one."""
    if _RAM_DIR is not None:
        try:
            return write(_RAM_DIR)
        except InvalidInputError:
            raise
        except Exception:  # OSError, or RocksDB's "IO error" (e.g. /dev/shm is full)
            pass
    return write(None)


def _write_sst(
    records: Iterable[Record],
    directory: str | None,
    options: Callable[[], Options] = _staging_options,
) -> bytes:
    def feed(writer: SstFileWriter) -> None:
        prev: bytes | None = None
        for key, identity, value in records:
            if not key:
                raise InvalidInputError("SST keys must be non-empty")
            if prev is not None and key <= prev:
                raise InvalidInputError(
                    f"SST keys must be strictly increasing: {key!r} follows {prev!r}"
                )
            if value is None:
                del writer[key]
            else:
                encoded = encode_value(identity, value)
                if len(key) + len(encoded) > MAX_ENTRY_BYTES:
                    raise EntryTooLargeError(
                        f"record {key!r} of {len(key) + len(encoded)} bytes exceeds the "
                        f"{MAX_ENTRY_BYTES} an SST entry may hold"
                    )
                writer[key] = encoded
            prev = key
        if prev is None:
            raise InvalidInputError("cannot write an SST with no records")

    return _write_file(feed, directory, options)


def _write_file(
    feed: Callable[[SstFileWriter], None], directory: str | None, options: Callable[[], Options]
) -> bytes:
    """The bytes of the SST ``feed`` puts its entries into (through a temporary file in
    ``directory``, removed in any case)."""
    fd, path = tempfile.mkstemp(prefix="lsmstore-", suffix=".sst", dir=directory)
    os.close(fd)
    try:
        writer = SstFileWriter(options=options())
        writer.open(path)
        feed(writer)
        writer.finish()
        with open(path, "rb") as f:
            return f.read()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# --- user table properties ------------------------------------------------------------
#
# RocksDB's SstFileWriter (through rocksdict) takes no table property collector, so the
# properties are added to its output: the properties block is the last block before
# the metaindex, and is replaced by one with the user properties merged in; the
# metaindex (its new size) and the footer (the metaindex's new handle) follow it.
# Nothing else moves, so every other block and handle stays valid.

_FOOTER_SIZE = 53
_TRAILER_SIZE = 5
_PROPERTIES = b"rocksdb.properties"


def _plain_block(entries: Sequence[tuple[bytes, bytes]]) -> bytes:
    """An uncompressed block of ``entries`` (sorted), every entry a restart point."""
    out = bytearray()
    restarts = []
    for key, value in entries:
        restarts.append(len(out))
        out += b"\x00" + encode_uvarint(len(key)) + encode_uvarint(len(value)) + key + value
    out += struct.pack(f"<{len(restarts)}I", *restarts)
    out += struct.pack("<I", len(restarts))
    return bytes(out)


def _with_trailer(block: bytes) -> bytes:
    body = block + b"\x00"  # compression type: none
    return body + struct.pack("<I", crc32c_masked(body))


def add_user_properties(data: bytes, props: Mapping[bytes, bytes]) -> bytes:
    """``data`` (a ``format_version`` 2 CRC-32C SST as RocksDB writes it) with ``props``
    added to its properties block.  Names must not be RocksDB's (``rocksdb.``) or
    already present."""
    footer = len(data) - _FOOTER_SIZE
    if (
        footer < 0
        or struct.unpack_from("<Q", data, len(data) - 8)[0] != MAGIC
        or struct.unpack_from("<I", data, len(data) - 12)[0] != COMMITTED_FORMAT_VERSION
        or data[footer] != CRC32C
    ):
        raise ValueError("not a format_version 2 CRC-32C table")
    p = footer + 1
    meta_offset, p = _get_varint(data, p)
    meta_size, p = _get_varint(data, p)
    index_offset, p = _get_varint(data, p)
    index_size, p = _get_varint(data, p)
    meta = parse_plain_block(data[meta_offset : meta_offset + meta_size])
    handles = dict(meta)
    props_offset, q = _get_varint(handles[_PROPERTIES], 0)
    props_size, _ = _get_varint(handles[_PROPERTIES], q)
    if props_offset + props_size + _TRAILER_SIZE != meta_offset:
        raise ValueError("the properties block does not immediately precede the metaindex")
    if data[props_offset + props_size] != 0:
        raise ValueError("compressed properties block")
    entries = dict(parse_plain_block(data[props_offset : props_offset + props_size]))
    for name, value in props.items():
        if name.startswith(b"rocksdb.") or name in entries:
            raise ValueError(f"property {name!r} is taken")
        entries[name] = value
    new_props = _plain_block(sorted(entries.items()))
    handles[_PROPERTIES] = encode_uvarint(props_offset) + encode_uvarint(len(new_props))
    new_meta = _plain_block(sorted(handles.items()))
    new_meta_offset = props_offset + len(new_props) + _TRAILER_SIZE
    handles_part = (
        encode_uvarint(new_meta_offset)
        + encode_uvarint(len(new_meta))
        + encode_uvarint(index_offset)
        + encode_uvarint(index_size)
    )
    new_footer = (
        bytes((CRC32C,))
        + handles_part.ljust(40, b"\x00")
        + struct.pack("<IQ", COMMITTED_FORMAT_VERSION, MAGIC)
    )
    head = memoryview(data)[:props_offset]  # joined without an intermediate copy
    return b"".join((head, _with_trailer(new_props), _with_trailer(new_meta), new_footer))


def _get_varint(buf: bytes, p: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[p]
        p += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, p
        shift += 7
