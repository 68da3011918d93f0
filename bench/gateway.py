"""``python -m bench gateway [--seconds S] [--connections N] [--large-mib M]``: the S3
gateway of ``lsmstore serve`` (embedded default, on loopback) beside SeaweedFS's own S3
endpoint (``weed mini``) in the same run, through the same client (aiobotocore):

* small PUT/s and GET/s (1 KiB objects) from N concurrent requests for S seconds each,
  with p50/p99 latency;
* LIST pages/s (ListObjectsV2, 1000 keys a page) for S seconds;
* one M MiB object PUT then GET, MB/s.

Figures only: no goal is asserted here (BENCHMARKS.md reads them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

from lsmstore.testing.server_process import start_server
from lsmstore.testing.servers import MOTO_ENV, WeedServer, new_bucket

SMALL = os.urandom(1024)


def _config(connections: int) -> AioConfig:
    return AioConfig(
        s3={"addressing_style": "path"}, max_pool_connections=connections,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required", retries={"max_attempts": 1},
    )  # fmt: skip


async def _loop(seconds: float, connections: int, op: Any) -> tuple[int, list[float]]:
    """Run ``op(i)`` from ``connections`` tasks for ``seconds``: (count, latencies)."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    counter = iter(range(10**12))

    async def worker() -> None:
        while time.perf_counter() < stop:
            i = next(counter)
            t = time.perf_counter()
            await op(i)
            latencies.append(time.perf_counter() - t)

    await asyncio.gather(*(worker() for _ in range(connections)))
    return len(latencies), latencies


async def measure(name: str, endpoint: str, key: tuple[str, str], bucket: str, prefix: str,
                  args: argparse.Namespace) -> dict[str, float]:  # fmt: skip
    out: dict[str, float] = {}
    session = get_session()
    async with session.create_client(
        "s3", endpoint_url=endpoint, aws_access_key_id=key[0], aws_secret_access_key=key[1],
        region_name="us-east-1", config=_config(args.connections),
    ) as s3:  # fmt: skip

        async def put(i: int) -> None:
            await s3.put_object(Bucket=bucket, Key=f"{prefix}s/{i:09d}", Body=SMALL)

        n, lat = await _loop(args.seconds, args.connections, put)
        out["put/s"] = n / args.seconds
        out["put p50 ms"] = statistics.median(lat) * 1000
        out["put p99 ms"] = statistics.quantiles(lat, n=100)[98] * 1000
        written = n

        async def get(i: int) -> None:
            r = await s3.get_object(Bucket=bucket, Key=f"{prefix}s/{i % written:09d}")
            async with r["Body"] as body:
                await body.read()

        n, lat = await _loop(args.seconds, args.connections, get)
        out["get/s"] = n / args.seconds
        out["get p99 ms"] = statistics.quantiles(lat, n=100)[98] * 1000

        async def page(i: int) -> None:
            await s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}s/", MaxKeys=1000)

        n, _ = await _loop(args.seconds, 4, page)
        out["list pages/s"] = n / args.seconds

        big = os.urandom(args.large_mib * 1024 * 1024)
        t = time.perf_counter()
        await s3.put_object(Bucket=bucket, Key=f"{prefix}large", Body=big)
        out["large put MB/s"] = len(big) / 1e6 / (time.perf_counter() - t)
        t = time.perf_counter()
        r = await s3.get_object(Bucket=bucket, Key=f"{prefix}large")
        async with r["Body"] as body:
            got = await body.read()
        out["large get MB/s"] = len(got) / 1e6 / (time.perf_counter() - t)
        assert got == big
    print(f"{name}: " + ", ".join(f"{k} {v:,.1f}" for k, v in out.items()), flush=True)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench gateway")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--large-mib", type=int, default=64)
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs", flush=True)
    os.environ.update(MOTO_ENV)  # SeaweedFS accepts any credentials on loopback
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp) / "home")
        weed = WeedServer()
        weed.start()
        try:
            with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as c:
                repo = {"name": "bench", "storage_namespace": "local://bench"}
                r = c.post("/repositories", json=repo)
                r.raise_for_status()
            asyncio.run(measure("gateway (embedded)", server.url, server.admin, "bench",
                                "main/", args))  # fmt: skip
            bucket = asyncio.run(new_bucket(weed.endpoint, "bench"))
            keys = (MOTO_ENV["AWS_ACCESS_KEY_ID"], MOTO_ENV["AWS_SECRET_ACCESS_KEY"])
            asyncio.run(measure("seaweedfs s3", weed.endpoint, keys, bucket, "", args))
        finally:
            weed.stop()
            server.stop()
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    return 0
