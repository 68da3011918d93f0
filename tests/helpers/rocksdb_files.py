"""SST files written by RocksDB itself (rocksdict's SstFileWriter) with chosen table
settings, for reader tests of settings our writer does not use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import rocksdict

from lsmstore.graveler.record import Record
from lsmstore.graveler.value import encode_value

_TABLE_SETTERS = {
    "restart_interval": "set_block_restart_interval",
    "index_restart_interval": "set_index_block_restart_interval",
    "index_type": "set_index_type",
    "data_block_index": "set_data_block_index_type",
    "metadata_block_size": "set_metadata_block_size",
    "partition_filters": "set_partition_filters",
}


def rocksdb_sst(records: list[Record], path: Path, **opts: Any) -> bytes:
    """Write ``records`` (tombstones as deletions) with the given settings; the bytes."""
    table = rocksdict.BlockBasedOptions()
    table.set_format_version(opts.get("format_version", 5))
    table.set_block_size(opts.get("block_size", 4096))
    table.set_checksum_type(opts.get("checksum", rocksdict.ChecksumType.xxh3()))
    for name, setter in _TABLE_SETTERS.items():
        if name in opts:
            getattr(table, setter)(opts[name])
    if "bloom_bits" in opts:
        table.set_bloom_filter(opts["bloom_bits"], False)
    options = rocksdict.Options(raw_mode=True)
    options.set_block_based_table_factory(table)
    options.set_compression_type(opts.get("compression", rocksdict.DBCompressionType.snappy()))
    writer = rocksdict.SstFileWriter(options=options)
    writer.open(str(path))
    for rec in records:
        if rec.value is None:
            del writer[rec.key]
        else:
            writer[rec.key] = encode_value(rec.identity, rec.value)
    writer.finish()
    return path.read_bytes()
