"""The remote client against servers that misbehave (a real HTTP server on loopback
that answers garbage or errors, and a port nobody listens on), and the write
coalescer's rules: typed errors in Python, one-line errors and exit codes on the CLI."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import lsmstore
from lsmstore.cli.exitcodes import ExitCode
from lsmstore.errors import (
    InvalidInputError,
    InvalidURLError,
    PermissionDeniedError,
    UnavailableError,
)
from lsmstore.remote.batcher import Batcher
from lsmstore.testing.servers import free_port
from tests.helpers.cli import Cli

CREDS = {"access_key_id": "AKIATEST", "secret_access_key": "secret"}


class Answer(BaseHTTPRequestHandler):
    """Answers every request with the server's ``status``/``body`` of the moment."""

    status = 200
    body = b"<html>not json</html>"
    content_type = "text/html"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(self.server.status)  # type: ignore[attr-defined]
        self.send_header("Content-Type", self.server.content_type)  # type: ignore[attr-defined]
        body = self.server.body  # type: ignore[attr-defined]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    server.status, server.body, server.content_type = 200, b"<html>hi</html>", "text/html"  # type: ignore[attr-defined]
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()


def url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def answer(server: ThreadingHTTPServer, status: int, body: Any) -> None:
    server.status = status  # type: ignore[attr-defined]
    server.body = json.dumps(body).encode() if not isinstance(body, bytes) else body  # type: ignore[attr-defined]
    server.content_type = "application/json"  # type: ignore[attr-defined]


async def test_garbage_down_and_refusals_are_typed(http: ThreadingHTTPServer) -> None:
    async with lsmstore.connect(url(http), **CREDS) as store:
        with pytest.raises(UnavailableError, match="garbage"):
            await store.get_repository("r")
        answer(http, 200, {"id": "r"})  # JSON, but not a repository
        with pytest.raises(UnavailableError, match="garbage"):
            await store.get_repository("r")
        answer(http, 200, {"results": "nope"})
        with pytest.raises(UnavailableError, match="garbage"):
            await store.list_repositories()
        answer(http, 401, {"message": "invalid credentials"})
        with pytest.raises(PermissionDeniedError) as e:
            await store.list_repositories()
        assert e.value.status == 401 and isinstance(e.value, PermissionError)
        answer(http, 500, {"message": "internal error"})
        with pytest.raises(UnavailableError) as un:
            await store.delete_repository("r")
        assert un.value.outcome_unknown  # a write the server may have applied
        answer(http, 404, {"message": "repository not found: r"})  # no type: by the request
        with pytest.raises(lsmstore.RepositoryNotFoundError):
            await store.get_repository("r")
        # a typed body: the type decides, whatever the message says
        answer(http, 404, {"message": "repository not found: r", "type": "RefNotFoundError"})
        with pytest.raises(lsmstore.RefNotFoundError):
            await store.get_repository("r")
        answer(http, 400, {"message": "nothing to commit", "type": "InvalidNameError"})
        with pytest.raises(lsmstore.InvalidNameError):
            await store.list_repositories()
        answer(http, 400, {"message": "reworded", "type": "NothingToCommitError"})
        with pytest.raises(lsmstore.NothingToCommitError):
            await store.list_repositories()
        answer(http, 404, {"message": "gone", "type": "NoSuchTypeYet"})  # a newer server's
        with pytest.raises(lsmstore.RepositoryNotFoundError):
            await store.get_repository("r")

    down = f"http://127.0.0.1:{free_port()}"
    async with lsmstore.connect(down, **CREDS) as store:
        with pytest.raises(UnavailableError, match="unreachable") as un:
            await store.list_repositories()
        assert not un.value.outcome_unknown


async def test_bad_urls_and_missing_credentials() -> None:
    with pytest.raises(InvalidInputError, match="no credentials"):
        lsmstore.connect("http://127.0.0.1:8000")
    with pytest.raises(InvalidURLError):
        lsmstore.connect("http://", **CREDS)
    with pytest.raises(InvalidURLError):
        lsmstore.connect("http://127.0.0.1:99999", **CREDS)


def test_cli_errors_are_one_line(http: ThreadingHTTPServer, tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home", {"LSMSTORE_ACCESS_KEY_ID": "AKIATEST",
                                  "LSMSTORE_SECRET_ACCESS_KEY": "secret"})  # fmt: skip
    garbage = cli("--server", url(http), "repo", "list")
    assert garbage.returncode == ExitCode.UNAVAILABLE
    assert garbage.stderr.startswith("lsmstore: error: the server answered garbage")
    assert len(garbage.stderr.splitlines()) == 1
    down = cli("--server", f"http://127.0.0.1:{free_port()}", "repo", "list")
    assert down.returncode == ExitCode.UNAVAILABLE and "unreachable" in down.stderr
    assert "Traceback" not in down.stderr
    answer(http, 403, {"message": "forbidden: role reader cannot write"})
    refused = cli("--server", url(http), "repo", "create", "lsm://xxx")
    assert refused.returncode == ExitCode.PERMISSION and "forbidden" in refused.stderr
    nocreds = Cli(tmp_path / "home")("--server", url(http), "repo", "list")
    assert nocreds.returncode == ExitCode.USAGE and "no credentials" in nocreds.stderr


async def test_batcher_coalesces_keeps_key_order_and_fails_whole_batches() -> None:
    sent: list[list[Any]] = []
    gate = asyncio.Event()
    fail_next = False

    async def send(entries: list[Any]) -> None:
        nonlocal fail_next
        sent.append(entries)
        await gate.wait()
        if fail_next:
            fail_next = False
            raise UnavailableError("boom")

    b = Batcher(send, window_s=0.001, max_entries=100, max_inflight=2)
    gate.set()
    await asyncio.gather(*(b.submit([("put", f"k{i}")], [f"k{i}"], 10) for i in range(250)))
    assert [len(s) for s in sent] == [100, 100, 50]  # coalesced up to max_entries
    assert b.requests == 3 and b.entries == 250

    # a batch touching a key in flight waits for it; disjoint keys go alongside
    sent.clear()
    gate.clear()
    first = asyncio.ensure_future(b.submit([("put", "a", 1)], ["a"], 1))
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(b.submit([("put", "a", 2)], ["a"], 1))
    other = asyncio.ensure_future(b.submit([("put", "z", 1)], ["z"], 1))
    await asyncio.sleep(0.01)
    assert sent == [[("put", "a", 1)]]  # "a" again must wait; "z" is behind it
    gate.set()
    await asyncio.gather(first, second, other)
    assert sent[0] == [("put", "a", 1)] and ("put", "a", 2) in sent[1]

    # a failed request fails every caller of that batch, and only those
    sent.clear()
    fail_next = True
    results = await asyncio.gather(
        *(b.submit([("put", f"f{i}")], [f"f{i}"], 1) for i in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, UnavailableError) for r in results)
    await b.submit([("put", "after")], ["after"], 1)
    await b.flush()
