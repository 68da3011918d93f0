"""Coverage-guided fuzzing of the SST reader (atheris) for a bounded number of inputs.

The harness (``helpers/fuzz_sst_reader.py``) runs in a child process from a seed corpus
of our own files and RocksDB's in the settings the reader supports; it fails on any
outcome but success or CorruptFileError (UnsupportedFormatError included), on an input
taking over 30 s, and on an allocation beyond its address-space limit.  The run is
deterministic (fixed libFuzzer seed, fixed number of inputs).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import rocksdict
from helpers.crafted_sst import Parts, build
from helpers.rocksdb_files import rocksdb_sst

from lsmstore.graveler.metarange import write_metarange
from lsmstore.graveler.ranges import RangeInfo
from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.sst_writer import RANGE, write_committed_sst, write_sst

HARNESS = Path(__file__).parent / "helpers" / "fuzz_sst_reader.py"
RUNS = 20_000

Z = rocksdict.DBCompressionType
TWO_LEVEL = rocksdict.BlockBasedIndexType.two_level_index_search()


def seed_files(tmp: Path) -> list[bytes]:
    recs = [Record(b"key/%03d" % i, b"id%d" % i, b"v" * (i % 50)) for i in range(60)]
    mixed = [*recs[:30], tombstone(b"key/999")]
    rocks = [
        {"format_version": 6, "compression": Z.zstd()},
        {"compression": Z.lz4(), "restart_interval": 3},
        {"index_type": TWO_LEVEL, "metadata_block_size": 64, "block_size": 128},
        {"format_version": 2, "checksum": rocksdict.ChecksumType.crc32c(), "block_size": 256},
        {"format_version": 3, "index_restart_interval": 4, "block_size": 128},
    ]
    ranges = [RangeInfo(f"{i:064x}", b"k%da" % i, b"k%dz" % i, i + 1, 50) for i in range(5)]
    return [
        write_metarange(ranges)[1],
        write_committed_sst(recs, RANGE),
        write_sst(mixed),
        build(Parts()),
        build(Parts(two_level=True)),
        *(rocksdb_sst(mixed, tmp / f"r{i}.sst", **o) for i, o in enumerate(rocks)),
    ]


def test_fuzz_sst_reader(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, data in enumerate(seed_files(tmp_path)):
        # the first byte picks checksummed (even) or unchecked (odd) reading
        (corpus / f"seed-{i}-checked").write_bytes(b"\x00" + data)
        (corpus / f"seed-{i}-unchecked").write_bytes(b"\x01" + data)
    proc = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            f"-runs={RUNS}",
            "-seed=1",
            "-timeout=30",
            "-max_total_time=600",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        cwd=HARNESS.parent.parent,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"#{RUNS}\tDONE" in proc.stderr, proc.stderr[-2000:]
