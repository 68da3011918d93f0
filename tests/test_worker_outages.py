"""Both workers survive their RefStore: a real redis-server is stopped under each running
worker (kill -9) and started again; the worker logs the outage once, reports not-ready on
its health port and in its status file, stays up, resumes on its own, and does the
work that arrived meanwhile.  Then the RefStore restarts *empty*: the worker neither
crashes nor writes anything (no RefStore key, no object) for repositories that no
longer exist.  The same for the object store (moto behind the fault proxy answering
only 503s for a while).  ``--once`` with an unreachable RefStore exits 3 (UNAVAILABLE)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from lsmstore.refstore.base import Ref, RefStore, Repository
from lsmstore.refstore.url import open_refstore
from lsmstore.service import ExitCode
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.local import LocalStore
from lsmstore.storage.s3 import S3Store
from lsmstore.testing.compaction import WorkerProcess, append_l1_file, branch_state, rec
from lsmstore.testing.faultproxy import FaultPlan, FaultProxy
from lsmstore.testing.servers import MOTO_ENV, MotoServer, RedisServer, free_port

#: What each worker logs when it has done its work on the branch.
DONE = {"compactor": ("compaction", "compacted"), "committer": ("commit", "committed")}
ENV = {
    "LSMSTORE_COMPACTION_L1_FILES": "3",
    "LSMSTORE_COMMIT_RANGE_MIN_BYTES": "200",
    "LSMSTORE_COMMIT_RANGE_MAX_BYTES": "2000",
}


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    server = RedisServer(appendonly=True)  # a restart brings the refs back
    server.start()
    try:
        yield server
    finally:
        server.stop()


def redis_keys(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), 30) as s:
        s.sendall(b"DBSIZE\r\n")
        reply = s.recv(64)
    assert reply.startswith(b":"), reply
    return int(reply[1:].strip())


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


async def http_get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


async def add_files(
    rs: RefStore, store: ObjectStore, n: int, seed: int, model: dict[bytes, bytes]
) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        recs = [rec(f"k{rng.randrange(100):03d}", f"v{seed}-{rng.random()}") for _ in range(10)]
        await append_l1_file(rs, store, "alpha", "main", recs)
        for r in sorted({r.key: r for r in recs}.values(), key=lambda r: r.key):
            assert r.value is not None
            model[r.key] = r.value


def done_count(w: WorkerProcess, worker: str) -> int:
    event, outcome = DONE[worker]
    return sum(1 for d in w.events(event) if d.get("outcome") == outcome)


@pytest.mark.parametrize("worker", ["compactor", "committer"])
async def test_worker_rides_out_a_refstore_outage_and_an_empty_restart(
    worker: str, redis: RedisServer, tmp_path: Path
) -> None:
    url = f"{redis.url}?timeout=2"
    ns = tmp_path / "ns"
    store = LocalStore(ns)
    rs = open_refstore(url)
    model: dict[bytes, bytes] = {}
    await rs.create_repository(Repository("alpha", ns.as_uri(), "main"))
    await rs.create_ref("alpha", "main", Ref("branch", ""))
    await add_files(rs, store, 4, 1, model)
    await rs.aclose()

    status = tmp_path / "status.json"
    extra = ["--force"] if worker == "committer" else []
    w = WorkerProcess(
        *("--refstore", url, "--interval", "0.1", "--health-port", "0", "--log-level", "debug"),
        *("--status-file", str(status), *extra),
        env={"LSMSTORE_HOME": str(tmp_path / "home"), **ENV},
        module=worker,
    )
    await w.start()
    try:
        port = (await w.wait_for("started"))["health_port"]
        await w.wait_until(lambda: done_count(w, worker) >= 1, "the first job")
        assert (await http_get(port, "/readyz"))[0] == 200

        # --- the RefStore dies -----------------------------------------------------
        redis.kill()
        await w.wait_until(lambda: w.count("dependency_down") == 1, "dependency_down")
        code, body = await http_get(port, "/readyz")
        assert code == 503 and body["status"] == "unavailable"
        assert body["dependencies"]["refstore"]["up"] is False
        await w.wait_until(lambda: _written(w, "unavailable"), "the status file")
        assert json.loads(status.read_text())["ready"] is False
        assert (await http_get(port, "/healthz"))[0] == 200  # alive all the same
        # more probes fail while it is down: still one line for the outage
        await w.wait_until(lambda: w.count("dependency_still_down") >= 3, "failed probes")
        assert _failures((await http_get(port, "/readyz"))[1]) >= 4
        passes = w.count("pass")
        assert w.proc is not None and w.proc.returncode is None

        # --- it comes back (with its data: AOF) -----------------------------------------
        redis.start()
        await w.wait_until(lambda: w.count("dependency_up") == 1, "dependency_up")
        assert (await http_get(port, "/readyz"))[0] == 200
        assert w.count("dependency_down") == 1  # logged once per change, not per probe
        await w.wait_until(lambda: w.count("pass") > passes, "a pass after the outage")
        rs = open_refstore(url)
        before = done_count(w, worker)
        await add_files(rs, store, 4, 2, model)
        await w.wait_until(lambda: done_count(w, worker) > before, "work after the outage")
        ref = await rs.get_ref("alpha", "main")
        assert await branch_state(rs, store, "alpha", "main", ref) == model
        await rs.aclose()

        # --- it comes back empty ----------------------------------------------------------
        # let the worker finish what it is doing (another pass with nothing to do)
        passes = w.count("pass")
        await w.wait_until(lambda: w.count("pass") > passes + 1, "idle passes")
        objects = await asyncio.to_thread(files_under, ns)
        redis.restart(empty=True)
        passes = w.count("pass")
        await w.wait_until(lambda: w.count("pass") >= passes + 3, "passes on the empty store")
        assert redis_keys(redis.port) == 0  # no lease, no ref, no repository written
        assert await asyncio.to_thread(files_under, ns) == objects  # nothing written
        assert not w.events("crashed")
        code, body = await http_get(port, "/readyz")
        assert code == 200, body

        w.proc.send_signal(signal.SIGTERM)
        assert await w.wait(120) == ExitCode.OK
        assert w.events("exited")[-1]["code"] == 0
        assert json.loads(status.read_text())["status"] == "stopping"
    finally:
        if w.proc is not None and w.proc.returncode is None:
            w.proc.kill()
            await w.proc.wait()


def _written(w: WorkerProcess, status: str) -> bool:
    return any(d["status"] == status for d in w.events("status_written"))


def _failures(body: dict[str, Any]) -> int:
    return int(body["dependencies"]["refstore"].get("failures", 0))


@pytest.mark.parametrize("worker", ["compactor", "committer"])
async def test_once_against_an_unreachable_refstore_exits_unavailable(
    worker: str, tmp_path: Path
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0?timeout=1"
    w = WorkerProcess(
        "--refstore",
        url,
        "--once",
        env={"LSMSTORE_HOME": str(tmp_path / "home")},
        module=worker,
    )
    await w.start()
    assert await w.wait(120) == ExitCode.UNAVAILABLE
    (down,) = w.events("dependency_down")
    assert down["dependency"] == "refstore" and "Unavailable" in down["error"]
    assert w.events("exited")[0]["status"] == "UNAVAILABLE"


@pytest.mark.parametrize("worker", ["compactor", "committer"])
async def test_worker_rides_out_an_object_store_outage(
    worker: str, redis_server_url: str, moto: MotoServer, tmp_path: Path
) -> None:
    """S3 (moto behind the fault proxy) answers every request with 503 for a while: the
    worker marks the object store down, is not ready, and resumes when S3 answers."""
    from aiobotocore.session import get_session

    bucket = f"o-{uuid.uuid4().hex[:12]}"
    async with get_session().create_client(
        "s3", endpoint_url=moto.endpoint, region_name="us-east-1"
    ) as client:
        await client.create_bucket(Bucket=bucket)
    up = urlparse(moto.endpoint)
    assert up.hostname is not None and up.port is not None
    proxy = FaultProxy(up.hostname, up.port, rng=random.Random(3))
    await proxy.start()
    url = f"{redis_server_url}?prefix=o{uuid.uuid4().hex[:8]}:"
    rs = open_refstore(url)
    store = S3Store(bucket, "alpha", endpoint_url=moto.endpoint)  # bypasses the proxy
    ns = f"s3://{bucket}/alpha?endpoint_url={proxy.endpoint}&max_attempts=1"
    model: dict[bytes, bytes] = {}
    extra = ["--force"] if worker == "committer" else []
    w = WorkerProcess(
        *("--refstore", url, "--interval", "0.1", "--health-port", "0", *extra),
        env={"LSMSTORE_HOME": str(tmp_path / "home"), **ENV, **MOTO_ENV},
        module=worker,
    )
    try:
        await rs.create_repository(Repository("alpha", ns, "main"))
        await rs.create_ref("alpha", "main", Ref("branch", ""))
        await add_files(rs, store, 4, 1, model)
        await w.start()
        port = (await w.wait_for("started"))["health_port"]
        await w.wait_until(lambda: done_count(w, worker) >= 1, "the first job")

        proxy.plan = FaultPlan(error=1.0)  # S3 answers nothing but 503
        await add_files(rs, store, 4, 2, model)  # work the worker cannot do now
        await w.wait_until(
            lambda: any(d["dependency"] == "objects" for d in w.events("dependency_down")),
            "the object store marked down",
        )
        code, body = await http_get(port, "/readyz")
        assert code == 503 and body["dependencies"]["objects"]["up"] is False
        assert body["dependencies"]["refstore"]["up"] is True
        before = done_count(w, worker)

        proxy.plan = FaultPlan()
        await w.wait_until(
            lambda: any(d["dependency"] == "objects" for d in w.events("dependency_up")),
            "the object store back",
        )
        await w.wait_until(lambda: done_count(w, worker) > before, "work after the outage")
        assert await branch_state(rs, store, "alpha", "main") == model
        assert (await http_get(port, "/readyz"))[0] == 200
        assert w.proc is not None
        w.proc.send_signal(signal.SIGTERM)
        assert await w.wait(120) == ExitCode.OK
    finally:
        if w.proc is not None and w.proc.returncode is None:
            w.proc.kill()
            await w.proc.wait()
        await proxy.aclose()
        await store.aclose()
        await rs.aclose()
