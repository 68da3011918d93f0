"""Health probes during maximal batches: how long ``/healthz`` waits while the server
stages the largest batches a request may hold.

``python -m bench probe [--batches 5] [--entries 100000] [--format msgpack|json]
[--switch-ms MS] [--trace]`` starts a real server process (embedded default, fresh
``$LSMSTORE_HOME``; ``--switch-ms``: its ``server_switch_interval_ms``), posts
``--batches`` batches of ``--entries`` ``kv`` entries (96-byte values; base64 in JSON)
one after the other, and meanwhile probes ``/healthz`` from another connection every
5 ms.  Prints the batches' wall time and the probes' p50, p99 and worst latency, with
the load average (the machine may be shared: compare trees in one window,
alternately).

``--trace`` also instruments the server process (a ``sitecustomize`` module on its
``PYTHONPATH``, nothing in the product): the cyclic collector's pauses by generation
(``gc.callbacks``), the event loop's lags (a task sleeping 1 ms in a loop), and the
longest waits of a thread that sleeps 1 ms in a loop (how long another thread held the
GIL, or the CPU was elsewhere: the process's CPU time over the wait tells which) with
where the other threads were.  Each probe slower than 25 ms is printed with the
collections, lags and waits that overlapped it (one monotonic clock for both
processes).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import httpx
import msgpack
import orjson

from lsmstore.testing.server_process import start_server

#: The server process's instrumentation (``--trace``): written to a ``sitecustomize.py``
#: on its ``PYTHONPATH``; dumps to ``$BENCH_PROBE_TRACE``.<pid> at exit.
TRACER = r"""
import atexit, gc, json, os, sys, threading, time

_out = os.environ.get("BENCH_PROBE_TRACE")
if _out:
    _gcs, _gaps, _start = [], [], {}
    _loop = {"tick": None, "thread": None}
    _stalls = {}

    def _frames(frame, depth):
        names = []
        f = frame
        while f is not None and len(names) < depth:
            code = f.f_code
            if f is frame or "/lsmstore/" in code.co_filename:
                names.append(f"{code.co_filename.rsplit('/', 2)[-1]}:{f.f_lineno} {code.co_name}")
            f = f.f_back
        return " < ".join(names)

    def _on_gc(phase, info):
        if phase == "start":
            _start["t"] = time.perf_counter()
        elif "t" in _start:
            t = _start.pop("t")
            _gcs.append((info["generation"], t, time.perf_counter() - t, info["collected"]))

    gc.callbacks.append(_on_gc)

    def _ticker():
        while True:
            t, c = time.perf_counter(), time.process_time()
            time.sleep(0.001)
            gap = time.perf_counter() - t - 0.001
            cpu = time.process_time() - c
            tick = _loop["tick"]
            if tick is not None and time.perf_counter() - tick > 0.02:
                # the loop has not ticked for 20 ms: where its thread is
                frame = sys._current_frames().get(_loop["thread"])
                if frame is not None:
                    site = _frames(frame, 3)
                    _stalls[site] = _stalls.get(site, 0) + 1
            if gap > 0.005:
                where = []
                if gap > 0.025:  # who had the GIL: its frame is still at the long call
                    me = threading.get_ident()
                    for ident, frame in sys._current_frames().items():
                        if ident == me:
                            continue
                        f, names = frame, []
                        while f is not None and len(names) < 2:
                            code = f.f_code
                            if f is frame or "/lsmstore/" in code.co_filename:
                                names.append(f"{code.co_filename.rsplit('/', 2)[-1]}:"
                                             f"{f.f_lineno} {code.co_name}")
                            f = f.f_back
                        where.append(" < ".join(names))
                _gaps.append((t, gap, where, cpu))

    threading.Thread(target=_ticker, daemon=True, name="bench-ticker").start()

    # the event loop's own lag: a task asking for a 1 ms sleep, on every asyncio.run
    import asyncio, asyncio.runners
    _lags, _run = [], asyncio.runners.Runner.run

    async def _lag():
        _loop["thread"] = threading.get_ident()
        while True:
            t = _loop["tick"] = time.perf_counter()
            await asyncio.sleep(0.001)
            lag = time.perf_counter() - t - 0.001
            if lag > 0.005:
                _lags.append((t, lag))

    def _traced_run(self, coro, *, context=None):
        async def main():
            task = asyncio.ensure_future(_lag())
            try:
                return await coro
            finally:
                task.cancel()
        return _run(self, main(), context=context)

    asyncio.runners.Runner.run = _traced_run

    def _dump():
        with open(f"{_out}.{os.getpid()}", "w") as f:
            json.dump({"argv": sys.argv, "gc": _gcs, "gaps": _gaps, "lags": _lags,
                       "stalls": sorted(_stalls.items(), key=lambda x: -x[1])[:12],
                       "switch": sys.getswitchinterval(),
                       "threshold": gc.get_threshold()}, f)

    atexit.register(_dump)
