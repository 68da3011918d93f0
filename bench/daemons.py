"""One daemon against three behind a load balancer, at the same total load.

``python -m bench daemons [--seconds 15] [--rate 200]
[--configs one,three,three-redirect,three-off]``

Each configuration is a fresh deployment (:mod:`lsmstore.testing.daemons`): ``lsmstore
serve`` daemons, a compactor and a committer on one real redis-server and one real S3
server (SeaweedFS), every S3 request going through a counting proxy
(:class:`~lsmstore.testing.faultproxy.FaultProxy` with no faults).  The load: small
uploads (lakeFS ``uploadObject``, 16 bytes, unique paths, one branch) issued open-loop
at ``--rate`` per second for ``--seconds``, spread round-robin over the daemons as a
load balancer would (after 2 s of warm-up at the same rate).  Configurations:

* ``one``: one daemon takes it all (the reference);
* ``three``: three daemons with branch affinity (``server_affinity = on``): the two
  that do not own the branch forward its writes to the owner;
* ``three-redirect``: the same with ``server_forward_mode = redirect``: the two answer
  307 and the load generator sends the write to the owner itself;
* ``three-off``: three daemons without affinity: each batches its share itself.

Per acknowledged write: L1 files written (``.sst`` PUTs under ``_lsm/staging/*/L1/``),
S3 requests (all, and GETs, of every process: daemons, compactor, committer), and the
daemons' CPU (user + system of their process trees, from /proc), each configuration's
figure beside its ratio to ``one``.  The goal: ``three`` within 1.2x of ``one``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from bench.client import tree_cpu
from lsmstore.testing.daemons import Cluster, metric, s3_namespace, start_cluster
from lsmstore.testing.faultproxy import FaultProxy
from lsmstore.testing.servers import MOTO_ENV, RedisServer, WeedServer, new_bucket

REPO = "bench"
#: name -> (daemons, affinity, forward mode)
CONFIGS = {
    "one": (1, True, "proxy"),
    "three": (3, True, "proxy"),
    "three-redirect": (3, True, "redirect"),
    "three-off": (3, False, "proxy"),
}
WARMUP_S = 2.0
BODY = b"0123456789abcdef"


def classify(method: str, target: str) -> str:
    path = target.split("?", 1)[0]
    if method == "PUT" and "/L1/" in path and path.endswith(".sst"):
        return "l1"
    return method


class _ProxyThread:
    """The counting proxy on its own event loop (the load's loop stays the load's)."""

    def __init__(self, upstream_port: int) -> None:
        self.proxy = FaultProxy("127.0.0.1", upstream_port, classify=classify)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self._loop).result()

    def snapshot(self) -> Counter[str]:
        return Counter(dict(self.proxy.requests))

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.aclose(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()


async def _load(
    cluster: Cluster, rate: float, seconds: float, tag: str
) -> tuple[int, Counter[str]]:
    """Open-loop uploads at ``rate``/s for ``seconds``: the acknowledged, and the
    failed by status or error."""
    daemons = cluster.live()
    auth = aiohttp.BasicAuth(*cluster.admin)
    ok = 0
    failed: Counter[str] = Counter()
    connector = aiohttp.TCPConnector(limit=1024)
    async with aiohttp.ClientSession(connector=connector, auth=auth) as session:

        async def one(n: int) -> None:
            nonlocal ok
            d = daemons[n % len(daemons)]
            url = f"{d.api}/repositories/{REPO}/branches/main/objects"
            try:
                async with session.post(url, params={"path": f"{tag}/{n}"}, data=BODY,
                                        allow_redirects=False) as r:  # fmt: skip
                    await r.read()
                    status, location = r.status, r.headers.get("Location")
                if status == 307 and location:  # to the owner, as the remote client does
                    async with session.post(location, data=BODY, auth=auth,
                                            headers={"X-Lsm-Redirected": "1"}) as r:  # fmt: skip
                        await r.read()
                        status = r.status
                if status == 201:
                    ok += 1
                else:
                    failed[str(status)] += 1
            except aiohttp.ClientError as e:
                failed[type(e).__name__] += 1

        start = time.monotonic()
        tasks: set[asyncio.Task[None]] = set()
        n = 0
        while (due := start + n / rate) < start + seconds:
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(n))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
        await asyncio.gather(*tasks)
    return ok, failed


def _fwd(cluster: Cluster, outcomes: tuple[str, ...] = ("forwarded", "redirected")) -> float:
    """Writes the daemons forwarded or redirected to an owner so far (or: ``outcomes``)."""
    name = "lsmstore_forwarded_writes_total"
    return sum(metric(d, name, outcome=o) for d in cluster.live() for o in outcomes)


def _daemons_cpu(cluster: Cluster) -> float:
    return sum(tree_cpu(d.proc.pid) for d in cluster.live())


async def _measure(
    name: str, redis: RedisServer, weed: WeedServer, proxy: _ProxyThread, work: Path,
    rate: float, seconds: float,
) -> dict[str, Any]:  # fmt: skip
    count, affinity, mode = CONFIGS[name]
    cluster = await asyncio.to_thread(
        start_cluster, work / name, redis_url=redis.url, s3_endpoint=proxy.proxy.endpoint,
        daemons=count, affinity=affinity, env={"LSMSTORE_SERVER_FORWARD_MODE": mode},
    )  # fmt: skip
    try:
        bucket = await new_bucket(weed.endpoint, "bench")
        async with aiohttp.ClientSession(auth=aiohttp.BasicAuth(*cluster.admin)) as s:
            ns = s3_namespace(bucket, REPO, proxy.proxy.endpoint)
            body = {"name": REPO, "storage_namespace": ns}
            async with s.post(cluster.daemons[0].api + "/repositories", json=body) as r:
                assert r.status == 201, await r.text()
        await asyncio.sleep(1.0)  # every daemon has read the members (heartbeats 0.2 s)
        await _load(cluster, rate, WARMUP_S, "warm")
        before_s3, before_cpu, before_fwd = proxy.snapshot(), _daemons_cpu(cluster), _fwd(cluster)
        before_fallback = _fwd(cluster, ("fallback",))
        ok, failed = await _load(cluster, rate, seconds, "run")
        after_s3, after_cpu = proxy.snapshot(), _daemons_cpu(cluster)
        s3 = after_s3 - before_s3
        forwarded = _fwd(cluster) - before_fwd
        fallback = _fwd(cluster, ("fallback",)) - before_fallback
        n = max(ok, 1)
        return {
            "config": name, "acked": ok, "failed": sum(failed.values()),
            "failures": dict(failed), "forwarded": int(forwarded),
            "fallback": int(fallback),
            "l1": s3["l1"] / n, "s3": sum(s3.values()) / n, "get": s3["GET"] / n,
            "cpu_ms": (after_cpu - before_cpu) * 1000 / n,
        }  # fmt: skip
    finally:
        await asyncio.to_thread(cluster.stop)


async def _run(args: argparse.Namespace) -> list[dict[str, Any]]:
    os.environ.update(MOTO_ENV)
    redis = RedisServer()
    weed = WeedServer()
    await asyncio.to_thread(redis.start)
    try:
        await asyncio.to_thread(weed.start)
        proxy = _ProxyThread(int(weed.endpoint.rsplit(":", 1)[1]))
        try:
            with tempfile.TemporaryDirectory(prefix="lsm-bench-daemons-") as work:
                rows = []
                for name in args.configs.split(","):
                    rows.append(await _measure(name, redis, weed, proxy, Path(work), args.rate,
                                               args.seconds))  # fmt: skip
                return rows
        finally:
            proxy.close()
    finally:
        weed.stop()
        redis.stop()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench daemons", description=__doc__)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--rate", type=float, default=200.0, help="uploads per second, in all")
    p.add_argument("--configs", default=",".join(CONFIGS))
    args = p.parse_args(argv)
    for name in args.configs.split(","):
        if name not in CONFIGS:
            p.error(f"unknown configuration {name!r} ({', '.join(CONFIGS)})")
    load = os.getloadavg()[0]
    rows = asyncio.run(_run(args))
    ref = next((r for r in rows if r["config"] == "one"), rows[0])
    print(f"\n{args.rate:g} uploads/s for {args.seconds:g} s, nproc {os.cpu_count()}, "
          f"load {load:.1f} -> {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| config | acked | failed | forwarded | fallback | L1 files/write | S3 req/write | "
          "S3 GET/write | daemon CPU ms/write |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:

        def cell(key: str, r: dict[str, Any] = r) -> str:
            ratio = r[key] / ref[key] if ref[key] else float("nan")
            return f"{r[key]:.3f} ({ratio:.2f}x)"

        print(f"| {r['config']} | {r['acked']} | {r['failed']} | {r['forwarded']} | "
              f"{r['fallback']} | {cell('l1')} | {cell('s3')} | {cell('get')} | "
              f"{cell('cpu_ms')} |")  # fmt: skip
    for r in rows:
        if r["failures"]:
            print(f"\n{r['config']}: failed uploads by status or error: {r['failures']}")
    return 0
