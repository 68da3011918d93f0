"""Files written by write_sst, read back by RocksDB itself (Debian's sst_dump, RocksDB 7.8).

sst_dump is a required test dependency (``./dev.sh test`` installs ``rocksdb-tools``):
these tests fail rather than skip when it is missing.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from helpers.sst_dump import sst_dump_properties, sst_dump_scan

from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import METARANGE, RANGE, write_committed_sst, write_sst
from lsmstore.graveler.value import encode_value


def expected_entries(records: list[Record]) -> list[tuple[bytes, int, int, bytes]]:
    return [
        (r.key, 0, 0, b"") if r.value is None else (r.key, 0, 1, encode_value(r.identity, r.value))
        for r in records
    ]


def random_records(n: int, seed: int) -> list[Record]:
    rng = random.Random(seed)
    keys = sorted({rng.randbytes(rng.randrange(1, 60)) for _ in range(n)})
    out = []
    for key in keys:
        if rng.random() < 0.2:
            out.append(tombstone(key))
        else:
            size = rng.choice([0, 1, 100, 150, 4000, 70_000])
            out.append(Record(key, rng.randbytes(rng.choice([0, 32])), rng.randbytes(size)))
    return out


CASES = {
    "one-record": [Record(b"k", b"", b"")],
    "one-tombstone": [tombstone(b"\x00")],
    "binary-keys": [
        Record(b"\x00", b"i", b"\x00"),
        tombstone(b"\x00\x00"),
        Record(b"\x7f\xff", b"i" * 64, b"v" * 200),
        Record(b"\xff" * 100, b"", b"\xff" * 5000),
    ],
    "many-blocks": random_records(6000, seed=1),
    "mebibyte-value": [Record(b"big", b"id", random.Random(2).randbytes(1 << 20)), tombstone(b"c")],
}


@pytest.mark.parametrize("records", CASES.values(), ids=CASES.keys())
def test_sst_dump_reads_every_entry_we_wrote(tmp_path: Path, records: list[Record]) -> None:
    data = write_sst(records)
    path = tmp_path / "f.sst"
    path.write_bytes(data)
    assert sst_dump_scan(path) == expected_entries(records)
    # and our reader agrees with RocksDB's on the same bytes
    reader = SSTReader(data, str(path))
    assert [(r.key, r.value is None) for r in reader] == [(r.key, r.value is None) for r in records]


# --- committed files (ranges, metaranges): lakeFS's form, read by RocksDB too ----------------

COMMITTED = {k: [r for r in v if r.value is not None] for k, v in CASES.items()}
del COMMITTED["one-tombstone"]


@pytest.mark.parametrize("kind", [RANGE, METARANGE])
@pytest.mark.parametrize("records", COMMITTED.values(), ids=COMMITTED.keys())
def test_sst_dump_reads_committed_files(tmp_path: Path, records: list[Record], kind: str) -> None:
    data = write_committed_sst(records, kind)
    path = tmp_path / "range.sst"
    path.write_bytes(data)
    assert sst_dump_scan(path) == expected_entries(records)
    shown = sst_dump_properties(path)
    # RocksDB shows the user properties lakeFS writes, hex-encoded
    assert f"# type: 0x{kind.encode().hex().upper()}" in shown
    assert f"# min_key: 0x{records[0].key.hex().upper()}" in shown
    assert f"# count: 0x{str(len(records)).encode().hex().upper()}" in shown
