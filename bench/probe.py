"""Health probes during maximal batches: how long ``/healthz`` waits while the server
stages the largest batches a request may hold.

``python -m bench probe [--batches 5] [--entries 100000]`` starts a real server
process (embedded default, fresh ``$LSMSTORE_HOME``), posts ``--batches`` msgpack
batches of ``--entries`` ``kv`` entries (96-byte values) one after the other, and
meanwhile probes ``/healthz`` from another connection every 5 ms.  Prints the batches'
wall time and the probes' p50, p99 and worst latency, with the load average (the
machine may be shared: compare trees in one window, alternately).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import threading
import time
from pathlib import Path

import httpx
import msgpack

from lsmstore.testing.server_process import start_server


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench probe")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--entries", type=int, default=100_000)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    bodies = [
        msgpack.packb(
            [
                ["kv", b"k/%d/%07d" % (j, i), hashlib.sha256(b"%d" % i).digest() * 3]
                for i in range(args.entries)
            ]
        )
        for j in range(args.batches)
    ]
    srv = start_server(Path(tempfile.mkdtemp(prefix="bench-probe-")) / "home")
    try:
        with httpx.Client(base_url=srv.api, auth=srv.admin, timeout=600) as c:
            r = c.post(
                "/repositories", json={"name": "probe", "storage_namespace": "local://probe"}
            )
            r.raise_for_status()
            done = threading.Event()
            latencies: list[float] = []

            def probe() -> None:
                with httpx.Client(base_url=srv.url, timeout=600) as p:
                    while not done.is_set():
                        t = time.perf_counter()
                        p.get("/healthz").raise_for_status()
                        latencies.append(time.perf_counter() - t)
                        time.sleep(0.005)

            thread = threading.Thread(target=probe)
            thread.start()
            started = time.perf_counter()
            for body in bodies:
                r = c.post("/lsm/repositories/probe/branches/main/batch", content=body,
                           headers={"Content-Type": "application/msgpack"})  # fmt: skip
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
        f"| {args.batches} batches of {args.entries:,} kv | {elapsed:.2f} s | probes "
        f"{len(latencies)}: p50 {ms(0.5)}, p99 {ms(0.99)}, max {ms(1.0)} | load "
        f"{load:.1f} -> {os.getloadavg()[0]:.1f} |"
    )
    return 0
