"""The server's HTTP plumbing below the routes: the router's remembered matches, the
request body's timer, and the transport that sends each response in one write
(lsmstore.server.protocol)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from helpers.server import make_repo
from hypothesis import given, settings
from hypothesis import strategies as st

from lsmstore.server.errors import ApiError
from lsmstore.server.http import Request, Response, receive_once
from lsmstore.server.protocol import FLUSH_BYTES, CoalescingTransport
from lsmstore.server.routing import Route, Router
from lsmstore.testing.server_process import ServerProcess


async def _handler(request: Request) -> Response:
    return Response()


def test_router_remembers_matches_and_hands_out_own_params() -> None:
    router = Router()
    router.add(Route("GET", "/api/v1/repositories/{repository}", _handler, "getRepo", "read"))
    router.add(Route("GET", "/api/v1/repositories/{repository}/x", _handler, "getX", "read"))
    route, params, known = router.match("GET", "/api/v1/repositories/r1")
    assert route is not None and route.operation_id == "getRepo" and known
    params["repository"] = "changed by a handler"
    again, params2, _ = router.match("GET", "/api/v1/repositories/r1")
    assert again is route and params2 == {"repository": "r1"}
    assert router.match("POST", "/api/v1/repositories/r1")[0] is None  # 405: known path
    assert router.match("POST", "/api/v1/repositories/r1")[2]
    assert router.match("GET", "/nope") == (None, {}, False)
    assert router.match("HEAD", "/api/v1/repositories/r2")[0] is route  # HEAD -> GET
    long = "/api/v1/repositories/" + "a" * Router.CACHE_PATH_CHARS
    assert router.match("GET", long)[1] == {"repository": "a" * Router.CACHE_PATH_CHARS}
    assert ("GET", long) not in router._cache
    router.add(Route("POST", "/api/v1/repositories/{repository}", _handler, "mk", "admin"))
    assert router.match("POST", "/api/v1/repositories/r1")[0] is not None  # cache cleared


class _Recorder:
    """Stands in for the socket transport: records what reaches it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info {name}"


async def _turn() -> None:
    await asyncio.sleep(0)


def _body_request(receive: Any, timeout_s: float) -> Request:
    scope = {"method": "POST", "path": "/x", "headers": [(b"content-length", b"4")]}
    return Request(scope, receive, max_body_bytes=100, body_timeout_s=timeout_s)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["&", "=", "%", "+", "%41", "%zz", "a", "path", "é", " ", ";",
                                 "/", "%C3%A9", "%ff"]), max_size=12))  # fmt: skip
def test_query_values_are_parse_qsls(parts: list[str]) -> None:
    """The query as the standard parser reads it (blank values kept; a value that
    unescapes to bytes not UTF-8 is a 400), with or without anything to unescape."""
    text = "".join(parts)
    scope = {"method": "GET", "path": "/", "headers": [], "query_string": text.encode()}
    request = Request(scope, receive_once(b""), max_body_bytes=0, body_timeout_s=1.0)
    try:
        want: dict[str, list[str]] = {}
        for k, v in parse_qsl(text, keep_blank_values=True, errors="strict"):
            want.setdefault(k, []).append(v)
    except UnicodeDecodeError:
        with pytest.raises(ApiError) as e:
            request.query  # noqa: B018
        assert e.value.status == 400
        return
    assert request.query == want


async def test_body_arriving_in_time_is_read_and_its_timer_cancelled() -> None:
    parts = iter([{"type": "http.request", "body": b"ab", "more_body": True},
                  {"type": "http.request", "body": b"cd", "more_body": False}])  # fmt: skip

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0)
        return next(parts)

    loop = asyncio.get_running_loop()
    assert await _body_request(receive, 0.05).body() == b"abcd"
    await asyncio.sleep(0.1)  # past the timeout: a timer left behind would cancel us now
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]
    assert loop.is_running()


