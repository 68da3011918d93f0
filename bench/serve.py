"""The server under load: lakeFS API calls over HTTP keep-alive, beside the in-process
library in the same run (the ceiling).

``python -m bench serve [--seconds 10] [--connections 256] [--batch 1000]
[--skip-library] [--phases stat,ls,upload,link,batch,halfload] [--rate R]
[--increasing-keys] [--local-sync auto|file|filesystem]`` (``./dev.sh bench serve``;
needs ``wrk``: ``apt-get install wrk``).  ``--local-sync`` sets the server's
``local_sync`` (how its local namespace makes a put durable).

A real server process (``python -m lsmstore.server``, embedded RefStore and local-file
object store under a fresh ``$LSMSTORE_HOME``, compaction in process) and client
processes on the same machine:

* **writes/s**: acknowledged single-object writes, one small upload (16 bytes) per
  request (``POST .../objects?path=<unique>``), ``wrk`` with ``--connections``
  keep-alive connections (a Lua script makes every path unique);
* **records/s through the batch endpoint**: ``--batch`` ``link`` entries per request
  (JSON: wrk cannot send NUL bytes), 8 connections; then ``--batch`` ``kv`` entries
  (raw 100-byte values, what the remote client's ``put`` sends) the same way;
* **stat/s** (``GET .../objects/stat``) and **listing pages/s** (``GET .../objects/ls``,
  100 entries a page) with ``--connections`` connections;
* **latency at half load**: an open-loop client (aiohttp, 2 processes) issues uploads
  at half the measured writes/s (or at ``--rate``/s: the same load for every tree of
  an A/B) for ``--seconds``; latency is counted from each
  request's scheduled time (p50/p99/p99.9), with the failed requests, how late the
  client itself sent (p99: a client too slow for the rate shows here) and the server's
  and the client's CPU per upload;
* **our app's own cost** (``app``, ``applink``, ``appbatch``, ``appkv``): CPU µs per
  stat (per one-link request; per JSON batch request of ``--batch`` links, or of
  ``--batch`` kv puts, 8 at a time, into a ``local://`` namespace as the ``batch``
  phase's) through the ASGI app driven in-process, without sockets or uvicorn;
* **library ceiling** (same run): the same operations through ``lsmstore.connect``
  in one process -- 256 tasks uploading, ``link_many`` of ``--batch`` links, 256 tasks
  of ``stat_object``.

Beside each wrk phase, the server's CPU time per request (user + system of the server
process and its worker processes, from ``/proc``): a figure that survives a loaded
machine.  Prints a Markdown table, with nproc and the load average at the start and the end (the
machine may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from lsmstore.storage.local import SYNC_MODES
from lsmstore.testing.server_process import ServerProcess, start_server

REPO = "bench"
PHASES = ("stat", "ls", "upload", "link", "batch", "halfload", "app", "applink", "appbatch",
          "appkv")  # fmt: skip

UPLOAD_LUA = """
local counter = 0
local thread_id = 0
local threads = {}
function setup(thread)
  thread:set("id", thread_id)
  thread_id = thread_id + 1
end
function init(args)
  prefix = args[1]
end
request = function()
  counter = counter + 1
  local path = prefix .. "/" .. id .. "/" .. counter
  return wrk.format("POST", "/api/v1/repositories/bench/branches/main/objects?path=" .. path,
                    nil, "0123456789abcdef")
end
"""

LINK_LUA = """
local counter = 0
local thread_id = 0
function setup(thread)
  thread:set("id", thread_id)
  thread_id = thread_id + 1
end
function init(args)
  address = args[1]
  checksum = args[2]
  fmt = args[3]
end
request = function()
  counter = counter + 1
  local body = '[["link","k/' .. id .. '/' .. string.format(fmt, counter) .. '","' ..
               address .. '",16,"' ..
               checksum .. '"]]'
  local headers = {}
  for k, v in pairs(wrk.headers) do headers[k] = v end
  headers["Content-Type"] = "application/json"
  return wrk.format("POST", "/api/v1/lsm/repositories/bench/branches/main/batch",
                    headers, body)
