"""RefStore latency: ``get_ref``, ``append_l1`` and ``swap_compacted`` per backend.

``python -m bench refstore [--backends embedded,embedded-normal,redis,dynamodb]
[--callers 1,64] [--ops 2000]`` (also ``python -m bench.refstore``) prints a Markdown
table of p50/p99 latency and throughput for 1 and 64 concurrent callers, on loopback:
embedded in a temporary directory (``synchronous=FULL``, and ``NORMAL`` as
``embedded-normal``), Redis on a private ``redis-server``, DynamoDB on moto's threaded
server.

* ``append_l1``: all callers append unique ids to one branch (the contended case);
  after every 100 appends (64 with 64 callers) an untimed ``swap_committed`` empties L1,
  so L1 stays as short as a compacted branch's.
* ``swap_compacted``: each caller swaps on its own branch (200 L1 ids, refilled untimed
  every 50 swaps), consuming 4 L1 ids per swap and replacing one L2 id by another (no
  conflicts; one round trip each).
* ``get_ref``: all callers read one branch holding 20 L1 and 2 L2 ids.
* Redis also gets the client's floor: a bare redis-py ``PING`` and ``HMGET``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import uvloop

from lsmstore.refstore.base import Ref, RefStore, Repository
from lsmstore.refstore.dynamodb import DynamoRefStore
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.refstore.redis import RedisRefStore
from lsmstore.testing.servers import RedisServer, moto_server

BACKENDS = ("embedded", "embedded-normal", "redis", "dynamodb")
REPO = "bench"
_run = itertools.count()
SWAPS_PER_ROUND = 50
APPENDS_PER_ROUND = 100


@asynccontextmanager
async def open_backend(name: str) -> AsyncIterator[RefStore]:
    if name.startswith("embedded"):
        with tempfile.TemporaryDirectory(prefix="lsm-bench-refs-") as d:
            sync = "NORMAL" if name == "embedded-normal" else "FULL"
            async with EmbeddedRefStore(Path(d), synchronous=sync) as store:
                yield store
    elif name == "redis":
        server = RedisServer()
        await asyncio.to_thread(server.start)
        try:
            async with RedisRefStore(server.url, key_prefix="bench:") as store:
                yield store
        finally:
            await asyncio.to_thread(server.stop)
    elif name == "dynamodb":
        with moto_server(threaded=True) as moto:
            table = f"bench-{uuid.uuid4().hex[:8]}"
            async with DynamoRefStore(
                table, region="us-east-1", endpoint_url=moto.endpoint
            ) as store:
                await store.create_table()
                yield store
    else:
        raise SystemExit(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")


async def timed(latencies: list[int], call: Awaitable[object]) -> None:
    t0 = time.perf_counter_ns()
    await call
    latencies.append(time.perf_counter_ns() - t0)


async def bench_get(store: RefStore, callers: int, ops: int) -> tuple[list[int], float]:
    name = f"get-{next(_run)}"
    await store.create_ref(
        REPO, name, Ref("branch", "c" * 64, ("g0", "g1"), tuple(f"{i:026d}" for i in range(20)))
    )
    latencies: list[int] = []

    async def caller(n: int) -> None:
        for _ in range(n):
            await timed(latencies, store.get_ref(REPO, name))

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(ops // callers) for _ in range(callers)))
    return latencies, time.perf_counter() - t0


async def bench_append(store: RefStore, callers: int, ops: int) -> tuple[list[int], float]:
    name = f"append-{next(_run)}"
    await store.create_ref(REPO, name, Ref("branch", "c0"))
    latencies: list[int] = []
    per_round = max(1, min(APPENDS_PER_ROUND // callers, ops // callers))
    elapsed, done, commit = 0.0, 0, 0

    async def caller(c: int, start: int) -> None:
        for i in range(per_round):
            file_id = f"r{start:07d}-{c:03d}-{i:04d}"
            await timed(latencies, store.append_l1(REPO, name, file_id))

    while done < ops:
        t0 = time.perf_counter()
        await asyncio.gather(*(caller(c, done) for c in range(callers)))
        elapsed += time.perf_counter() - t0
        done += per_round * callers
        cur = await store.get_ref(REPO, name)  # untimed: empty L1 for the next round
        commit += 1
        await store.swap_committed(
            REPO, name, base=cur.base, l2_old=cur.l2, l1_prefix=cur.l1, new_base=f"c{commit}"
        )
    return latencies, elapsed


async def bench_swap(store: RefStore, callers: int, ops: int) -> tuple[list[int], float]:
    """Rounds of up to 50 swaps per caller, each caller on a fresh branch of 200 L1 ids."""
    latencies: list[int] = []
    per_round = max(1, min(SWAPS_PER_ROUND, ops // callers))
    l1 = tuple(f"f{i:06d}" for i in range(4 * per_round))
    elapsed, done = 0.0, 0

    async def caller(name: str) -> None:
        for i in range(per_round):
            prefix, old, new = l1[4 * i : 4 * i + 4], (f"g{i - 1}",), (f"g{i}",)
            await timed(
                latencies,
                store.swap_compacted(
                    REPO, name, base="c0", l2_old=old, l1_prefix=prefix, l2_new=new
                ),
            )

    while done < ops:
        names = [f"swap-{next(_run)}" for _ in range(callers)]
        for name in names:  # untimed
            await store.create_ref(REPO, name, Ref("branch", "c0", ("g-1",), l1))
        t0 = time.perf_counter()
        await asyncio.gather(*(caller(name) for name in names))
        elapsed += time.perf_counter() - t0
        done += per_round * callers
    return latencies, elapsed


async def bench_redis_floor(store: RedisRefStore, op: str, ops: int) -> tuple[list[int], float]:
    """The client's floor: a bare redis-py ``PING`` or ``HMGET`` of a ref's hash."""
    name = f"floor-{next(_run)}"
    await store.create_ref(REPO, name, Ref("branch", "c0"))
    client, key = store._redis, store._ref_key(REPO, name)
    latencies: list[int] = []
    t0 = time.perf_counter()
    for _ in range(ops):
        call = client.ping() if op == "PING" else client.hmget(key, ["kind", "base", "l2", "l1"])
        await timed(latencies, call)
    return latencies, time.perf_counter() - t0


def pct(latencies: list[int], q: float) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


async def run(backends: list[str], callers: list[int], ops: int) -> None:
    print(
        f"RefStore latency, {datetime.now(UTC):%Y-%m-%d}, {platform.python_implementation()} "
        f"{platform.python_version()}, nproc={os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.1f}, {ops} ops per cell, uvloop\n"
    )
    print("| backend | operation | callers | p50 µs | p99 µs | ops/s |")
    print("|---|---|---|---|---|---|")
    benches = (("get_ref", bench_get), ("append_l1", bench_append), ("swap_compacted", bench_swap))
    for backend in backends:
        async with open_backend(backend) as store:
            await store.create_repository(Repository(REPO, "file:///bench", "main"))
            if isinstance(store, RedisRefStore):
                for op in ("PING", "HMGET"):
                    await bench_redis_floor(store, op, ops // 10)
                    latencies, elapsed = await bench_redis_floor(store, op, ops)
                    print(
                        f"| redis-py floor | {op} | 1 | {pct(latencies, 0.5):,.0f} | "
                        f"{pct(latencies, 0.99):,.0f} | {len(latencies) / elapsed:,.0f} |"
                    )
            for op, bench in benches:
                for c in callers:
                    await bench(store, c, max(ops // 10, c))  # warm-up: connections, scripts
                    latencies, elapsed = await bench(store, c, ops)
                    print(
                        f"| {backend} | {op} | {c} | {pct(latencies, 0.5):,.0f} | "
                        f"{pct(latencies, 0.99):,.0f} | {len(latencies) / elapsed:,.0f} |",
                        flush=True,
                    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench refstore", description=__doc__)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--callers", default="1,64")
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request log lines
    backends = [b for b in args.backends.split(",") if b]
    callers = [int(c) for c in args.callers.split(",") if c]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run(backends, callers, args.ops))


if __name__ == "__main__":
    main(sys.argv[1:])
