"""The common service flags on the server: ``--health-port`` answers liveness and
readiness without credentials, ``--status-file`` holds the readiness state from start
to stop (a real server process), and a failing backend turns both to unavailable (the
probes over a real Store whose RefStore is closed under them)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from lsmstore.config import Config
from lsmstore.server.probes import ServerProbes
from lsmstore.server.serve import make_context
from lsmstore.testing.server_process import start_server


def _status(path: Path, want: str, timeout: float = 60.0) -> dict[str, Any]:
    """The status file once it says ``want`` (it is rewritten by a background task)."""
    deadline = time.monotonic() + timeout
    while True:
        doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        if doc.get("status") == want or time.monotonic() > deadline:
            return doc
        time.sleep(0.02)


def test_health_port_and_status_file(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    proc = start_server(tmp_path / "home", "--health-port", "0", "--status-file", str(status))
    try:
        port = proc.events("listening")[0]["health_port"]
        base = f"http://127.0.0.1:{port}"
        ready = httpx.get(base + "/readyz", timeout=30)  # no credentials
        assert ready.status_code == 200, ready.text
        assert ready.json()["ready"] and ready.json()["service"] == "server"
        assert ready.json()["dependencies"]["backends"]["up"]
        assert httpx.get(base + "/healthz", timeout=30).json()["status"] == "alive"
        assert httpx.get(base + "/metrics", timeout=30).status_code == 404  # nothing else
        doc = _status(status, "ready")
        assert doc["ready"] and doc["pid"] == proc.proc.pid
    finally:
        code = proc.stop()
    assert code == 0
    assert json.loads(status.read_text())["status"] == "stopping"


def test_a_taken_health_port_stops_the_server_at_start(tmp_path: Path) -> None:
    first = start_server(tmp_path / "a", "--health-port", "0")
    try:
        port = first.events("listening")[0]["health_port"]
        try:
            second = start_server(tmp_path / "b", "--health-port", str(port), timeout=60)
        except RuntimeError as e:  # it exited before listening
            assert "in use" in str(e), e
        else:
            second.stop()
            raise AssertionError("a second server started on a taken health port")
    finally:
        first.stop()


async def test_a_failing_backend_makes_the_server_unavailable(tmp_path: Path) -> None:
    ctx = make_context(Config(home=tmp_path / "home"))
    status = tmp_path / "status.json"
    probes = ServerProbes(ctx, status_file=str(status), health_port=0)
    await probes.start()
    try:
        await probes.listening()
        assert probes.readiness.status == "ready"
        await ctx.store.refstore.aclose()  # the RefStore goes away under the server
        await probes.check()
        assert probes.readiness.status == "unavailable" and not probes.readiness.ready
        assert probes.health is not None
        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://127.0.0.1:{probes.health.port}/readyz")
        assert r.status_code == 503
        assert "refstore" in r.json()["dependencies"]["backends"]["error"]
        probes.draining()
        assert probes.readiness.status == "stopping"
    finally:
        await probes.aclose()
        await ctx.store.aclose()
    assert json.loads(status.read_text())["status"] == "stopping"
