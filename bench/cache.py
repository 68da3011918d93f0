"""File cache: RAM-hit rate, miss cost, and where parsing in a thread pays off.

``python -m bench cache [--rounds 5]`` prints a Markdown table.  Figures are the best of
``--rounds`` rounds (the machine may be shared); the load average is printed with them.

* RAM hits: ``await cache.get(...)`` and ``cache.peek(...)`` over 10,000 cached objects,
  random keys, on uvloop.
* Misses: ``get_bytes`` of distinct 4 KiB objects from a MemoryStore (RAM tier only, and
  with a disk tier under a temp dir).
* Parsing SSTs (``SSTReader``, the read path's heaviest parse) of several sizes, inline
  and through ``asyncio.to_thread``: the time per parse (as the caller waits for it),
  and the longest stall a 1 ms ticker task sees on the event loop during 8 parses.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import uvloop

from lsmstore.cache import FileCache
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import write_sst
from lsmstore.storage.memory import MemoryStore


def make_sst(mb: float, rng: random.Random) -> bytes:
    n = int(mb * 1e6 / 200)
    records = []
    for i in range(n):
        key = b"tables/events/part-%012d" % i
        value = rng.randbytes(64).hex().encode() + b"x" * 30
        records.append(Record(key, hashlib.sha256(value).digest(), value))
    return write_sst(records)


async def best(rounds: int, run: Callable[[], Awaitable[float]]) -> float:
    return min([await run() for _ in range(rounds)])


async def ram_hits(rounds: int) -> tuple[float, float]:
    store = MemoryStore()
    cache = FileCache()
    keys = [f"_lsm/ranges/{i:064x}" for i in range(10_000)]
    for k in keys:
        await store.put(k, b"v" * 100)
        await cache.get_bytes(store, k)
    order = [random.Random(1).choice(keys) for _ in range(200_000)]

    async def gets() -> float:
        t = time.perf_counter()
        for k in order:
            await cache.get_bytes(store, k)
        return time.perf_counter() - t

    async def peeks() -> float:
        t = time.perf_counter()
        for k in order:
            cache.peek(store, k)
        return time.perf_counter() - t

    return len(order) / await best(rounds, gets), len(order) / await best(rounds, peeks)


async def misses(rounds: int, disk: bool) -> float:
    n = 2000

    async def run() -> float:
        store = MemoryStore()
        with tempfile.TemporaryDirectory() as tmp:
            cache = FileCache(disk_dir=Path(tmp) if disk else None)
            for i in range(n):
                await store.put(f"k{i}", os.urandom(4096))
            t = time.perf_counter()
            for i in range(n):
                await cache.get_bytes(store, f"k{i}")
            await cache.drain()
            return time.perf_counter() - t

    return n / await best(rounds, run)


async def parse_round(data: bytes, threaded: bool) -> tuple[float, float]:
    """(seconds per parse, longest ticker stall in seconds) over 8 parses, one at a time."""
    worst = 0.0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal worst
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - t - 0.001)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    busy = 0.0
    for _ in range(8):
        t = time.perf_counter()
        if threaded:
            await asyncio.to_thread(SSTReader, data, "bench")
        else:
            SSTReader(data, "bench")
        busy += time.perf_counter() - t
        await asyncio.sleep(0.002)  # let the ticker run between parses
    stop.set()
    await tick
    return busy / 8, worst


async def parse_cost(data: bytes, threaded: bool, rounds: int) -> tuple[float, float]:
    results = [await parse_round(data, threaded) for _ in range(rounds)]
    return min(r[0] for r in results), min(r[1] for r in results)


async def amain(rounds: int) -> None:
    hit_rate, peek_rate = await ram_hits(rounds)
    miss_ram = await misses(rounds, disk=False)
    miss_disk = await misses(rounds, disk=True)
    rng = random.Random(1)
    ssts = [make_sst(mb, rng) for mb in (0.25, 1, 4, 8, 16)]
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, nproc={os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.1f}, best of {rounds}\n"
    )
    print("| measure | result |")
    print("|---|---|")
    print(f"| RAM hit, `await get_bytes` | {hit_rate / 1e3:,.0f} k/s |")
    print(f"| RAM hit, `peek` | {peek_rate / 1e3:,.0f} k/s |")
    print(f"| miss, 4 KiB object from MemoryStore, RAM tier only | {miss_ram / 1e3:,.1f} k/s |")
    print(f"| miss, same, disk tier written (incl. drain) | {miss_disk / 1e3:,.1f} k/s |")
    print()
    print("| SSTReader of | inline | loop stall | in a thread | loop stall |")
    print("|---|---|---|---|---|")
    for data in ssts:
        inline, inline_stall = await parse_cost(data, False, rounds)
        thread, thread_stall = await parse_cost(data, True, rounds)
        print(
            f"| {len(data) / 1e6:.2f} MB | {inline * 1e3:.2f} ms | {inline_stall * 1e3:.1f} ms "
            f"| {thread * 1e3:.2f} ms | {thread_stall * 1e3:.1f} ms |"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench cache")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    uvloop.run(amain(args.rounds))
    return 0
