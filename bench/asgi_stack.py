"""ASGI stack comparison: one tiny JSON endpoint, served by each candidate stack.

``python -m bench.asgi_stack serve <plain|starlette> <uvicorn|granian> PORT`` serves the
endpoint ``GET /api/v1/repositories/r/branches/main`` (a Ref JSON object, with the Basic
credential checked); ``python -m bench asgi`` runs each combination under ``wrk`` (256
connections, keep-alive) and prints requests/s and latency.  The figures chose the
server's stack (BENCHMARKS.md, "ASGI stack").
"""

from __future__ import annotations

import json
import os
import shutil
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
