"""The common service flags ``--health-port`` and ``--status-file`` for the server
(docs/operations.md, "Dependency outages and readiness").

The server answers ``/healthz`` and ``/readyz`` on its API port already; these give
the same state the way the workers give it: a separate plain-HTTP port without
credentials (useful when the API port speaks TLS or sits behind a proxy) and a JSON
file rewritten on every change (:mod:`lsmstore.service.readiness`).  Readiness:
*starting* until the server listens, then *ready* while the periodic check
(:func:`~lsmstore.server.routes.service.ready_problem`: the RefStore and an object
store answer) passes and *unavailable* while it fails, *stopping* from the first
drain signal on.  The check runs every ``interval_s`` only when one of the flags is
given; the API port's ``/readyz`` checks on each request instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from lsmstore.server.context import Context
from lsmstore.server.routes.service import ready_problem
from lsmstore.service.readiness import HealthServer, Readiness, StatusFile

INTERVAL_S = 2.0
DEPENDENCY = "backends"


class ServerProbes:
    """The health port and status file of one server (module docstring)."""

    def __init__(
        self,
        ctx: Context,
        *,
        health_host: str = "127.0.0.1",
        health_port: int | None = None,
        status_file: str | None = None,
        interval_s: float = INTERVAL_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.ctx = ctx
        self.readiness = Readiness("server")
        self.interval_s = interval_s
        self._sleep = sleep
        self.health = (
            HealthServer(self.readiness, health_host, health_port)
            if health_port is not None
            else None
        )
        self.status = StatusFile(self.readiness, status_file) if status_file else None
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.health is not None or self.status is not None

    async def start(self) -> None:
        """Open the health port and write the status file (OSError: port taken, file
        not writable)."""
        if self.health is not None:
            await self.health.start()
        if self.status is not None:
            await self.status.start()

    async def check(self) -> None:
        """One readiness check."""
        try:
            problem = await ready_problem(self.ctx)
        except Exception as e:  # a backend failing in a way the probe does not expect
            problem = f"{type(e).__name__}: {e}"
        if problem is None:
            self.readiness.up(DEPENDENCY)
        elif problem != "draining":
            self.readiness.down(DEPENDENCY, problem)

    async def listening(self) -> None:
        """The server accepts requests: checked once, started, checked periodically."""
        if not self.enabled:
            self.readiness.set_started()
            return
        await self.check()
        self.readiness.set_started()
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    def draining(self) -> None:
        self.readiness.set_stopping()

    async def _run(self) -> None:
        while not self.readiness.stopping:
            await self._sleep(self.interval_s)
            await self.check()

    async def aclose(self) -> None:
        self.readiness.set_stopping()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.status is not None:
            await self.status.aclose()
        if self.health is not None:
            await self.health.aclose()
