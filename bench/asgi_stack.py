"""ASGI stack comparison, on a tiny endpoint and on the server's real routes.

``python -m bench.asgi_stack serve <plain|starlette> <uvicorn|granian> PORT`` serves the
endpoint ``GET /api/v1/repositories/r/branches/main`` (a Ref JSON object, with the Basic
credential checked); ``python -m bench asgi_stack [DURATION]`` runs each combination
under ``wrk`` (256 connections, keep-alive) and prints requests/s and latency.  The
figures chose the server's stack (BENCHMARKS.md, "ASGI stack").

``python -m bench asgi_stack real [--seconds S] [--connections C] [--stacks a,b]``
serves the server's own app -- :class:`lsmstore.server.app.App` on a fresh home with
the embedded RefStore (the default), a ``local://`` repository, authentication and
metrics on -- under each stack of :data:`REAL_STACKS` in turn, one server process
each, and measures with ``wrk`` (``-t2``) ``statObject`` and one-link batch requests
(``POST /api/v1/lsm/.../batch``, every key new), and stat in the first two seconds
of the fresh server: requests/s, p50/p99 and the server process's CPU per request
(user + system, its worker processes included: the figure a loaded machine does not
inflate).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any

BODY = json.dumps({"id": "main", "commit_id": "ab" * 32}).encode()
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def plain_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def starlette_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def get_branch(request: Request) -> Response:
        return Response(BODY, media_type="application/json")

    return Starlette(
        routes=[Route("/api/v1/repositories/{repository}/branches/{branch}", get_branch)]
    )


def serve(kind: str, server: str, port: int) -> None:
    target = "bench.asgi_stack:plain_app" if kind == "plain" else "bench.asgi_stack:starlette_app"
    if server == "uvicorn":
        import uvicorn

        uvicorn.run(
            target,
            factory=kind != "plain",
            host="127.0.0.1",
            port=port,
            loop="uvloop",
            http="httptools",
            access_log=False,
            log_level="warning",
            backlog=4096,
        )
    else:
        from granian import Granian
        from granian.constants import Interfaces, Loops

        Granian(
            target,
            address="127.0.0.1",
            port=port,
            interface=Interfaces.ASGI,
            loop=Loops.uvloop,
            workers=1,
            log_enabled=False,
            factory=kind != "plain",
            backlog=4096,
        ).serve()


#: The stacks ``real`` compares: ``uvicorn-httptools`` is the server as it runs
#: (uvicorn, uvloop, httptools, with :mod:`lsmstore.server.protocol`'s coalescing
#: writes and connection limits); ``uvicorn-httptools-plain``: uvicorn's own httptools
#: protocol; ``uvicorn-h11``: uvicorn's pure-Python h11 protocol; ``granian-embed``:
#: granian's Rust HTTP server embedded in the process (``granian.server.embed``),
#: running the app on our uvloop event loop; ``minimal``: :class:`MinimalProtocol`, the
#: least an HTTP/1.1 server on httptools can do per request (a floor to compare with,
#: not a server: no limits, no timeouts, bodies buffered whole).
REAL_STACKS = ("uvicorn-httptools", "uvicorn-httptools-plain", "uvicorn-h11", "granian-embed",
               "minimal")  # fmt: skip


class MinimalProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive on httptools' parser calling an ASGI app, requests of a
    connection answered in order, each answer in one write (see :data:`REAL_STACKS`)."""

    def __init__(self, app: Any) -> None:
        import httptools

        self.app = app
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.queue: list[dict[str, Any]] = []
        self.busy = False
        self.task: asyncio.Future[None] | None = None
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")

    def data_received(self, data: bytes) -> None:
        import httptools

        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n"
                                 b"connection: close\r\n\r\n")  # fmt: skip
            self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", [], []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        path, _, query = self.url.partition(b"?")
        self.queue.append({
            "type": "http", "http_version": "1.1", "method": self.parser.get_method().decode(),
            "path": path.decode(), "raw_path": path, "query_string": query,
            "headers": self.headers, "client": self.peer, "body": b"".join(self.body),
            "keep_alive": self.parser.should_keep_alive(),
        })  # fmt: skip
        if not self.busy:
            self.busy = True
            self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self.queue:
            scope = self.queue.pop(0)
            answer = await self._answer(scope, scope.pop("body"))
            if self.transport.is_closing():
                return
            self.transport.write(answer)
            if not scope["keep_alive"]:
                self.transport.close()
                return
        self.busy = False

    async def _answer(self, scope: dict[str, Any], body: bytes) -> bytes:
        from lsmstore.server.http import receive_once

        out: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                out.append(b"HTTP/1.1 %d X\r\n" % message["status"])
                out.extend(b"%s: %s\r\n" % kv for kv in message["headers"])
                out.append(b"\r\n")
            else:
                out.append(message.get("body", b""))

        await self.app(scope, receive_once(body), send)
        return b"".join(out)


