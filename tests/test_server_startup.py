"""What a server does before its first request so that its first maximal batch does
not stall other requests (docs/server.md, "Health probes during maximal batches"): the
startup state frozen out of the cyclic collector's full collections (``gc_freeze``;
the ``listening`` event says how many objects), the encoder's worker process started
(a real server process; its children read from ``/proc``), and the GIL's switch
interval set (``server_switch_interval_ms``)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import msgpack

from lsmstore.server.serve import EXECUTOR_THREADS, start_threads
from lsmstore.testing.server_process import start_server


def _children(pid: int) -> list[str]:
    """The command lines of ``pid``'s child processes."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError, ValueError):  # exited meanwhile
            continue
    return out


def _encoder_workers(pid: int) -> list[str]:
    return [c for c in _children(pid) if "lsmstore.staging.encoder" in c]


def test_the_server_freezes_its_startup_state_and_starts_the_encoder_before_any_write(
    tmp_path: Path,
) -> None:
    srv = start_server(tmp_path / "home")
    try:
        frozen = srv.events("listening")[0]["gc_frozen"]
        assert isinstance(frozen, int) and frozen > 1000  # modules, classes, functions
        # started in the background as the server listens: wait for it, no request made
        deadline = time.monotonic() + 120
        while not _encoder_workers(srv.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_encoder_workers(srv.proc.pid)) == 1
        with httpx.Client(base_url=srv.api, auth=srv.admin, timeout=120) as c:
            r = c.post("/repositories", json={"name": "rep", "storage_namespace": "local://r"})
            assert r.status_code == 201, r.text
            body = msgpack.packb([["kv", b"k%05d" % i, b"v"] for i in range(5000)])
            r = c.post("/lsm/repositories/rep/branches/main/batch", content=body,
                       headers={"Content-Type": "application/msgpack"})  # fmt: skip
            assert r.status_code == 200 and r.json() == {"entries": 5000}, r.text
        assert len(_encoder_workers(srv.proc.pid)) == 1  # the same worker, not another
    finally:
        assert srv.stop() == 0


def _pool() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("lsmstore-server")]


async def test_start_threads_starts_every_thread_of_the_executor_at_once() -> None:
    """A thread started on demand made the event loop wait for it (``Thread.start``)
    in the middle of a batch: the server (``serve``) starts all of its executor's
    threads first.  Here on this test's own loop."""
    loop = asyncio.get_running_loop()
    try:
        await start_threads(loop)
        pool = _pool()
        assert len(pool) == EXECUTOR_THREADS
        # as many calls at once as there are threads: none is started for them
        gate = threading.Barrier(EXECUTOR_THREADS + 1)
        calls = [asyncio.to_thread(gate.wait, 60) for _ in range(EXECUTOR_THREADS)]
        done = asyncio.gather(*calls)
        await asyncio.sleep(0)  # every call submitted to the executor
        gate.wait(60)  # every call in a thread of its own (else: BrokenBarrierError)
        await done
        assert set(_pool()) == set(pool)
    finally:
        await loop.shutdown_default_executor()
    assert _pool() == []


def test_the_servers_switch_interval_is_its_setting(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "home")
    try:
        assert srv.events("listening")[0]["switch_interval_ms"] == 1.0  # CPython's: 5
    finally:
        assert srv.stop() == 0


def test_gc_freeze_off_leaves_the_servers_collector_alone(tmp_path: Path) -> None:
    env = {"LSMSTORE_GC_FREEZE": "off", "LSMSTORE_SERVER_SWITCH_INTERVAL_MS": "2.5"}
    srv = start_server(tmp_path / "home", env=env)
    try:
        assert srv.events("listening")[0]["gc_frozen"] == 0
        assert srv.events("listening")[0]["switch_interval_ms"] == 2.5
    finally:
        assert srv.stop() == 0
