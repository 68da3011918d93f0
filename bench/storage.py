"""Object stores: put/get latency and throughput of LocalStore and S3Store (moto).

``python -m bench storage [--n 200]`` prints a Markdown table: for each store, the p50
of ``n`` sequential CREATE puts and gets of 64 KiB, and the rate of ``n`` puts and gets
with 16 in flight.  LocalStore writes under a temp dir (fsync of file and directory on
every put); S3Store talks to moto's threaded server on loopback over real HTTP.

``python -m bench storage --beside-large [--rounds 4] [--seconds 4]``: the tail of a
flush's upload while a compaction writes, on LocalStore alone.  One task puts an L1
file's pair (a 200 KiB SST and a 4 KiB sidecar, in parallel) every 10 ms while another
puts 8 MiB objects (L2 outputs) back to back; each round runs once with large puts'
incremental write-back off (``SYNC_BYTES = 0``) and once on (1 MiB pieces), in
alternation.  Prints the pair's p50 / p99 / max and the large puts' MB/s.

``python -m bench storage --group-sync [--seconds 4] [--neighbour-mib-s 64]``: the two
ways LocalStore makes puts durable (``sync="file"``: an fsync per file, a shared one per
directory; ``"filesystem"``: one shared syncfs per group), each alone and beside a
*neighbour*: a thread of this process rewriting a 256 MiB file on the same filesystem
at ``--neighbour-mib-s`` MiB/s without ever syncing it (another program's dirty data,
which a syncfs writes back too).  Per row: 1 KiB fresh puts (an upload's data) from 64
tasks and 4 KiB CREATE puts (temp file, link) from 16 tasks, each for ``--seconds``:
puts/s, p50 / p99 ms, and this process's user + system CPU per put (a figure that a
shared machine's load disturbs less).  Then, per mode, the latency of one 1 KiB fresh
put right after 256 MiB of unrelated data was written to the same filesystem and left
unsynced (the worst case of a syncfs; median of 3).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvloop

from lsmstore.storage import local
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.local import LocalStore
from lsmstore.storage.s3 import S3Store
from lsmstore.testing.servers import moto_server


async def measure(store: ObjectStore, n: int, size: int) -> list[float]:
    data = os.urandom(size)
    lat_put, lat_get = [], []
    for i in range(n):
        t = time.perf_counter()
        await store.put(f"seq/{i}", data)
        lat_put.append(time.perf_counter() - t)
    for i in range(n):
        t = time.perf_counter()
        await store.get(f"seq/{i}")
        lat_get.append(time.perf_counter() - t)
    limit = asyncio.Semaphore(16)

    async def put(i: int) -> None:
        async with limit:
            await store.put(f"par/{i}", data)

    async def get(i: int) -> None:
        async with limit:
            await store.get(f"par/{i}")

    t = time.perf_counter()
    await asyncio.gather(*(put(i) for i in range(n)))
    put_rate = n / (time.perf_counter() - t)
    t = time.perf_counter()
    await asyncio.gather(*(get(i) for i in range(n)))
    get_rate = n / (time.perf_counter() - t)
    return [statistics.median(lat_put), statistics.median(lat_get), put_rate, get_rate]


async def amain(n: int) -> None:
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with LocalStore(Path(tmp)) as local:
            rows["LocalStore"] = await measure(local, n, 64 << 10)
    with moto_server() as moto:
        async with S3Store("bench", endpoint_url=moto.endpoint) as s3:
            client = await s3._connect()
            await client.create_bucket(Bucket="bench")
            rows["S3Store (moto)"] = await measure(s3, n, 64 << 10)
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, nproc={os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.1f}, n={n}, 64 KiB objects\n"
    )
    print("| store | put p50 | get p50 | puts/s, 16 in flight | gets/s, 16 in flight |")
    print("|---|---|---|---|---|")
    for name, (put50, get50, puts, gets) in rows.items():
        print(
            f"| {name} | {put50 * 1e3:.2f} ms | {get50 * 1e3:.2f} ms | {puts:,.0f} | {gets:,.0f} |"
        )


async def beside_large(store: LocalStore, seconds: float, tag: str) -> list[float]:
    """Pair latencies (s) of small puts every 10 ms while 8 MiB puts run; returns
    [p50, p99, max, large MB/s]."""
    sst, meta, big = os.urandom(200 << 10), os.urandom(4 << 10), os.urandom(8 << 20)
    stop = asyncio.Event()
    large = 0

    async def compaction() -> None:
        nonlocal large
        while not stop.is_set() and large < 10_000:
            await store.put(f"{tag}/L2/{large}", big)
            large += 1

    pairs: list[float] = []
    task = asyncio.create_task(compaction())
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and len(pairs) < 100_000:
        t = time.perf_counter()
        i = len(pairs)
        await asyncio.gather(
            store.put(f"{tag}/L1/{i}.sst", sst), store.put(f"{tag}/L1/{i}.m", meta)
        )
        pairs.append(time.perf_counter() - t)
        await asyncio.sleep(max(0.0, 0.01 - (time.perf_counter() - t)))
    stop.set()
    await task
    elapsed = time.perf_counter() - start
    pairs.sort()
    return [
        pairs[len(pairs) // 2],
        pairs[min(len(pairs) - 1, int(0.99 * len(pairs)))],
        pairs[-1],
        large * 8 * 1.048576 / elapsed,
    ]


async def amain_beside_large(rounds: int, seconds: float) -> None:
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, nproc={os.cpu_count()}, load average "
        f"{os.getloadavg()[0]:.1f}; L1 pair every 10 ms beside back-to-back 8 MiB puts\n"
    )
    print("| round | large puts' write-back | pair p50 / p99 / max ms | 8 MiB puts MB/s | load |")
    print("|---|---|---|---|---|")
    saved = local.SYNC_BYTES
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with LocalStore(Path(tmp)) as store:
                for r in range(1, rounds + 1):
                    for piece in (0, 1 << 20):
                        local.SYNC_BYTES = piece
                        p50, p99, top, mbs = await beside_large(store, seconds, f"r{r}-{piece}")
                        label = "1 MiB pieces" if piece else "off (one fsync)"
                        print(
                            f"| {r} | {label} | {p50 * 1e3:.1f} / {p99 * 1e3:.1f} / "
                            f"{top * 1e3:.1f} | {mbs:.0f} | {os.getloadavg()[0]:.1f} |"
                        )
    finally:
        local.SYNC_BYTES = saved


class _Neighbour:
    """A thread rewriting a 256 MiB file under ``directory`` at ``mib_s`` MiB/s, never
    syncing it, until stopped (bounded: at most ``seconds`` x 4 of work)."""

    def __init__(self, directory: Path, mib_s: float, seconds: float) -> None:
        self.path, self.mib_s, self.seconds = directory / "neighbour", mib_s, seconds
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        chunk, size = os.urandom(1 << 20), 256
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            start = time.monotonic()
            n = 0
            while not self.stop.is_set() and time.monotonic() - start < 4 * self.seconds:
                os.pwrite(fd, chunk, (n % size) << 20)
                n += 1
                self.stop.wait(max(0.0, start + n / self.mib_s - time.monotonic()))
        finally:
            os.close(fd)

    def __enter__(self) -> _Neighbour:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


async def _closed_loop(
    seconds: float, tasks: int, op: Any
) -> tuple[float, float, float, float, float]:
    """``op(i)`` from ``tasks`` tasks for ``seconds``: (ops/s, p50 s, p99 s, and this
    process's user and system CPU seconds per op -- the neighbour's included)."""
    lat: list[float] = []
    stop = time.perf_counter() + seconds
    counter = itertools.count()

    async def run() -> None:
        while time.perf_counter() < stop and len(lat) < 1_000_000:
            t = time.perf_counter()
            await op(next(counter))
            lat.append(time.perf_counter() - t)

    t0, cpu0 = time.perf_counter(), os.times()
    await asyncio.gather(*(run() for _ in range(tasks)))
    cpu1, n = os.times(), len(lat)
    lat.sort()
    return (
        n / (time.perf_counter() - t0),
        lat[n // 2],
        lat[int(0.99 * n)],
        (cpu1.user - cpu0.user) / n,
        (cpu1.system - cpu0.system) / n,
    )


async def amain_group_sync(seconds: float, neighbour_mib_s: float) -> None:
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, nproc={os.cpu_count()}, load average "
        f"{os.getloadavg()[0]:.1f}; neighbour: {neighbour_mib_s:g} MiB/s never synced\n"
    )
    print("| sync | neighbour | 1 KiB put_fresh x64: /s, p50 / p99 ms, CPU user+sys µs "
          "| 4 KiB put x16: /s, p50 / p99 ms, CPU user+sys µs | load |")  # fmt: skip
    print("|---|---|---|---|---|")
    small, four = os.urandom(1024), os.urandom(4096)
    for neighbour in (False, True):
        for mode in ("file", "filesystem"):
            with tempfile.TemporaryDirectory() as tmp:
                tag = f"{mode}-{neighbour}"

                async def fresh(i: int, store: LocalStore, tag: str = tag) -> None:
                    await (await store.put_fresh(f"{tag}/data/{i}", small))

                async def put(i: int, store: LocalStore, tag: str = tag) -> None:
                    await store.put(f"{tag}/ranges/{i}", four)

                async with LocalStore(Path(tmp), sync=mode) as store:
                    await store.put("warm", b"")
                    context = (
                        _Neighbour(Path(tmp), neighbour_mib_s, seconds)
                        if neighbour
                        else contextlib.nullcontext()
                    )
                    with context:
                        if neighbour:
                            await asyncio.sleep(1.0)  # let dirty pages build up
                        a = await _closed_loop(seconds, 64, lambda i: fresh(i, store))
                        b = await _closed_loop(seconds, 16, lambda i: put(i, store))
                print(
                    f"| {mode} | {'yes' if neighbour else 'no'} "
                    f"| {a[0]:,.0f}, {a[1] * 1e3:.1f} / {a[2] * 1e3:.1f}, "
                    f"{a[3] * 1e6:.0f}+{a[4] * 1e6:.0f} "
                    f"| {b[0]:,.0f}, {b[1] * 1e3:.1f} / {b[2] * 1e3:.1f}, "
                    f"{b[3] * 1e6:.0f}+{b[4] * 1e6:.0f} "
                    f"| {os.getloadavg()[0]:.1f} |",
                    flush=True,
                )


async def _one_put_beside_dirty(mode: str, dirty_mib: int) -> float:
    """Seconds of one 1 KiB fresh put right after ``dirty_mib`` MiB were written (not
    synced) beside it, on the same filesystem."""
    with tempfile.TemporaryDirectory() as tmp:
        async with LocalStore(Path(tmp), sync=mode) as store:
            await store.put("warm", b"")

            def dirty() -> None:
                chunk = os.urandom(1 << 20)
                fd = os.open(Path(tmp) / "neighbour", os.O_WRONLY | os.O_CREAT, 0o600)
                try:
                    for _ in range(dirty_mib):
                        os.write(fd, chunk)
                finally:
                    os.close(fd)

            await asyncio.to_thread(dirty)
            t = time.perf_counter()
            await (await store.put_fresh("data/one", b"x" * 1024))
            return time.perf_counter() - t


async def amain_beside_dirty(dirty_mib: int) -> None:
    print(f"\none 1 KiB fresh put right after {dirty_mib} MiB written unsynced beside it:\n")
    print("| sync | put ms (median of 3) |")
    print("|---|---|")
    for mode in ("file", "filesystem"):
        times = sorted([await _one_put_beside_dirty(mode, dirty_mib) for _ in range(3)])
        print(f"| {mode} | {times[1] * 1e3:.1f} |", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench storage")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--beside-large", action="store_true")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--group-sync", action="store_true")
    parser.add_argument("--neighbour-mib-s", type=float, default=64.0)
    args = parser.parse_args(argv)
    if args.group_sync:
        uvloop.run(amain_group_sync(args.seconds, args.neighbour_mib_s))
        uvloop.run(amain_beside_dirty(256))
    elif args.beside_large:
        uvloop.run(amain_beside_large(args.rounds, args.seconds))
    else:
        uvloop.run(amain(args.n))
    return 0
