"""SST format: write rate, open time, point lookups (cold / cached blocks), scans.

``python -m bench sst [--mb 5] [--seed 1]`` builds one range of 40-byte keys and ~150-byte
values (32-byte identities) of about ``--mb`` MB, writes it in both file forms (committed:
format 2 with CRC-32C and lakeFS's properties; staging: format 5 with XXH3) and prints a
Markdown table of rates side by side, then the block checksum rates.
Each figure is the best of several rounds (the machine may be shared); the load average
at the start is printed with the results.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime

from lsmstore.graveler.block_checksum import crc32c_masked, xxh3_rocksdb
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import RANGE, write_committed_sst, write_sst


def make_records(n: int, rng: random.Random) -> list[Record]:
    """Sorted records: 40-byte object-path keys, ~150-byte metadata-like values."""
    out = []
    for i in range(n):
        key = b"tables/events/date=2024-%02d/part-%09d" % (i % 12 + 1, i)
        key = key[:40].ljust(40, b"_")
        value = b'{"etag":"%s","size":%d,"mtime":%d,"class":"STANDARD","owner":"%s",%s}' % (
            rng.randbytes(16).hex().encode(),
            rng.randrange(1 << 30),
            1_700_000_000 + rng.randrange(1 << 24),
            rng.randbytes(8).hex().encode(),
            b'"type":"application/octet-stream"',
        )
        out.append(Record(key, hashlib.sha256(value).digest(), value))
    out.sort(key=lambda r: r.key)
    return out


ROUNDS = 9


def best(rounds: int, fn: Callable[[], object]) -> float:
    """Fastest of ``rounds`` timings of ``fn()``, seconds."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


FORMS: dict[str, Callable[[list[Record]], bytes]] = {
    "committed: format 2, CRC-32C (native), lakeFS properties": lambda records: write_committed_sst(
        records, RANGE
    ),
    "staging (and committed before): format 5, XXH3": write_sst,
}


Timed = tuple[str, Callable[[], object], int, str]  # row, operation, units, unit name


def prepare(
    write: Callable[[list[Record]], bytes], records: list[Record], rng: random.Random
) -> tuple[bytes, int, list[Timed]]:
    """One file form: the file, its data block count, and the operations to time."""
    n = len(records)
    keys = [r.key for r in records]
    data = write(records)
    blocks = len(SSTReader(data, "bench.sst")._offsets)
    lookups = [keys[rng.randrange(n)] for _ in range(10_000)]

    def gets(r: SSTReader, probes: list[bytes]) -> Callable[[], None]:
        def run() -> None:
            get = r.get
            for k in probes:
                get(k)

        return run

    cold = SSTReader(data, "bench.sst", block_cache_size=1)  # nearly every lookup misses
    lru = SSTReader(data, "bench.sst")  # default 64-block LRU, random keys: mostly misses
    warm = SSTReader(data, "bench.sst", block_cache_size=blocks)
    for _ in range(2):  # second touch decodes each block
        for i in range(0, n, 5):
            warm.get(keys[i])
    absent = [k[:-1] + b"~" for k in lookups]
    starts = [keys[rng.randrange(n)] for _ in range(2000)]

    def pages() -> None:
        r = SSTReader(data, "bench.sst")
        for k in starts:
            it = r.seek(k)
            for _ in zip(range(100), it, strict=False):
                pass

    timed: list[Timed] = [
        ("write", lambda: write(records), n, "k records/s"),
        (
            "open (parse + verify footer, properties, index; decode first/last block)",
            lambda: SSTReader(data, "bench.sst"),
            1,
            "ms",
        ),
        (
            "get, cold (block cache of 1: read, verify, decompress, restart search)",
            gets(cold, lookups),
            len(lookups),
            "k/s",
        ),
        ("get, default 64-block cache, random keys", gets(lru, lookups), len(lookups), "k/s"),
        ("get, all blocks decoded in cache", gets(warm, lookups), len(lookups), "k/s"),
        ("get of absent keys, blocks cached", gets(warm, absent), len(absent), "k/s"),
        (
            "full scan from a fresh open",
            lambda: sum(1 for _ in SSTReader(data, "bench.sst")),
            n,
            "k records/s",
        ),
        ("seek + 100 records (listing page), fresh reader", pages, len(starts), "k pages/s"),
    ]
    return data, blocks, timed


def run_interleaved(forms: dict[str, list[Timed]]) -> dict[str, dict[str, str]]:
    """Time every operation of every form, round after round with the forms alternating
    (so a change in the machine's load hits both alike); the best round of each."""
    fastest: dict[str, dict[str, float]] = {name: {} for name in forms}
    for _ in range(ROUNDS):
        for name, timed in forms.items():
            for row, fn, _units, _unit in timed:
                t0 = time.perf_counter()
                fn()
                t = time.perf_counter() - t0
                fastest[name][row] = min(t, fastest[name].get(row, t))
    out: dict[str, dict[str, str]] = {}
    for name, timed in forms.items():
        rows = out[name] = {}
        for row, _fn, units, unit in timed:
            t = fastest[name][row]
            if unit == "ms":
                rows[row] = f"{t * 1e3:.2f} ms"
            else:
                rows[row] = f"{units / t / 1e3:,.0f} {unit} ({t * 1e3:.0f} ms)"
    return out


def checksum_rates(data: bytes) -> dict[str, str]:
    """Block checksum throughput over 4 KiB blocks: native CRC-32C, XXH3, and the
    pure-Python CRC-32C the reader used before."""
    blocks = [data[i : i + 4097] for i in range(0, len(data) - 4097, 4097)]
    out = {}
    for name, fn in (
        ("CRC-32C (google-crc32c)", crc32c_masked),
        ("XXH3 (xxhash)", xxh3_rocksdb),
        ("CRC-32C, pure Python (before)", _pure_python_crc32c),
    ):
        sample = blocks if "pure" not in name else blocks[:50]
        t = best(3, lambda fn=fn, sample=sample: [fn(b) for b in sample])
        out[name] = f"{len(sample) * 4097 / t / 1e6:,.0f} MB/s"
    return out


def _pure_python_crc32c(buf: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in buf:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench sst", description=__doc__)
    parser.add_argument("--mb", type=float, default=5.0, help="target file size (MB)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)

    probe = write_sst(make_records(2000, rng))
    n = int(args.mb * 1e6 / (len(probe) / 2000))
    records = make_records(n, rng)

    forms: dict[str, list[Timed]] = {}
    sizes: dict[str, str] = {}
    data = b""
    for name, write in FORMS.items():
        data, blocks, forms[name] = prepare(write, records, random.Random(args.seed))
        sizes[name] = f"{len(data) / 1e6:.2f} MB, {blocks} data blocks"
    results = run_interleaved(forms)
    for name in FORMS:
        results[name] = {"file": sizes[name], **results[name]}

    load = os.getloadavg()[0]
    now = datetime.now(UTC).strftime("%Y-%m-%d")
    print(
        f"SST benchmark, {now}, {platform.python_implementation()} {platform.python_version()}, "
        f"nproc={os.cpu_count()}, load average {load:.1f} at the end"
    )
    print(
        f"file: {n} records, 40-byte keys, "
        f"~{sum(len(r.value or b'') for r in records) // n}-byte values"
    )
    print()
    names = list(FORMS)
    print("| measure | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for row in results[names[0]]:
        print(f"| {row} | " + " | ".join(results[name][row] for name in names) + " |")
    print()
    print("| block checksum, 4 KiB blocks | rate |")
    print("|---|---|")
    for name, rate in checksum_rates(data).items():
        print(f"| {name} | {rate} |")
    return 0
