"""Readiness of a long-running process: is it started, not stopping, and can it reach
its dependencies?

:class:`Readiness` holds the state; every change is logged once (``event``:
``dependency_down`` / ``dependency_up`` / ``readiness``), never once per failed
attempt.  Two ways to read it from outside (docs/operations.md):

* ``--health-port``: :class:`HealthServer`, a minimal HTTP server answering
  ``GET /healthz`` (200 while the process runs) and ``GET /readyz`` (200 when ready,
  503 when not, with the JSON state as body).  Nothing else, no credentials: it
  exposes no data.
* ``--status-file``: :class:`StatusFile` rewrites a JSON file with the same state
  (atomically, by rename) on every change.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsmstore import private
from lsmstore.errors import LsmError, UnavailableError

log = logging.getLogger("lsmstore.service")


@dataclass(slots=True)
class DependencyState:
    up: bool
    since: float
    error: str = ""
    failures: int = 0  # failed checks since it went down


class Readiness:
    """The readiness state of one process (see the module docstring)."""

    def __init__(self, service: str, *, clock: Callable[[], float] = time.time) -> None:
        self.service = service
        self.clock = clock
        self.started = False
        self.stopping = False
        self.dependencies: dict[str, DependencyState] = {}
        self._listeners: list[Callable[[], None]] = []
        self._last_ready: bool | None = None

    @property
    def ready(self) -> bool:
        return self.started and not self.stopping and all(d.up for d in self.dependencies.values())

    @property
    def status(self) -> str:
        if self.stopping:
            return "stopping"
        if not self.started:
            return "starting"
        return "ready" if self.ready else "unavailable"

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def snapshot(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "pid": os.getpid(),
            "status": self.status,
            "ready": self.ready,
            "dependencies": {
                name: {
                    "up": d.up,
                    "since": round(d.since, 3),
                    **({"error": d.error, "failures": d.failures} if not d.up else {}),
                }
                for name, d in sorted(self.dependencies.items())
            },
        }

    # --- changes ----------------------------------------------------------------------

    def set_started(self) -> None:
        self.started = True
        self._changed()

    def set_stopping(self) -> None:
        self.stopping = True
        self._changed()

    def up(self, name: str) -> None:
        """``name`` answered."""
        d = self.dependencies.get(name)
        if d is not None and d.up:
            return
        self.dependencies[name] = DependencyState(True, self.clock())
        if d is not None:
            log.info(
                "%s is reachable again after %d failed checks",
                name,
                d.failures,
                extra={
                    "fields": {
                        "event": "dependency_up",
                        "dependency": name,
                        "down_s": round(self.clock() - d.since, 3),
                    }
                },
            )
        self._changed()

    def down(self, name: str, error: BaseException | str) -> None:
        """``name`` could not be reached (logged only when it was up or unknown)."""
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        d = self.dependencies.get(name)
        if d is not None and not d.up:
            d.failures += 1
            d.error = text
            log.debug(
                "%s is still unreachable",
                name,
                extra={
                    "fields": {
                        "event": "dependency_still_down",
                        "dependency": name,
                        "failures": d.failures,
                    }
                },
            )
            return
        self.dependencies[name] = DependencyState(False, self.clock(), text, 1)
        log.warning(
            "%s is unreachable: %s",
            name,
            text,
            extra={"fields": {"event": "dependency_down", "dependency": name, "error": text}},
        )
        self._changed()

    async def check(self, name: str, probe: Callable[[], Awaitable[object]]) -> bool:
        """Run ``probe``; an :class:`UnavailableError` marks ``name`` down; success or any
        other :class:`LsmError` (an answer, if not the hoped-for one) marks it up."""
        try:
            await probe()
        except UnavailableError as e:
            self.down(name, e)
            return False
        except LsmError:
            pass
        self.up(name)
        return True

    def _changed(self) -> None:
        ready = self.ready
        if ready != self._last_ready:
            self._last_ready = ready
            log.info(
                "ready" if ready else "not ready",
                extra={"fields": {"event": "readiness", "ready": ready, "status": self.status}},
            )
        for listener in self._listeners:
            listener()


class StatusFile:
    """Keeps ``path`` holding ``readiness.snapshot()`` as JSON (rewritten by rename on
    every change, from a background task: the event loop never blocks on the disk).

    One write at a time: a write runs in a thread, which cancelling its task does not
    stop, so :meth:`aclose` waits for the write in flight before it writes the final
    state -- else that older write could land last (both go through one temporary)."""

    def __init__(self, readiness: Readiness, path: str | os.PathLike[str]) -> None:
        self.readiness = readiness
        self.path = Path(path)
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[None] | None = None
        readiness.on_change(self._dirty.set)

    async def start(self) -> None:
        await asyncio.to_thread(self._write, self.readiness.snapshot())
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            doc = self.readiness.snapshot()
            self._writing = asyncio.ensure_future(asyncio.to_thread(self._write, doc))
            try:
                await asyncio.shield(self._writing)
            except OSError as e:
                log.warning("status file %s: %s", self.path, e)
            else:
                log.debug(
                    "status file written",
                    extra={"fields": {"event": "status_written", "status": doc["status"]}},
                )

    def _write(self, doc: dict[str, Any]) -> None:
        private.write_file(self.path, (json.dumps(doc) + "\n").encode())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._writing is not None:  # the write in flight ends before the last one
            with contextlib.suppress(OSError):
                await self._writing
            self._writing = None
        with contextlib.suppress(OSError):
            await asyncio.to_thread(self._write, self.readiness.snapshot())


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}
_MAX_REQUEST = 8192


class HealthServer:
    """``GET /healthz`` and ``GET /readyz`` over HTTP/1.1 on ``host:port`` (port 0: any
    free one; :attr:`port` tells which)."""

    def __init__(self, readiness: Readiness, host: str = "127.0.0.1", port: int = 0) -> None:
        self.readiness = readiness
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
            status, body = self._answer(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, body = 400, {"error": "bad request"}
        except ConnectionError:
            writer.close()
            return
        data = json.dumps(body).encode()
        writer.write(
            f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nCache-Control: no-store\r\n"
            "Connection: close\r\n\r\n".encode()
            + data
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    def _answer(self, head: bytes) -> tuple[int, dict[str, Any]]:
        if len(head) > _MAX_REQUEST:
            return 400, {"error": "request too large"}
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3:
            return 400, {"error": "bad request line"}
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target not in (b"/healthz", b"/readyz"):
            return 404, {"error": "not found"}
        if method != b"GET":
            return 405, {"error": "method not allowed"}
        snap = self.readiness.snapshot()
        if target == b"/healthz":
            return 200, {"service": snap["service"], "status": "alive"}
        return (200 if snap["ready"] else 503), snap

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
