"""Object stores: put/get latency and throughput of LocalStore and S3Store (moto).

``python -m bench storage [--n 200]`` prints a Markdown table: for each store, the p50
of ``n`` sequential CREATE puts and gets of 64 KiB, and the rate of ``n`` puts and gets
with 16 in flight.  LocalStore writes under a temp dir (fsync of file and directory on
every put); S3Store talks to moto's threaded server on loopback over real HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import uvloop

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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench storage")
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args(argv)
    uvloop.run(amain(args.n))
    return 0
