"""``python -m bench gateway [--seconds S] [--connections N] [--large-mib M]
[--targets embedded,seaweedfs,weed] [--local-sync auto|file|filesystem]``: the S3
gateway of ``lsmstore serve`` (on loopback) beside SeaweedFS's own S3 endpoint (``weed
mini``) in the same run, through the same client (aiobotocore), three targets:

* ``gateway (embedded)``: a repository on the embedded default (a local namespace);
* ``gateway (over seaweedfs)``: a repository whose namespace is a bucket of the same
  SeaweedFS (``s3://<bucket>/bench?endpoint_url=...&path_style=true``);
* ``gateway (over seaweedfs, botocore)``: the same with the namespace's ``direct=false``
  (every object-store request through botocore: the A/B of the store's direct path);
* ``seaweedfs s3``: SeaweedFS's own endpoint.

``--targets`` picks some of them, measured in the order given (``embedded``,
``seaweedfs`` -- the gateway over it --, ``seaweedfs-botocore`` and ``weed`` --
SeaweedFS itself); all but ``seaweedfs-botocore`` by default.  Both repositories over
SeaweedFS get a few hundred PUTs and GETs first, outside the figures: SeaweedFS creates
a bucket's volumes on its first writes, which made whichever target came first slower.

Each gets:

* small PUT/s and GET/s (1 KiB objects) from N concurrent requests for S seconds each,
  with p50/p99 latency;
* ``half-load put p99 ms``: small PUTs offered at half the PUT/s just measured, at
  even intervals for S seconds, each timed from when it was due (queueing included);
* LIST pages/s (ListObjectsV2, 1000 keys a page) for S seconds;
* one M MiB object PUT then GET, MB/s;
* ``server CPU ms/put`` and ``/get``: the CPU the answering server (lsmstore's, or
  SeaweedFS for its own row) used per small PUT and GET of those phases, from
  ``/proc`` -- the figure a loaded machine disturbs least.

``--local-sync`` sets the server's ``local_sync`` (how the embedded namespace makes a
put durable; default: the setting's own default).

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

from lsmstore.storage.local import SYNC_MODES
from lsmstore.testing.server_process import start_server
from lsmstore.testing.servers import MOTO_ENV, WeedServer, new_bucket

SMALL = os.urandom(1024)
#: The targets ``--targets`` chooses from.
TARGETS = ("embedded", "seaweedfs", "seaweedfs-botocore", "weed")


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


async def _paced(seconds: float, rate: float, op: Any) -> list[float]:
    """Start ``op(i)`` every ``1/rate`` seconds for ``seconds``: the latencies, each from
    the moment its request was due (a late start counts against it)."""
    latencies: list[float] = []
    start = time.perf_counter()
    count = max(1, int(seconds * rate))
    tasks: list[asyncio.Task[None]] = []

    async def one(i: int, due: float) -> None:
        await op(i)
        latencies.append(time.perf_counter() - due)

    for i in range(count):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(i, due)))
    await asyncio.gather(*tasks)
    return latencies


def cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(name: str, endpoint: str, key: tuple[str, str], bucket: str, prefix: str,
                  args: argparse.Namespace, pid: int) -> dict[str, float]:  # fmt: skip
    """The figures of one target; ``pid`` is the server answering it, whose CPU per
    small PUT and GET is reported beside the rates (robust to a loaded machine)."""
    out: dict[str, float] = {}
    session = get_session()
    async with session.create_client(
        "s3", endpoint_url=endpoint, aws_access_key_id=key[0], aws_secret_access_key=key[1],
        region_name="us-east-1", config=_config(args.connections),
    ) as s3:  # fmt: skip

        async def put(i: int) -> None:
            await s3.put_object(Bucket=bucket, Key=f"{prefix}s/{i:09d}", Body=SMALL)

        cpu = cpu_s(pid)
        n, lat = await _loop(args.seconds, args.connections, put)
        out["server CPU ms/put"] = (cpu_s(pid) - cpu) * 1000 / max(n, 1)
        out["put/s"] = n / args.seconds
        out["put p50 ms"] = statistics.median(lat) * 1000
        out["put p99 ms"] = statistics.quantiles(lat, n=100)[98] * 1000
        written = n

        async def put_more(i: int) -> None:
            await s3.put_object(Bucket=bucket, Key=f"{prefix}h/{i:09d}", Body=SMALL)

        lat = await _paced(args.seconds, out["put/s"] / 2, put_more)
        out["half-load put p99 ms"] = statistics.quantiles(lat, n=100)[98] * 1000

        async def get(i: int) -> None:
            r = await s3.get_object(Bucket=bucket, Key=f"{prefix}s/{i % written:09d}")
            async with r["Body"] as body:
                await body.read()

        cpu = cpu_s(pid)
        n, lat = await _loop(args.seconds, args.connections, get)
        out["server CPU ms/get"] = (cpu_s(pid) - cpu) * 1000 / max(n, 1)
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


async def warm(endpoint: str, key: tuple[str, str], bucket: str, n: int = 256) -> None:
    """``n`` small PUTs and GETs (16 at a time) under ``warm/``: SeaweedFS creates a
    bucket's volumes on its first writes, the server its pools, outside any figure."""
    limit = asyncio.Semaphore(16)
    async with get_session().create_client(
        "s3", endpoint_url=endpoint, aws_access_key_id=key[0], aws_secret_access_key=key[1],
        region_name="us-east-1", config=_config(16),
    ) as s3:  # fmt: skip

        async def one(i: int) -> None:
            async with limit:
                await s3.put_object(Bucket=bucket, Key=f"main/warm/{i}", Body=SMALL)
                r = await s3.get_object(Bucket=bucket, Key=f"main/warm/{i}")
                async with r["Body"] as body:
                    await body.read()

        await asyncio.gather(*(one(i) for i in range(n)))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench gateway")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--large-mib", type=int, default=64)
    p.add_argument("--targets", default="embedded,seaweedfs,weed")
    p.add_argument("--local-sync", choices=SYNC_MODES, default=None)
    args = p.parse_args(argv)
    targets = list(dict.fromkeys(args.targets.split(",")))
    if not targets or not set(targets) <= set(TARGETS):
        p.error(f"--targets: a comma-separated subset of {','.join(TARGETS)}")
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs", flush=True)
    if args.local_sync:
        print(f"local_sync = {args.local_sync}", flush=True)
    os.environ.update(MOTO_ENV)  # SeaweedFS accepts any credentials on loopback
    with tempfile.TemporaryDirectory() as tmp:
        weed = WeedServer()
        weed.start()
        server = None
        try:
            # The server may open namespaces on the SeaweedFS endpoint (and reaches it
            # with the credentials above).
            env = {"LSMSTORE_SERVER_NAMESPACE_ENDPOINTS": weed.endpoint}
            if args.local_sync:
                env["LSMSTORE_LOCAL_SYNC"] = args.local_sync
            server = start_server(Path(tmp) / "home", env=env)
            ns_bucket = asyncio.run(new_bucket(weed.endpoint, "lsm"))
            weed_ns = f"s3://{ns_bucket}/bench?endpoint_url={weed.endpoint}&path_style=true"
            with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as c:
                botocore_ns = weed_ns.replace("/bench?", "/benchb?") + "&direct=false"
                for name, ns in (("bench", "local://bench"), ("benchweed", weed_ns),
                                 ("benchweedb", botocore_ns)):  # fmt: skip
                    r = c.post("/repositories", json={"name": name, "storage_namespace": ns})
                    r.raise_for_status()
            keys = (MOTO_ENV["AWS_ACCESS_KEY_ID"], MOTO_ENV["AWS_SECRET_ACCESS_KEY"])
            for repo in ("benchweed", "benchweedb"):
                asyncio.run(warm(server.url, server.admin, repo))
            for target in targets:  # in the order given (the first one warms SeaweedFS)
                if target == "weed":
                    bucket = asyncio.run(new_bucket(weed.endpoint, "bench"))
                    assert weed.proc is not None
                    asyncio.run(measure("seaweedfs s3", weed.endpoint, keys, bucket, "", args,
                                        weed.proc.pid))  # fmt: skip
                    continue
                label, repo = {
                    "embedded": ("gateway (embedded)", "bench"),
                    "seaweedfs": ("gateway (over seaweedfs)", "benchweed"),
                    "seaweedfs-botocore": ("gateway (over seaweedfs, botocore)", "benchweedb"),
                }[target]
                asyncio.run(measure(label, server.url, server.admin, repo, "main/", args,
                                    server.proc.pid))  # fmt: skip
        finally:
            if server is not None:
                server.stop()
            weed.stop()
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    return 0