end
"""

BODY_LUA = """
local f = io.open("{body}", "rb")
wrk.body = f:read("*all")
f:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
"""


def _wrk(url: str, connections: int, seconds: float, headers: dict[str, str],
         script: str | None = None, args: list[str] | None = None) -> dict[str, float]:  # fmt: skip
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{max(1, int(seconds))}s", "--latency",
           "--timeout", "30s"]  # fmt: skip
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    if script:
        cmd += ["-s", script]
    cmd.append(url)
    if args:
        cmd += ["--", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = re.search(r"(\d+) requests in", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    lat = {p: _ms(m) for p, m in re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M)}
    return {"rps": rps, "non2xx": float(non2xx.group(1)) if non2xx else 0.0,
            "p50": lat.get("50", 0.0), "p99": lat.get("99", 0.0),
            "socket_errors": 1.0 if errors else 0.0,
            "requests": float(total.group(1)) if total else 0.0}  # fmt: skip


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its live descendants (the server's
    worker processes), from ``/proc``: a figure the machine's load does not inflate."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            total += (int(stats[p][11]) + int(stats[p][12])) / tick
        todo += children.get(p, [])
    return total


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if not m:
        return 0.0
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v


def _open_loop_worker(url: str, auth: tuple[str, str], rate: float, seconds: float, wid: int,
                      q: Any) -> None:  # fmt: skip
    """Send uploads at fixed times; each latency counts from the request's scheduled
    time (coordinated-omission free: a late send or a queued connection counts).
    Reports the latencies of the acknowledged ones, the failures, how late the sends
    went out (the client's own lag) and the client's CPU."""
    import aiohttp

    async def run() -> dict[str, Any]:
        lat: list[float] = []
        late: list[float] = []
        failed = 0
        conn = aiohttp.TCPConnector(limit=256)
        headers = {"Authorization": aiohttp.encode_basic_auth(*auth)}
        cpu0 = time.process_time()
        async with aiohttp.ClientSession(url, connector=conn, headers=headers) as s:
            start = time.perf_counter()
            n = int(rate * seconds)
            tasks = []

            async def one(i: int, due: float) -> None:
                nonlocal failed
                late.append(time.perf_counter() - due)
                try:
                    async with s.post(
                        "/api/v1/repositories/bench/branches/main/objects",
                        params={"path": f"ol/{wid}/{i}"},
                        data=b"0123456789abcdef",
                    ) as r:
                        await r.read()
                        if r.status == 201:
                            lat.append(time.perf_counter() - due)
                        else:
                            failed += 1
                except (aiohttp.ClientError, OSError):
                    failed += 1

            for i in range(n):
                due = start + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(i, due)))
            await asyncio.gather(*tasks)
        return {"lat": lat, "late": late, "failed": failed, "cpu": time.process_time() - cpu0}

    q.put(asyncio.run(run()))


def open_loop(
    server: ServerProcess, rate: float, seconds: float, procs: int = 2
) -> dict[str, float]:
    """Uploads at ``rate``/s for ``seconds`` from ``procs`` client processes; latency
    percentiles (ms, from the scheduled send times), failures, the p99 of the sends'
    own lag (ms: a client too slow for the rate shows here) and the client's and the
    server's CPU per request (µs)."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_open_loop_worker,
                      args=(server.url, server.admin, rate / procs, seconds, w, q))
          for w in range(procs)]  # fmt: skip
    cpu0 = _cpu_s(server.proc.pid)
    for p in ps:
        p.start()
    lat: list[float] = []
    late: list[float] = []
    failed, client_cpu = 0, 0.0
    for _ in ps:
        got = q.get(timeout=seconds + 300)
        lat += got["lat"]
        late += got["late"]
        failed += got["failed"]
        client_cpu += got["cpu"]
    for p in ps:
        p.join()
    server_cpu = _cpu_s(server.proc.pid) - cpu0
    lat.sort()
    late.sort()

    def pct(xs: list[float], x: float) -> float:
        return xs[min(len(xs) - 1, int(x / 100 * len(xs)))] * 1000 if xs else 0.0

    sent = max(1, len(late))
    return {"rate": rate, "n": len(lat), "failed": failed, "p50": pct(lat, 50),
            "p99": pct(lat, 99), "p999": pct(lat, 99.9), "late_p99": pct(late, 99),
            "client_cpu_us": client_cpu / sent * 1e6,
            "server_cpu_us": server_cpu / sent * 1e6}  # fmt: skip


