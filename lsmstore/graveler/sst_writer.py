"""Write records as one RocksDB block-based SST (docs/format.md, "SST container").

A put is a SET entry whose value is :func:`~lsmstore.graveler.value.encode_value`;
a tombstone is a DELETION entry with an empty value.  Every entry has sequence
number 0.  Settings: format_version 5, 4 KiB blocks, xxh3 checksums, Snappy, binary
search index -- files Debian's ``sst_dump`` (RocksDB 7.8) and our reader both read.

Synchronous and CPU-bound (about a microsecond per record): async callers run it in a
thread (``await asyncio.to_thread(write_sst, records)``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable

from rocksdict import (
    BlockBasedOptions,
    ChecksumType,
    DBCompressionType,
    Options,
    SstFileWriter,
)

from lsmstore.errors import InvalidInputError
from lsmstore.graveler.record import Record
from lsmstore.graveler.value import encode_value

FORMAT_VERSION = 5
BLOCK_SIZE = 4096


def _options() -> Options:
    table = BlockBasedOptions()
    table.set_format_version(FORMAT_VERSION)
    table.set_block_size(BLOCK_SIZE)
    table.set_checksum_type(ChecksumType.xxh3())
    options = Options(raw_mode=True)
    options.set_block_based_table_factory(table)
    options.set_compression_type(DBCompressionType.snappy())
    return options


def write_sst(records: Iterable[Record]) -> bytes:
    """The SST bytes of ``records``.

    Keys must be non-empty and strictly increasing; otherwise, or when there are no
    records (RocksDB cannot write an empty SST), :class:`InvalidInputError` names the
    key at fault.  The temporary file the RocksDB writer needs is always removed.
    """
    fd, path = tempfile.mkstemp(prefix="lsmstore-", suffix=".sst")
    os.close(fd)
    try:
        writer = SstFileWriter(options=_options())
        writer.open(path)
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
                writer[key] = encode_value(identity, value)
            prev = key
        if prev is None:
            raise InvalidInputError("cannot write an SST with no records")
        writer.finish()
        with open(path, "rb") as f:
            return f.read()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