"""


def _report_trace(prefix: str, slow: list[tuple[float, float]]) -> None:
    """Print the server's collections and GIL waits (``--trace``), and what
    overlapped each slow probe."""
    directory, stem = os.path.split(prefix)
    for name in sorted(os.listdir(directory)):
        if not name.startswith(stem + "."):
            continue
        with open(os.path.join(directory, name)) as f:
            data = json.load(f)
        if "server" not in " ".join(data["argv"]):
            continue
        gcs, gaps = data["gc"], data["gaps"]
        print(f"server: gc threshold {data['threshold']}, switch interval "
              f"{data['switch'] * 1000:.1f} ms")  # fmt: skip
        for gen in (0, 1, 2):
            d = sorted(g[2] for g in gcs if g[0] == gen)
            if d:
                print(
                    f"  gen{gen} collections {len(d)}: total {sum(d) * 1000:.0f} ms, "
                    f"max {d[-1] * 1000:.1f} ms, over 10 ms {sum(x > 0.01 for x in d)}"
                )
        lag = sorted(x[1] for x in data["lags"])
        print(
            f"  event loop lags over 5 ms: {len(lag)}, over 25 ms: "
            f"{sum(x > 0.025 for x in lag)}, max {lag[-1] * 1000 if lag else 0:.1f} ms"
        )
        g = sorted(x[1] for x in gaps)
        print(f"  ticker waits over 5 ms: {len(g)}, over 25 ms: {sum(x > 0.025 for x in g)}, "
              f"max {g[-1] * 1000 if g else 0:.1f} ms")  # fmt: skip
        for t0, lat in slow:
            t1 = t0 + lat
            over_gc = [f"gen{c[0]} {c[2] * 1000:.0f}" for c in gcs
                       if c[1] < t1 and c[1] + c[2] > t0 and c[2] > 0.002]  # fmt: skip
            over_gap = [f"{w[1] * 1000:.0f}" for w in gaps
                        if w[0] < t1 and w[0] + w[1] > t0 and w[1] > 0.01]  # fmt: skip
            over_lag = [f"{w[1] * 1000:.0f}" for w in data["lags"]
                        if w[0] < t1 and w[0] + w[1] > t0 and w[1] > 0.01]  # fmt: skip
            print(
                f"  probe {lat * 1000:.1f} ms: gc [{', '.join(over_gc)}] ms, "
                f"loop lags [{', '.join(over_lag)}] ms, "
                f"ticker waits [{', '.join(over_gap)}] ms"
            )
        print("  the event loop's thread while the loop had not ticked for 20 ms (samples):")
        for site, n in data["stalls"]:
            print(f"    {n:4d} {site}")
        for w in sorted(gaps, key=lambda w: -w[1])[:8]:
            print(
                f"  wait {w[1] * 1000:.0f} ms (process CPU {w[3] * 1000:.0f} ms), threads at: "
                f"{'; '.join(x for x in w[2] if not x.startswith('thread.py'))}"
            )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench probe")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--format", choices=("msgpack", "json"), default="msgpack")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument(
        "--switch-ms", type=float, help="the server's server_switch_interval_ms (default: its own)"
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    entries: list[list[tuple[str, bytes, bytes]]] = [
        [("kv", b"k/%d/%07d" % (j, i), hashlib.sha256(b"%d" % i).digest() * 3)
         for i in range(args.entries)]
        for j in range(args.batches)
    ]  # fmt: skip
    if args.format == "json":
        bodies = [
            orjson.dumps([[op, k.decode(), base64.b64encode(v).decode()] for op, k, v in batch])
            for batch in entries
        ]
    else:
        bodies = [msgpack.packb(batch) for batch in entries]
    del entries
    tmp = Path(tempfile.mkdtemp(prefix="bench-probe-"))
    env: dict[str, str] = {}
    if args.trace:
        (tmp / "site").mkdir()
        (tmp / "site" / "sitecustomize.py").write_text(TRACER)
        root = str(Path(__file__).resolve().parent.parent)
        env = {"PYTHONPATH": os.pathsep.join([str(tmp / "site"), root]),
               "BENCH_PROBE_TRACE": str(tmp / "trace")}  # fmt: skip
    if args.switch_ms:
        env["LSMSTORE_SERVER_SWITCH_INTERVAL_MS"] = str(args.switch_ms)
    srv = start_server(tmp / "home", env=env)
    try:
        with httpx.Client(base_url=srv.api, auth=srv.admin, timeout=600) as c:
            r = c.post(
                "/repositories", json={"name": "probe", "storage_namespace": "local://probe"}
            )
            r.raise_for_status()
            done = threading.Event()
            latencies: list[float] = []
            slow: list[tuple[float, float]] = []

            def probe() -> None:
                with httpx.Client(base_url=srv.url, timeout=600) as p:
                    while not done.is_set():
                        t = time.perf_counter()
                        p.get("/healthz").raise_for_status()
                        latencies.append(time.perf_counter() - t)
                        if latencies[-1] > 0.025:
                            slow.append((t, latencies[-1]))
                        time.sleep(0.005)

            thread = threading.Thread(target=probe)
            thread.start()
            started = time.perf_counter()
            for body in bodies:
                r = c.post("/lsm/repositories/probe/branches/main/batch", content=body,
                           headers={"Content-Type": f"application/{args.format}"})  # fmt: skip
                r.raise_for_status()
            elapsed = time.perf_counter() - started
            done.set()
            thread.join()
    finally:
        srv.stop()
    latencies.sort()

    def ms(q: float) -> str:
        return f"{latencies[min(len(latencies) - 1, int(len(latencies) * q))] * 1000:.1f} ms"

    print(
        f"| {args.batches} {args.format} batches of {args.entries:,} kv | {elapsed:.2f} s | probes "
        f"{len(latencies)}: p50 {ms(0.5)}, p99 {ms(0.99)}, max {ms(1.0)} | load "
        f"{load:.1f} -> {os.getloadavg()[0]:.1f} |"
    )
    if args.trace:
        _report_trace(str(tmp / "trace"), slow)
    return 0