async def test_body_that_stops_arriving_is_408_and_the_task_stays_usable() -> None:
    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # a client that sends nothing more
        raise AssertionError("unreachable")

    with pytest.raises(ApiError) as e:
        await _body_request(receive, 0.01).body()
    assert e.value.status == 408
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]
    await asyncio.sleep(0)  # not cancelled again


async def test_cancelling_a_body_read_is_a_cancellation_not_a_408() -> None:
    started = asyncio.Event()

    async def receive() -> dict[str, Any]:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    reader = asyncio.create_task(_body_request(receive, 60).body())
    await started.wait()
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader


async def test_writes_of_one_loop_turn_leave_together() -> None:
    inner = _Recorder()
    t: Any = CoalescingTransport(inner, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    t.write(b"{}")
    assert inner.writes == []
    await _turn()
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
    t.write(b"x" * FLUSH_BYTES)  # past the bound: at once
    assert inner.writes[-1] == b"x" * FLUSH_BYTES
    await _turn()
    assert len(inner.writes) == 2
    t.write(b"last")
    t.close()  # pending bytes go out before the close
    assert inner.writes[-1] == b"last" and inner.closed
    assert t.get_extra_info("peername") == "info peername"  # the rest passes through


async def test_pending_writes_to_a_lost_connection_are_dropped() -> None:
    inner = _Recorder()
    t: Any = CoalescingTransport(inner, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"answer")
    inner.closed = True  # the peer went away before the next turn
    await _turn()
    assert inner.writes == []


async def test_repository_misses_share_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests missing the repository cache together read the RefStore once; a
    repository forgotten (deleted) while a read is in flight is not cached from it."""
    import lsmstore
    from lsmstore.server.serve import make_context

    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path / "home"))
    async with lsmstore.connect() as connected:
        assert isinstance(connected, lsmstore.Store)  # embedded
        store = connected
        await store.create_repository("rep", storage_namespace=(tmp_path / "rep").as_uri())
        ctx = make_context(store.config, store)
        reads: list[str] = []
        real = store.get_repository

        async def counting(name: str) -> lsmstore.Repository:
            reads.append(name)
            repo = await real(name)
            assert isinstance(repo, lsmstore.Repository)
            return repo

        monkeypatch.setattr(store, "get_repository", counting)
        got = await asyncio.gather(*(ctx.repository("rep") for _ in range(20)))
        assert reads == ["rep"] and all(g is got[0] for g in got)
        assert await ctx.repository("rep") is got[0] and reads == ["rep"]  # cached
        ctx.forget_repository("rep")
        pending = asyncio.ensure_future(ctx.repository("rep"))
        await _turn()  # the read is in flight
        ctx.forget_repository("rep")
        assert (await pending).name == "rep"
        await ctx.repository("rep")
        assert reads == ["rep", "rep", "rep"]  # the forgotten read was not cached
        with pytest.raises(lsmstore.RepositoryNotFoundError):
            await asyncio.gather(*(ctx.repository("nosuch") for _ in range(3)))


Call = Callable[..., Awaitable[tuple[int, bytes]]]


@contextlib.asynccontextmanager
async def _app_counting_heads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Any, Call, list[str]]]:
    """An embedded store's repository ``r``, a ``call`` into the server's App in this
    process (method, path below /api/v1, body, content type, query) and the names of
    the branches whose head was read, in order."""
    import base64

    import lsmstore
    from lsmstore.server.app import App
    from lsmstore.server.serve import make_context

    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path / "home"))
    async with lsmstore.connect() as store:
        assert isinstance(store, lsmstore.Store)  # embedded
        repo = await store.create_repository("rep", storage_namespace=(tmp_path / "rep").as_uri())
        ctx = make_context(store.config, store)
        # A clock that stands still: the memo's one second never runs out mid-test,
        # however slow the machine.
        ctx.clock = lambda: 1000.0
        app = App(ctx)
        key, secret = await ctx.auth.create_key("admin")
        cred = b"Basic " + base64.b64encode(f"{key.access_key_id}:{secret}".encode())
        heads: list[str] = []
        real_head = lsmstore.Branch.head

        async def head(self: lsmstore.Branch) -> Any:
            heads.append(self.name)
            return await real_head(self)

        monkeypatch.setattr(lsmstore.Branch, "head", head)

        async def call(method: str, path: str, body: bytes = b"",
                       content_type: str = "application/json",
                       query: bytes = b"") -> tuple[int, bytes]:  # fmt: skip
            headers = [(b"host", b"t"), (b"authorization", cred),
                       (b"content-type", content_type.encode())]  # fmt: skip
            scope = {"type": "http", "method": method, "path": "/api/v1" + path,
                     "query_string": query, "headers": headers}  # fmt: skip
            out: list[Any] = []

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            async def send(msg: Any) -> None:
                out.append(msg)

            await app(scope, receive, send)
            return out[0]["status"], out[1]["body"]

        yield repo, call, heads


async def test_a_branch_deleted_under_the_batch_routes_memo_still_gets_404(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch route reads a branch for its 404 once per second, not per request; a
    branch deleted meanwhile (by another process: here the library, past the server)
    fails the write at its L1 append, 404, nothing acknowledged; a deletion through
    the server is forgotten at once."""
    import base64
    import json

    async with _app_counting_heads(tmp_path, monkeypatch) as (repo, call, heads):

        def kv(k: str) -> bytes:
            return json.dumps([["kv", k, base64.b64encode(b"v").decode()]]).encode()

        for b in ("b", "c"):
            await repo.create_branch(b)
            assert (await call("POST", f"/lsm/repositories/rep/branches/{b}/batch", kv("k1")))[
                0
            ] == 200
        assert (await call("POST", "/lsm/repositories/rep/branches/b/batch", kv("k2")))[0] == 200
        assert heads == ["b", "c"]  # read once, then remembered
        await repo.delete_branch("b")  # past the server: its memo still says "exists"
        status, body = await call("POST", "/lsm/repositories/rep/branches/b/batch", kv("k3"))
        assert status == 404, body  # the append found no branch
        assert heads == ["b", "c"]
        assert (await call("DELETE", "/repositories/rep/branches/c"))[0] == 204
        status, body = await call("POST", "/lsm/repositories/rep/branches/c/batch", kv("k3"))
        assert status == 404 and heads == ["b", "c", "c"]  # forgotten: read again


async def test_object_writes_share_the_branch_memo_and_a_deleted_branch_gets_404(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streamed and multipart uploads read the branch for their 404 before the body as
    the batch route does: once per second, shared with it (a many-path delete, whose
    body is read first, reads it every time).  On a branch deleted past the server
    (its memo still says "exists") they still answer 404, from the write itself; a
    deletion through the server is forgotten, so the next one reads again."""
    import json

    import lsmstore

    async with _app_counting_heads(tmp_path, monkeypatch) as (repo, call, heads):
        objects = "/repositories/rep/branches/{}/objects"
        boundary = "xyzzy"
        multipart = f"multipart/form-data; boundary={boundary}"

        def form(data: bytes) -> bytes:
            return (f"--{boundary}\r\nContent-Disposition: form-data; name=\"content\"; "
                    f"filename=\"f\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                    ).encode() + data + f"\r\n--{boundary}--\r\n".encode()  # fmt: skip

        async def writes(b: str) -> list[int]:
            """A streamed upload, a multipart one and a many-path delete on branch b."""
            url = objects.format(b)
            return [
                (await call("POST", url, b"streamed", "application/octet-stream",
                            b"path=s"))[0],
                (await call("POST", url, form(b"form"), multipart, b"path=m"))[0],
                (await call("POST", url + "/delete", json.dumps({"paths": ["s"]}).encode()))[0],
            ]  # fmt: skip

        for b in ("b", "c"):
            await repo.create_branch(b)
            assert await writes(b) == [201, 201, 200]
        # uploads: read once, then remembered; the delete reads every time
        assert heads == ["b", "b", "c", "c"]
        await repo.delete_branch("b")  # past the server: its memo still says "exists"
        assert await writes("b") == [404, 404, 404]  # the write found no branch
        assert heads == ["b", "b", "c", "c", "b"]
        assert (await call("DELETE", "/repositories/rep/branches/c"))[0] == 204
        assert await writes("c") == [404, 404, 404]
        # forgotten: read again, not remembered
        assert heads == ["b", "b", "c", "c", "b", "c", "c", "c"]
        for b in ("b", "c"):
            with pytest.raises(lsmstore.RefNotFoundError):
                await repo.branch(b).head()


async def test_a_branch_read_across_its_deletion_is_not_remembered() -> None:
    """A 404 check whose read of the branch was in flight when the branch was deleted
    through this process does not remember it as existing: the next check reads it."""
    from types import SimpleNamespace

    from lsmstore.server.context import Context

    ctx = Context(None, None, None, None)  # type: ignore[arg-type]  # only its memo is used
    reads: list[str] = []
    gate = asyncio.Event()

    async def head() -> None:
        reads.append("b")
        await gate.wait()

    branch: Any = SimpleNamespace(repository=SimpleNamespace(name="rep"), name="b", head=head)
    check = asyncio.ensure_future(ctx.check_branch(branch))
    await _turn()
    assert reads == ["b"]  # read in flight (it found the branch)...
    ctx.forget_branch("rep", "b")  # ...as the branch is deleted through this process
    gate.set()
    await check
    assert not ctx.branch_seen("rep", "b")
    await ctx.check_branch(branch)  # read again; this one is remembered
    await ctx.check_branch(branch)
    assert reads == ["b", "b"] and ctx.branch_seen("rep", "b")


async def test_requests_in_flight_are_rendered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lsmstore
    from lsmstore.server.app import App
    from lsmstore.server.serve import make_context

    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path / "home"))
    async with lsmstore.connect() as store:
        assert isinstance(store, lsmstore.Store)
        ctx = make_context(store.config, store)
        app = App(ctx)
        assert b"lsmstore_http_requests_in_flight 0.0" in ctx.metrics.render()
        app.in_flight = 3
        assert b"lsmstore_http_requests_in_flight 3.0" in ctx.metrics.render()


async def test_reads_through_the_server_see_acknowledged_writes(
    server: ServerProcess, admin: httpx.Client
) -> None:
    """Read-your-writes under concurrency (docs/server.md): many clients upload, link
    and overwrite at once on separate connections; every stat, listing and read made
    after an acknowledgement sees that write, whichever connection made it."""
    repo = make_repo(admin)
    objects = f"/repositories/{repo}/branches/main/objects"
    reads = f"/repositories/{repo}/refs/main/objects"

    async def client(i: int) -> None:
        async with (
            httpx.AsyncClient(base_url=server.api, auth=server.admin, timeout=120) as w,
            httpx.AsyncClient(base_url=server.api, auth=server.admin, timeout=120) as r,
        ):
            for round_ in range(3):
                body = f"client {i} round {round_}".encode()
                up = await w.post(objects, params={"path": f"c/{i}"}, content=body)
                assert up.status_code == 201, up.text
                stat = await r.get(reads + "/stat", params={"path": f"c/{i}"})
                assert stat.status_code == 200 and stat.json()["checksum"] == up.json()["checksum"]
                got = await r.get(reads, params={"path": f"c/{i}"})
                assert got.content == body
            batch = await w.post(
                f"/lsm/repositories/{repo}/branches/main/batch",
                json=[["link", f"l/{i}/x", up.json()["physical_address"], len(body),
                       up.json()["checksum"]]],
            )  # fmt: skip
            assert batch.status_code == 200, batch.text
            listed = await r.get(reads + "/ls", params={"prefix": f"l/{i}/"})
            assert [o["path"] for o in listed.json()["results"]] == [f"l/{i}/x"]

    await asyncio.gather(*(client(i) for i in range(16)))
    async with httpx.AsyncClient(base_url=server.api, auth=server.admin, timeout=120) as c:
        listed = (await c.get(reads + "/ls", params={"prefix": "c/", "amount": 1000})).json()
    assert sorted(o["path"] for o in listed["results"]) == sorted(f"c/{i}" for i in range(16))