REPO = "bench"


async def _serve_real(stack: str, home: str, port: int) -> None:
    """Serve the real app under ``stack`` on ``port`` until SIGTERM; first print one
    JSON line: the admin key, and the address and checksum of an uploaded object."""
    from lsmstore.config import load_config
    from lsmstore.gcfreeze import freeze_startup_state
    from lsmstore.server import secret
    from lsmstore.server.app import App
    from lsmstore.server.serve import VERSION, make_context, start_threads, uvicorn_config
    from lsmstore.server.serve import _Uvicorn as Uvicorn

    loop = asyncio.get_running_loop()
    await start_threads(loop)
    config = load_config(home=home, server_port=port)
    ctx = make_context(config, signing_key=secret.signing_key(config))
    key, key_secret = await ctx.auth.create_key("admin")
    repo = await ctx.store.create_repository(REPO, storage_namespace="local://bench")
    await repo.branch("main").upload("s/one", b"0123456789abcdef")
    up = await repo.branch("main").stat_object("s/one")
    app = App(ctx, VERSION)
    # as serve() does once it listens
    freeze_startup_state()
    ctx.store.encoder.start()
    sys.setswitchinterval(config.server_switch_interval_ms / 1000)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if stack.startswith("uvicorn"):
        cfg = uvicorn_config(app, config, ctx.metrics)
        if stack == "uvicorn-h11":
            cfg.http = "h11"
        elif stack == "uvicorn-httptools-plain":
            cfg.http = "httptools"
        server = Uvicorn(cfg)
        task = asyncio.create_task(server.serve())

        def halt() -> None:
            server.should_exit = True
    elif stack == "minimal":
        listener = await loop.create_server(
            lambda: MinimalProtocol(app), "127.0.0.1", port, backlog=4096
        )
        task = asyncio.ensure_future(listener.serve_forever())

        def halt() -> None:
            listener.close()
            task.cancel()
    else:
        from granian.constants import Interfaces
        from granian.server.embed import Server

        gserver = Server(app, address="127.0.0.1", port=port, interface=Interfaces.ASGI,
                         log_enabled=False, backlog=4096, websockets=False)  # fmt: skip
        task = asyncio.create_task(gserver.serve())

        def halt() -> None:
            gserver.stop()

    info = {"key": key.access_key_id, "secret": key_secret, "address": up.physical_address,
            "checksum": up.checksum}  # fmt: skip
    print(json.dumps(info), flush=True)
    await stop.wait()
    halt()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await ctx.store.aclose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def real(argv: list[str]) -> None:
    """The comparison under the real routes (module docstring)."""
    import base64
    import tempfile

    from bench.serve import LINK_LUA, _cpu_s, _wrk

    ap = argparse.ArgumentParser(prog="python -m bench asgi_stack real")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--connections", type=int, default=256)
    ap.add_argument("--stacks", default=",".join(REAL_STACKS))
    args = ap.parse_args(argv)
    stacks = args.stacks.split(",")
    if not set(stacks) <= set(REAL_STACKS):
        ap.error(f"unknown stack in {args.stacks!r} (known: {', '.join(REAL_STACKS)})")
    if shutil.which("wrk") is None:
        raise SystemExit("bench asgi_stack needs wrk (apt-get install wrk)")
    load0 = os.getloadavg()
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lsm-bench-stack-") as tmp:
        lua = os.path.join(tmp, "link.lua")
        with open(lua, "w") as f:
            f.write(LINK_LUA)
        for stack in stacks:
            port = _free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("LSMSTORE_")}
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.asgi_stack", "serve-real", stack,
                 os.path.join(tmp, stack), str(port)],
                stdout=subprocess.PIPE, text=True, env=env,
            )  # fmt: skip
            try:
                assert proc.stdout is not None
                info = json.loads(proc.stdout.readline())
                _wait(port)
                cred = base64.b64encode(f"{info['key']}:{info['secret']}".encode()).decode()
                hdr = {"Authorization": f"Basic {cred}"}
                base = f"http://127.0.0.1:{port}"
                stat = f"{base}/api/v1/repositories/{REPO}/refs/main/objects/stat?path=s/one"
                for phase, url, script, wargs, seconds in (
                    # the first seconds of a fresh server: every connection's first
                    # request finds the access key not yet verified
                    ("stat, first 2 s", stat, None, None, 2.0),
                    ("stat", stat, None, None, args.seconds),
                    ("one-link batch", base + "/", lua,
                     [info["address"], info["checksum"], "%d"], args.seconds),
                ):  # fmt: skip
                    if phase != "stat, first 2 s":
                        _wrk(url, args.connections, 2, hdr, script, wargs)  # warm
                    cpu0 = _cpu_s(proc.pid)
                    r = _wrk(url, args.connections, seconds, hdr, script, wargs)
                    cpu = (_cpu_s(proc.pid) - cpu0) / max(1.0, r["requests"]) * 1e6
                    rows.append(
                        f"| {stack} | {phase} | {r['rps']:,.0f} | {r['p50']:.1f} ms | "
                        f"{r['p99']:.1f} ms | {cpu:,.0f} µs | {r['non2xx']:.0f} |"
                    )
                    print(rows[-1], flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    load1 = os.getloadavg()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"\nbench asgi_stack real, nproc={os.cpu_count()}, {when}, load "
          f"{load0[0]:.1f} -> {load1[0]:.1f}, args {json.dumps(vars(args))}\n")  # fmt: skip
    print("| stack | route | requests/s | p50 | p99 | server CPU/request | non-2xx |")
    print("|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


def _wait(port: int) -> None:
    import socket

    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def main(argv: list[str]) -> None:
    if argv and argv[0] == "serve":
        serve(argv[1], argv[2], int(argv[3]))
        return
    if argv and argv[0] == "serve-real":
        import uvloop

        uvloop.run(_serve_real(argv[1], argv[2], int(argv[3])))
        return
    if argv and argv[0] == "real":
        real(argv[1:])
        return
    if shutil.which("wrk") is None:
        raise SystemExit("bench asgi needs wrk (apt-get install wrk)")
    duration = argv[0] if argv else "10s"
    port = 18931
    print(f"ASGI stack, {os.cpu_count()} cores, wrk -t1 -c256 -d{duration}, 1 server process")
    for server in ("uvicorn", "granian"):
        for kind in ("plain", "starlette"):
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.asgi_stack", "serve", kind, server, str(port)]
            )
            try:
                _wait(port)
                url = f"http://127.0.0.1:{port}/api/v1/repositories/r/branches/main"
                subprocess.run(["wrk", "-t1", "-c256", "-d2s", url], capture_output=True)
                out = subprocess.run(
                    ["wrk", "-t1", "-c256", f"-d{duration}", "--latency", url],
                    capture_output=True,
                    text=True,
                ).stdout
                rps = next(ln for ln in out.splitlines() if ln.startswith("Requests/sec"))
                lat = [
                    ln.strip() for ln in out.splitlines() if ln.strip().startswith(("50%", "99%"))
                ]
                print(f"{server:8} {kind:10} {rps.split()[-1]:>10} req/s  {'  '.join(lat)}")
            finally:
                proc.terminate()
                proc.wait()
            port += 1


if __name__ == "__main__":
    main(sys.argv[1:])
