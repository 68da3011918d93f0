"""A size an SST claims is bounded before anything of that size is allocated.

Each case is a hand-built file whose checksums are all valid but one claimed size is
absurd: a compressed block's uncompressed size (zstd, LZ4, Snappy), a block handle
beyond the file, a restart count, a key or value length, a property or index entry.
The reader must raise CorruptFileError.  Each runs in a child process whose address
space is limited (RLIMIT_AS) to what it had after imports plus 512 MiB, so a reader
that tries to allocate what the file claims fails this test (MemoryError, or an abort
from the decompressor) instead of exhausting the machine or killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.crafted_sst import (
    Parts,
    block,
    build,
    data_block,
    entry,
    handle,
    internal,
    varint,
)

from lsmstore.graveler.sst_reader import MAX_BLOCK_SIZE, SSTReader

GiB = 1 << 30

CHILD = textwrap.dedent(
    """
    import resource, sys
    from lsmstore.errors import CorruptFileError
    from lsmstore.graveler.sst_reader import SSTReader

    data = open(sys.argv[1], "rb").read()
    vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize"))
    limit = vm * 1024 + (512 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        reader = SSTReader(data, "crafted.sst", block_cache_size=1)
        for _ in reader:
            pass
        reader.get(b"b")
    except CorruptFileError as e:
        print("CorruptFileError:", e)
    else:
        print("read without error")
    """
)


def _with(**changes: object) -> Callable[[], bytes]:
    def make() -> bytes:
        parts = Parts()
        for name, value in changes.items():
            setattr(parts, name, value)
        return build(parts)

    return make


def _claims(n: int, payload: bytes = b"\x00" * 16) -> bytes:
    return varint(n) + payload


def _huge_entry_length(which: int) -> bytes:
    lengths = [0, 9, 5]
    lengths[which] = 1 << 40
    body = b"".join(varint(n) for n in lengths) + internal(b"b") + b"value"
    return block([body])


def _props_with_huge_value() -> bytes:
    body = entry(b"rocksdb.comparator", b"leveldb.BytewiseComparator")
    huge = (
        varint(0) + varint(len(b"rocksdb.num.entries")) + varint(1 << 40) + b"rocksdb.num.entries"
    )
    return block([body, huge + b"\x03"], [0, len(body)])


def _zstd_frame_with_window(window_log: int) -> bytes:
    """A zstd frame of one raw 100-byte block whose header asks for a 2^window_log window."""
    header = bytes.fromhex("28b52ffd") + bytes((0x00, (window_log - 10) << 3))
    return varint(100) + header + bytes.fromhex("210300") + b"x" * 100


CASES: dict[str, Callable[[], bytes]] = {
    # compressed blocks claiming a huge uncompressed size
    "zstd-data-16GiB": _with(data={1: (_claims(16 * GiB), 7)}),
    "lz4-data-16GiB": _with(data={1: (_claims(16 * GiB), 4)}),
    "lz4hc-data-16GiB": _with(data={1: (_claims(16 * GiB), 5)}),
    "snappy-data-4GiB": _with(data={1: (_claims(4 * GiB - 1), 1)}),
    "snappy-beyond-ratio": _with(data={1: (_claims(1 << 20, b"\x00" * 10), 1)}),
    "lz4-beyond-ratio": _with(data={1: (_claims(1 << 20, b"\x00" * 10), 4)}),
    "zstd-just-over-maximum": _with(data={1: (_claims(MAX_BLOCK_SIZE + 1), 7)}),
    "zstd-under-maximum-but-junk": _with(data={1: (_claims(MAX_BLOCK_SIZE), 7)}),
    "zstd-frame-window-2GiB": _with(data={1: (_zstd_frame_with_window(31), 7)}),
    "zstd-first-block-16GiB": _with(data={0: (_claims(16 * GiB), 7)}),
    "zstd-index-16GiB": _with(index=(_claims(16 * GiB), 7)),
    "zstd-properties-16GiB": _with(properties_block=(_claims(16 * GiB), 7)),
    "zstd-metaindex-16GiB": _with(metaindex=(_claims(16 * GiB), 7)),
    "lz4-partition-16GiB": _with(two_level=True, index=(_claims(16 * GiB), 4)),
    # handles beyond the file
    "data-handle-far-offset": _with(data_handles={1: (1 << 62, 100)}),
    "data-handle-huge-size": _with(data_handles={1: (0, 1 << 40)}),
    "partition-handle-beyond-file": _with(two_level=True, partition_handle=(0, 1 << 40)),
    "footer-metaindex-beyond-file": _with(footer_handles=((1 << 50, 10), (0, 10))),
    "footer-index-huge-size": _with(footer_handles=((0, 10), (0, 1 << 50))),
    # counts and lengths inside blocks
    "restart-count-2^28-1": _with(data={1: (data_block(b"b")[:-4] + b"\xff\xff\xff\x0f", 0)}),
    "key-length-2^40": _with(data={1: (_huge_entry_length(1), 0)}),
    "shared-length-2^40": _with(data={1: (_huge_entry_length(0), 0)}),
    "value-length-2^40": _with(data={1: (_huge_entry_length(2), 0)}),
    "property-length-2^40": _with(properties_block=(_props_with_huge_value(), 0)),
    "index-entry-size-2^40": _with(index=(block([entry(internal(b"c"), handle(0, 1 << 40))]), 0)),
}


def test_crafted_files_are_well_formed_apart_from_the_claim() -> None:
    reader = SSTReader(build(Parts()), "valid.sst")
    assert [r.key for r in reader] == [b"a", b"b", b"c"]
    two_level = SSTReader(build(Parts(two_level=True)), "valid.sst")
    assert [r.key for r in two_level] == [b"a", b"b", b"c"]


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_claimed_sizes_are_bounded_before_allocation(
    tmp_path: Path, make: Callable[[], bytes]
) -> None:
    path = tmp_path / "crafted.sst"
    path.write_bytes(make())
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"reader process died ({proc.returncode}): {proc.stderr[-2000:]}"
    assert proc.stdout.startswith("CorruptFileError: crafted.sst: "), proc.stdout + proc.stderr
