"""SST format: write rate, open time, point lookups (cold / cached blocks), scans.

``python -m bench sst [--mb 5] [--seed 1]`` builds one range of 40-byte keys and ~150-byte
values (32-byte identities) of about ``--mb`` MB and prints a Markdown table of rates.
Each figure is the best of several rounds (the machine may be shared); the load average
at the start is printed with the results.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import write_sst


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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench sst", description=__doc__)
    parser.add_argument("--mb", type=float, default=5.0, help="target file size (MB)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)

    probe = write_sst(make_records(2000, rng))
    n = int(args.mb * 1e6 / (len(probe) / 2000))
    records = make_records(n, rng)
    keys = [r.key for r in records]

    data = b""

    def write() -> None:
        nonlocal data
        data = write_sst(records)

    t_write = best(ROUNDS, write)
    opens = []
    for _ in range(30):
        t0 = time.perf_counter()
        reader = SSTReader(data, "bench.sst")
        opens.append(time.perf_counter() - t0)
    blocks = len(reader._offsets)
    lookups = [keys[rng.randrange(n)] for _ in range(10_000)]

    def gets(r: SSTReader) -> Callable[[], None]:
        def run() -> None:
            get = r.get
            for k in lookups:
                get(k)

        return run

    cold = SSTReader(data, "bench.sst", block_cache_size=1)  # nearly every lookup misses
    t_cold = best(ROUNDS, gets(cold))
    lru = SSTReader(data, "bench.sst")  # default 64-block LRU, random keys: mostly misses
    t_lru = best(ROUNDS, gets(lru))
    warm = SSTReader(data, "bench.sst", block_cache_size=blocks)
    for _ in range(2):  # second touch decodes each block
        for i in range(0, n, 5):
            warm.get(keys[i])
    t_warm = best(ROUNDS, gets(warm))
    absent = [k[:-1] + b"~" for k in lookups]

    def misses() -> None:
        get = warm.get
        for k in absent:
            get(k)

    t_absent = best(ROUNDS, misses)
    t_scan = best(ROUNDS, lambda: sum(1 for _ in SSTReader(data, "bench.sst")))
    starts = [keys[rng.randrange(n)] for _ in range(2000)]

    def pages() -> None:
        r = SSTReader(data, "bench.sst")
        for k in starts:
            it = r.seek(k)
            for _ in zip(range(100), it, strict=False):
                pass

    t_pages = best(ROUNDS, pages)

    load = os.getloadavg()[0]
    now = datetime.now(UTC).strftime("%Y-%m-%d")
    print(
        f"SST benchmark, {now}, {platform.python_implementation()} {platform.python_version()}, "
        f"nproc={os.cpu_count()}, load average {load:.1f} at the end"
    )
    print(
        f"file: {n} records, {len(data) / 1e6:.2f} MB, {blocks} data blocks, "
        f"40-byte keys, ~{sum(len(r.value or b'') for r in records) // n}-byte values"
    )
    print()
    print("| measure | result |")
    print("|---|---|")
    print(f"| write_sst | {n / t_write / 1e3:,.0f} k records/s ({t_write * 1e3:.0f} ms) |")
    print(
        f"| open (parse + verify footer, properties, index; decode first/last block) | "
        f"{statistics.median(opens) * 1e3:.2f} ms median, {min(opens) * 1e3:.2f} ms best |"
    )
    print(
        f"| get, cold (block cache of 1: read, verify, decompress, restart search) | "
        f"{len(lookups) / t_cold / 1e3:,.0f} k/s |"
    )
    print(f"| get, default 64-block cache, random keys | {len(lookups) / t_lru / 1e3:,.0f} k/s |")
    print(f"| get, all blocks decoded in cache | {len(lookups) / t_warm / 1e3:,.0f} k/s |")
    print(f"| get of absent keys, blocks cached | {len(absent) / t_absent / 1e3:,.0f} k/s |")
    print(
        f"| full scan from a fresh open | {n / t_scan / 1e3:,.0f} k records/s "
        f"({t_scan * 1e3:.0f} ms) |"
    )
    print(
        f"| seek + 100 records (listing page), fresh reader | "
        f"{len(starts) / t_pages / 1e3:,.1f} k pages/s |"
    )
    return 0
