"""``python -m bench s3store [--seconds S] [--tasks N] [--size B]``: the S3 object
store's small requests against SeaweedFS (``weed mini`` on loopback), on its direct
path and through botocore (``direct=False``) in the same run.

For each of small ``put`` (CREATE of ``--size`` bytes, default 1 KiB), ``get``,
``get_range`` (half the object) and ``head``, from ``--tasks`` concurrent tasks (default
64) for S seconds: requests/s and this process's CPU per request (``process_time``; the
figure a loaded machine disturbs least -- SeaweedFS runs in its own process).  Figures
only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Awaitable, Callable

import uvloop

from bench.gateway import _loop
from lsmstore.storage.s3 import S3Store
from lsmstore.testing.servers import MOTO_ENV, WeedServer, new_bucket

OPS = ("put", "get", "get_range", "head")


async def _rate(seconds: float, tasks: int, op: Callable[[int], Awaitable[object]]
                ) -> tuple[float, float]:  # fmt: skip
    """``op(i)`` from ``tasks`` tasks for ``seconds``: (requests/s, CPU µs each)."""
    started, cpu = time.perf_counter(), time.process_time()
    count, _ = await _loop(seconds, tasks, op)
    elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    return count / elapsed, used * 1e6 / max(count, 1)


async def measure(endpoint: str, direct: bool, args: argparse.Namespace) -> dict[str, float]:
    bucket = await new_bucket(endpoint, "s3store")
    data = os.urandom(args.size)
    out: dict[str, float] = {}
    async with S3Store(bucket, "bench", endpoint_url=endpoint, direct=direct) as store:
        for t in range(args.tasks):
            await store.put(f"r/{t}", data)
        n = args.tasks
        ops: dict[str, Callable[[int], Awaitable[object]]] = {
            "put": lambda i: store.put(f"w/{i}", data),
            "get": lambda i: store.get(f"r/{i % n}"),
            "get_range": lambda i: store.get_range(f"r/{i % n}", 0, args.size // 2),
            "head": lambda i: store.head(f"r/{i % n}"),
        }
        for name in OPS:
            rate, cpu = await _rate(args.seconds, args.tasks, ops[name])
            out[f"{name}/s"] = rate
            out[f"{name} CPU us"] = cpu
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench s3store")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--tasks", type=int, default=64)
    p.add_argument("--size", type=int, default=1024)
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs", flush=True)
    os.environ.update(MOTO_ENV)  # the identity weed is started with
    weed = WeedServer()
    weed.start()
    try:
        for direct in (False, True):
            out = uvloop.run(measure(weed.endpoint, direct, args))
            name = "S3Store direct" if direct else "S3Store botocore"
            print(f"{name}: " + ", ".join(f"{k} {v:,.0f}" for k, v in out.items()), flush=True)
    finally:
        weed.stop()
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    return 0
