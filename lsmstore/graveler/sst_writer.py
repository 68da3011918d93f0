"""Write records as one RocksDB block-based SST (docs/format.md, "SST container").

A put is a SET entry whose value is :func:`~lsmstore.graveler.value.encode_value`;
a tombstone is a DELETION entry with an empty value.  Every entry has sequence
number 0.  Settings: format_version 5, 4 KiB blocks, xxh3 checksums, Snappy, binary
search index -- files Debian's ``sst_dump`` (RocksDB 7.8) and our reader both read.

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

#: RAM-backed directories tried first for the writer's temporary file.
RAM_DIRS = ("/dev/shm",)


def _ram_dir() -> str | None:
    for d in RAM_DIRS:
        if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return d
    return None


_RAM_DIR = _ram_dir()


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
    records = records if isinstance(records, list | tuple) else list(records)
    if _RAM_DIR is not None:
        try:
            return _write_sst(records, _RAM_DIR)
        except InvalidInputError:
            raise
        except Exception:  # OSError, or RocksDB's "IO error" (e.g. /dev/shm is full)
            pass
    return _write_sst(records, None)


def _write_sst(records: Iterable[Record], directory: str | None) -> bytes:
    fd, path = tempfile.mkstemp(prefix="lsmstore-", suffix=".sst", dir=directory)
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
