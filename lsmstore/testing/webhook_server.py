"""A webhook receiver on 127.0.0.1 for the actions tests (docs/actions.md): a real
HTTP server in a thread, so synchronous clients (the lakeFS SDK) and the test's own
event loop can both drive operations whose hooks call it.

Paths:

=================  ==============================================================
``/ok``            200
``/require``       200 when the event's ``commit_metadata`` holds the key named by
                   the query parameter ``key``, else 400 with a message
``/fail``          500
``/slow``          answers 200 only once :meth:`WebhookServer.release` is called
                   (or after 60 s): a hook with a shorter timeout times out
=================  ==============================================================

Every request is recorded in :attr:`WebhookServer.calls` (path, query, headers, the
parsed JSON body).  :func:`refused_url` is a loopback URL nothing listens on.
"""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True, slots=True)
class Call:
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: dict[str, Any]


class WebhookServer:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._released = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(min(length, 1 << 20)) or b"{}")
                query = parse_qs(url.query)
                owner.calls.append(Call(url.path, query, dict(self.headers.items()), body))
                status, text = 200, "ok"
                if url.path == "/require":
                    key = query.get("key", [""])[0]
                    if key not in (body.get("commit_metadata") or {}):
                        status, text = 400, f"commit metadata needs {key!r}"
                elif url.path == "/fail":
                    status, text = 500, "failing on purpose"
                elif url.path == "/slow":
                    owner._released.wait(60)
                data = text.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the caller gave up (timeout)
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def calls_to(self, path: str) -> list[Call]:
        return [c for c in self.calls if c.path == path]

    def release(self) -> None:
        self._released.set()

    def __enter__(self) -> WebhookServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()


def refused_url(path: str = "/down") -> str:
    """A loopback URL whose port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"
