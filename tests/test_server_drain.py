"""Drain and crash with thousands of writes in flight: every write the server
acknowledged (2xx) is readable afterwards, after SIGTERM (and the server exits 0 within
its deadline, answering what it accepted) and after SIGKILL."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp
import httpx
import pytest

from lsmstore.testing.server_process import ServerProcess, start_server

WRITES = 3000
CONNECTIONS = 1000


async def _load(server: ServerProcess, repo: str, stop_after: int, sig: int) -> dict[str, int]:
    """Fire WRITES uploads over up to CONNECTIONS connections (aiohttp); once
    ``stop_after`` are acknowledged send ``sig``.  Returns {path: status} of every
    request that got an answer."""
    answered: dict[str, int] = {}
    acked = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    timeout = aiohttp.ClientTimeout(total=180)
    headers = {"Authorization": aiohttp.encode_basic_auth(*server.admin)}
    async with aiohttp.ClientSession(
        server.url, connector=connector, headers=headers, timeout=timeout
    ) as session:

        async def one(i: int) -> None:
            path = f"w/{i:05d}"
            try:
                async with session.post(
                    f"/api/v1/repositories/{repo}/branches/main/objects",
                    params={"path": path},
                    data=f"value {i}".encode(),
                ) as r:
                    await r.read()
                    answered[path] = r.status
            except (TimeoutError, aiohttp.ClientError):
                return  # no answer: the outcome is unknown to the client
            if sum(1 for s in answered.values() if s == 201) >= stop_after:
                acked.set()

        tasks = [asyncio.create_task(one(i)) for i in range(WRITES)]
        await asyncio.wait_for(acked.wait(), 180)
        server.proc.send_signal(sig)
        await asyncio.gather(*tasks)
    return answered


def _check_readable(server: ServerProcess, repo: str, acked: list[str]) -> None:
    with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as c:
        listed: set[str] = set()
        after = ""
        while True:
            q = {"prefix": "w/", "after": after, "amount": 1000}
            page = c.get(f"/repositories/{repo}/refs/main/objects/ls", params=q).json()
            listed |= {o["path"] for o in page["results"]}
            if not page["pagination"]["has_more"]:
                break
            after = page["pagination"]["next_offset"]
        missing = [p for p in acked if p not in listed]
        assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"
        for p in acked[:: max(1, len(acked) // 50)]:
            i = int(p.split("/")[1])
            assert c.get(f"/repositories/{repo}/refs/main/objects",
                         params={"path": p}).content == f"value {i}".encode()  # fmt: skip


@pytest.mark.timeout(900)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_every_acknowledged_write_survives(tmp_path: Path, sig: int) -> None:
    home = tmp_path / "home"
    server = start_server(home, env={"LSMSTORE_SERVER_DRAIN_TIMEOUT_S": "60"})
    repo = "drain"
    try:
        with httpx.Client(base_url=server.api, auth=server.admin) as c:
            body = {"name": repo, "storage_namespace": "local://drain"}
            r = c.post("/repositories", json=body)
            assert r.status_code == 201
        answered = asyncio.run(_load(server, repo, WRITES // 4, sig))
        code = server.proc.wait(90)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
    acked = sorted(p for p, s in answered.items() if s == 201)
    assert len(acked) >= WRITES // 4
    if sig == signal.SIGTERM:
        assert code == 0, server.log_lines[-5:]
        # Draining answers what it accepted: no request got a 5xx.
        assert not [s for s in answered.values() if s >= 500]
        assert server.events("draining") and server.events("stopped")
    restarted = start_server(home, admin=server.admin)
    try:
        _check_readable(restarted, repo, acked)
    finally:
        restarted.stop()