async def app_cpu(home: Path, n: int = 5000, op: str = "stat", batch: int = 1000) -> float:
    """CPU µs per request through the ASGI app driven in-process (no sockets, no
    uvicorn): our own per-request cost, apart from the stack's.  ``op`` ``stat``:
    ``statObject``, 50 requests at a time; ``link``: one link per batch request, 256 at
    a time; ``batch``: ``batch`` links per JSON batch request (addresses as an upload
    to a ``local://`` repository shows them), 8 at a time; ``kv``: the same with
    ``batch`` kv entries of 100-byte values, the ``batch`` phase's body (this process's
    CPU, its write threads included; not the encoder's and compactor's worker
    processes)."""
    import lsmstore
    from lsmstore.server.app import App
    from lsmstore.server.serve import make_context

    os.environ["LSMSTORE_HOME"] = str(home)
    async with lsmstore.connect() as store:
        assert isinstance(store, lsmstore.Store)
        ctx = make_context(store.config, store)
        app = App(ctx)
        key, secret = await ctx.auth.create_key("admin")
        where = "local://bench" if op in ("batch", "kv") else (home / "ns").as_uri()
        repo = await store.create_repository(REPO, storage_namespace=where)
        await repo.branch("main").upload("s/one", b"0123456789abcdef")
        cred = b"Basic " + base64.b64encode(f"{key.access_key_id}:{secret}".encode())
        scope = {"type": "http", "method": "GET", "query_string": b"path=s/one",
                 "path": f"/api/v1/repositories/{REPO}/refs/main/objects/stat",
                 "headers": [(b"host", b"bench"), (b"authorization", cred)]}  # fmt: skip
        statuses: list[int] = []
        at = 50
        bodies = iter(())
        if op in ("batch", "kv"):
            up = await repo.branch("main").stat_object("s/one")
            at = 8
            scope.update(
                method="POST",
                query_string=b"",
                path=f"/api/v1/lsm/repositories/{REPO}/branches/main/batch",
            )
            scope["headers"] = [*scope["headers"], (b"content-type", b"application/json")]
            value = base64.b64encode(b"v" * 100).decode()  # the batch phase's kv body
            entries = ([["kv", f"kv/{i:08d}", value] for i in range(batch)] if op == "kv" else
                       [["link", f"b/{i:08d}", up.physical_address, 16, up.checksum]
                        for i in range(batch)])  # fmt: skip
            bodies = itertools.repeat(json.dumps(entries).encode())
        if op == "link":
            up = await repo.branch("main").stat_object("s/one")
            at = 256
            scope.update(
                method="POST",
                query_string=b"",
                path=f"/api/v1/lsm/repositories/{REPO}/branches/main/batch",
            )
            scope["headers"] = [*scope["headers"], (b"content-type", b"application/json")]
            bodies = (json.dumps([["link", f"k/{i}", up.physical_address, 16, up.checksum]])
                      .encode() for i in range(10_000_000))  # fmt: skip

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": next(bodies, b""), "more_body": False}

        async def send(msg: MutableMapping[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                statuses.append(msg["status"])

        async def rounds(k: int) -> None:
            for _ in range(k):
                await asyncio.gather(*(app(dict(scope), receive, send) for _ in range(at)))

        await rounds(4)  # warm: key check, repository, snapshot
        assert set(statuses) == {200}, statuses
        cpu0 = time.process_time()
        await rounds(n // at)
        return (time.process_time() - cpu0) / (n // at * at) * 1e6


async def library(home: Path, seconds: float, batch: int) -> dict[str, float]:
    import lsmstore
    from lsmstore.types import ObjectLink

    out: dict[str, float] = {}
    async with lsmstore.connect(home=str(home)) as store:
        repo = await store.create_repository(
            "libbench", storage_namespace=(home / "libdata").as_uri()
        )
        main = repo.branch("main")
        stop = time.perf_counter() + seconds
        done = 0

        async def uploader(t: int) -> None:
            nonlocal done
            i = 0
            while time.perf_counter() < stop and i < 1_000_000:
                await main.upload(f"u/{t}/{i}", b"0123456789abcdef")
                i += 1
                done += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(uploader(t) for t in range(256)))
        out["writes"] = done / (time.perf_counter() - t0)
        st = await main.stat_object("u/0/0")
        links = [ObjectLink(f"l/{i:08d}", st.physical_address, st.size, st.checksum)
                 for i in range(batch)]  # fmt: skip
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < seconds and n < 10_000_000:
            await main.link_many(links)
            n += batch
        out["records"] = n / (time.perf_counter() - t0)
        stop = time.perf_counter() + seconds
        stats = 0

        async def statter() -> None:
            nonlocal stats
            while time.perf_counter() < stop:
                await main.stat_object("u/0/0")
                stats += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(statter() for _ in range(256)))
        out["stats"] = stats / (time.perf_counter() - t0)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench serve")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--connections", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--skip-library", action="store_true")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="uploads/s of halfload (default: half the upload phase's)")  # fmt: skip
    ap.add_argument("--increasing-keys", action="store_true",
                    help="link phase: zero-padded counters, so each wrk thread's keys "
                    "increase (default: k/<thread>/<n> unpadded, new keys land all over "
                    "L2 and every compaction rewrites all of it)")  # fmt: skip
    ap.add_argument("--phases", default=",".join(PHASES),
                    help=f"comma-separated subset of {','.join(PHASES)}")  # fmt: skip
    ap.add_argument("--local-sync", choices=SYNC_MODES, default=None)
    args = ap.parse_args(argv)
    phases = set(args.phases.split(","))
    if not phases <= set(PHASES):
        ap.error(f"unknown phase in {args.phases!r} (known: {', '.join(PHASES)})")
    if shutil.which("wrk") is None:
        print("bench serve needs wrk (apt-get install wrk)", file=sys.stderr)
        return 2
    load0 = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="lsm-bench-serve-"))
    env = {"LSMSTORE_LOCAL_SYNC": args.local_sync} if args.local_sync else None
    server = start_server(tmp / "home", env=env)
    rows: list[tuple[str, str, str]] = []
    try:
        import httpx

        with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as c:
            r = c.post("/repositories", json={"name": REPO, "storage_namespace": "local://bench"})
            assert r.status_code == 201, r.text
            up = c.post(f"/repositories/{REPO}/branches/main/objects", params={"path": "s/one"},
                        content=b"0123456789abcdef").json()  # fmt: skip
            for i in range(300):
                c.post(f"/repositories/{REPO}/branches/main/objects",
                       params={"path": f"list/{i:04d}"}, content=b"x")  # fmt: skip
        cred = base64.b64encode(":".join(server.admin).encode()).decode()
        hdr = {"Authorization": f"Basic {cred}"}
        pid = server.proc.pid

        def measured(script: str | None, url: str, conns: int,
                     wrk_args: list[str] | None = None) -> dict[str, float]:  # fmt: skip
            cpu0 = _cpu_s(pid)
            r = _wrk(url, conns, args.seconds, hdr, script, wrk_args)
            cpu = _cpu_s(pid) - cpu0
            r["cpu_us"] = cpu / r["requests"] * 1e6 if r["requests"] else 0.0
            return r

        if "stat" in phases:
            s = measured(None, f"{server.url}/api/v1/repositories/{REPO}/refs/main/objects/stat"
                         "?path=s/one", args.connections)  # fmt: skip
            rows.append(("stat/s", f"{s['rps']:,.0f}",
                         f"p50 {s['p50']:.1f} ms, p99 {s['p99']:.1f} ms, "
                         f"server CPU {s['cpu_us']:,.0f} µs/request"))  # fmt: skip
        if "ls" in phases:
            ls = measured(None, f"{server.url}/api/v1/repositories/{REPO}/refs/main/objects/ls"
                          "?prefix=list/", min(64, args.connections))  # fmt: skip
            rows.append(
                (
                    "listing pages/s (100 objects/page)",
                    f"{ls['rps']:,.0f}",
                    f"p50 {ls['p50']:.1f} ms, server CPU {ls['cpu_us']:,.0f} µs/request",
                )
            )
        w = {"rps": 0.0}
        if "upload" in phases or ("halfload" in phases and not args.rate):
            lua = tmp / "upload.lua"
            lua.write_text(UPLOAD_LUA)
            w = measured(str(lua), server.url + "/", args.connections, ["w"])
            rows.append(
                (
                    f"single-object writes/s (upload, {args.connections} conns)",
                    f"{w['rps']:,.0f}",
                    f"p50 {w['p50']:.1f} ms, p99 {w['p99']:.1f} ms, "
                    f"non-2xx {w['non2xx']:.0f}, server CPU {w['cpu_us']:,.0f} µs/request",
                )
            )
        if "link" in phases:
            llua = tmp / "link.lua"
            llua.write_text(LINK_LUA)
            lk = measured(str(llua), server.url + "/", args.connections,
                          [up["physical_address"], up["checksum"],
                           "%012d" if args.increasing_keys else "%d"])  # fmt: skip
            rows.append(
                (
                    f"single-object writes/s (one link per request, {args.connections} conns)",
                    f"{lk['rps']:,.0f}",
                    f"p50 {lk['p50']:.1f} ms, p99 {lk['p99']:.1f} ms, non-2xx "
                    f"{lk['non2xx']:.0f}, server CPU {lk['cpu_us']:,.0f} µs/request",
                )
            )
        if "batch" in phases:
            # JSON, not msgpack: wrk's Lua hands the body to C as a string and would cut a
            # msgpack body at its first NUL byte (the same positional shape either way).
            body = tmp / "batch.json"
            blua = tmp / "batch.lua"
            blua.write_text(BODY_LUA.format(body=body))
            value = base64.b64encode(b"v" * 100).decode()
            for what, entries in (
                ("links", [["link", f"b/{i:08d}", up["physical_address"], up["size_bytes"],
                            up["checksum"]] for i in range(args.batch)]),
                ("kv puts", [["kv", f"kv/{i:08d}", value] for i in range(args.batch)]),
            ):  # fmt: skip
                body.write_bytes(json.dumps(entries).encode())
                b = measured(str(blua), f"{server.url}/api/v1/lsm/repositories/{REPO}/branches"
                             "/main/batch", 8)  # fmt: skip
                rows.append((f"records/s through the batch endpoint ({args.batch} {what}/request)",
                             f"{b['rps'] * args.batch:,.0f}",
                             f"{b['rps']:,.0f} requests/s, p50 {b['p50']:.1f} ms, non-2xx "
                             f"{b['non2xx']:.0f}, server CPU {b['cpu_us']:,.0f} µs/request",
                             ))  # fmt: skip
        if "halfload" in phases:
            half = args.rate or max(100.0, w["rps"] / 2)
            ol = open_loop(server, half, args.seconds)
            what = "fixed rate" if args.rate else "half load"
            rows.append((f"upload latency at {what} ({half:,.0f}/s, open loop)",
                         f"p50 {ol['p50']:.1f} ms", f"p99 {ol['p99']:.1f} ms, p99.9 "
                         f"{ol['p999']:.1f} ms ({ol['n']:,} acked, {ol['failed']:,} failed; "
                         f"sends late by p99 {ol['late_p99']:.1f} ms; CPU per upload: "
                         f"server {ol['server_cpu_us']:,.0f} µs, client "
                         f"{ol['client_cpu_us']:,.0f} µs)"))  # fmt: skip
    finally:
        server.stop()
    if "app" in phases:
        us = asyncio.run(app_cpu(tmp / "app"))
        rows.append(("ASGI app in process: CPU per stat", f"{us:,.1f} µs", "no sockets"))
    if "applink" in phases:
        import uvloop  # as the server runs

        us = uvloop.run(app_cpu(tmp / "applink", 25_600, "link"))
        rows.append(("ASGI app in process: CPU per one-link request", f"{us:,.1f} µs",
                     "no sockets; 256 at a time"))  # fmt: skip
    if "appbatch" in phases:
        import uvloop

        us = uvloop.run(app_cpu(tmp / "appbatch", 800, "batch", args.batch))
        rows.append((f"ASGI app in process: CPU per JSON batch request of {args.batch} links",
                     f"{us:,.0f} µs", "no sockets; 8 at a time; local:// namespace"))  # fmt: skip
    if "appkv" in phases:
        import uvloop

        us = uvloop.run(app_cpu(tmp / "appkv", 1600, "kv", args.batch))
        rows.append((f"ASGI app in process: CPU per JSON batch request of {args.batch} kv puts",
                     f"{us:,.0f} µs", "no sockets; 8 at a time; local:// namespace"))  # fmt: skip
    if not args.skip_library:
        lib = asyncio.run(library(tmp / "lib", args.seconds, args.batch))
        rows.append(("library: uploads/s (256 tasks)", f"{lib['writes']:,.0f}", "same machine"))
        rows.append(("library: link_many records/s", f"{lib['records']:,.0f}", ""))
        rows.append(("library: stat_object/s (256 tasks)", f"{lib['stats']:,.0f}", ""))
    load1 = os.getloadavg()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"\nbench serve, nproc={os.cpu_count()}, {when}, "
          f"load {load0[0]:.1f} -> {load1[0]:.1f}, args {json.dumps(vars(args))}\n")  # fmt: skip
    print("| measure | value | detail |\n|---|---|---|")
    for row in rows:
        print(f"| {row[0]} | {row[1]} | {row[2]} |")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
