"""The server outlives an outage of its RefStore: a real redis-server is killed under a
running server and started again; meanwhile the server stays up, answers typed errors
(never a 500), reports not-ready, and resumes on its own when Redis is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lsmstore.testing.server_process import ServerProcess, start_server
from lsmstore.testing.servers import RedisServer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def redis_aof(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(appendonly=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_server_rides_out_a_refstore_outage(tmp_path: Path, redis_aof: RedisServer) -> None:
    server: ServerProcess = start_server(
        tmp_path / "home", "--refstore", redis_aof.url,
        env={"LSMSTORE_SERVER_AUTH_SECRET_KEY": "s" * 48},
    )  # fmt: skip
    try:
        auth = httpx.BasicAuth(*server.admin)
        with httpx.Client(base_url=server.api, auth=auth, timeout=60) as c:
            r = c.post("/repositories", json={"name": "rep", "storage_namespace": "local://r"})
            assert r.status_code == 201, r.text

            def upload(path: str, body: bytes) -> httpx.Response:
                return c.post(
                    "/repositories/rep/branches/main/objects", params={"path": path}, content=body
                )

            assert upload("before", b"1").status_code == 201
            assert httpx.get(server.url + "/readyz").status_code == 200

            redis_aof.kill()
            down = httpx.get(server.url + "/readyz", timeout=60)
            assert down.status_code == 503 and "refstore" in down.json()["message"]
            failed = upload("during", b"2")
            assert failed.status_code == 503, failed.text  # unavailable, not a crash
            assert server.proc.poll() is None  # still running

            redis_aof.restart()
            assert httpx.get(server.url + "/readyz", timeout=60).status_code == 200
            assert upload("after", b"3").status_code == 201
            for path, body in (("before", b"1"), ("after", b"3")):
                got = c.get("/repositories/rep/refs/main/objects", params={"path": path})
                assert got.status_code == 200 and got.content == body
    finally:
        assert server.stop() == 0
