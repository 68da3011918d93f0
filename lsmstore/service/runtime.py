"""The common life cycle of an lsmstore process: flags → logging → event loop →
health/status reporting → signal handling → the body → exit code.

::

    def main(argv=None) -> int:
        args = parser().parse_args(argv)          # add_common_flags(parser) included
        return run_service("compactor", args, body)

    async def body(service: Service) -> int:     # returns an ExitCode
        worker = ...
        service.shutdown.on_request(worker.stop)
        service.readiness.set_started()
        return await worker.run()

:func:`run_service` logs ``started`` and ``exited`` (with the exit code), maps
:class:`~lsmstore.errors.InvalidInputError` raised by the body (bad configuration) to
``ExitCode.USAGE`` with a ``config_error`` event, and any other exception to
``ExitCode.INTERNAL`` with a ``crashed`` event and its traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop

from lsmstore.errors import InvalidInputError
from lsmstore.service.exitcodes import ExitCode
from lsmstore.service.logs import configure_logging
from lsmstore.service.readiness import HealthServer, Readiness, StatusFile
from lsmstore.service.signals import Shutdown

log = logging.getLogger("lsmstore.service")


class Service:
    """What a process body gets: its name, flags, readiness and shutdown."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name = name
        self.args = args
        self.readiness = Readiness(name)
        self.shutdown = Shutdown(float(getattr(args, "shutdown_timeout", 30.0)))
        self.health: HealthServer | None = None
        self.status_file: StatusFile | None = None

    async def start(self) -> None:
        port = getattr(self.args, "health_port", None)
        if port is not None:
            self.health = HealthServer(
                self.readiness, getattr(self.args, "health_host", "127.0.0.1"), port
            )
            await self.health.start()
        path = getattr(self.args, "status_file", None)
        if path:
            self.status_file = StatusFile(self.readiness, path)
            await self.status_file.start()

    async def aclose(self) -> None:
        self.readiness.set_stopping()
        if self.status_file is not None:
            await self.status_file.aclose()
        if self.health is not None:
            await self.health.aclose()


Body = Callable[[Service], Coroutine[Any, Any, int]]


def run_service(name: str, args: argparse.Namespace, body: Body) -> int:
    """Configure logging from ``args``, run ``body`` on uvloop; the exit code."""
    configure_logging(
        getattr(args, "log_level", "info"), getattr(args, "log_format", "json"), service=name
    )
    return int(uvloop.run(_amain(name, args, body)))


async def _amain(name: str, args: argparse.Namespace, body: Body) -> ExitCode:
    service = Service(name, args)
    code = ExitCode.INTERNAL
    try:
        await service.start()
    except OSError as e:  # the health port is taken, the status file cannot be written
        log.error("%s", e, extra={"fields": {"event": "config_error", "error": str(e)}})
        await service.aclose()
        _exited(ExitCode.USAGE)
        return ExitCode.USAGE
    service.shutdown.install()
    started = {"event": "started", "pid": os.getpid()}
    if service.health is not None:
        started["health_port"] = service.health.port
    log.info("started", extra={"fields": started})
    task: asyncio.Task[int] = asyncio.create_task(body(service))
    forced = asyncio.create_task(_force_after_deadline(service.shutdown))
    try:
        await asyncio.wait([task, forced], return_when=asyncio.FIRST_COMPLETED)
        if not task.done():  # a second signal: abandon running work now
            task.cancel()
        try:
            code = ExitCode(await task)
        except asyncio.CancelledError:
            code = ExitCode.OK
    except InvalidInputError as e:
        log.error("%s", e, extra={"fields": {"event": "config_error", "error": str(e)}})
        code = ExitCode.USAGE
    except Exception as e:  # a bug or an unexpected failure: one line with the traceback
        log.exception("%s", e, extra={"fields": {"event": "crashed", "error": repr(e)}})
        code = ExitCode.INTERNAL
    finally:
        forced.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await forced
        service.shutdown.uninstall()
        await service.aclose()
        _exited(code)
    return code


async def _force_after_deadline(shutdown: Shutdown) -> None:
    """Returns on a second stop signal, or when the drain deadline has passed after the
    first: whatever still runs then (a job, a sweep, a listing) is cancelled."""
    requested = asyncio.create_task(shutdown.requested.wait())
    forced = asyncio.create_task(shutdown.forced.wait())
    try:
        await asyncio.wait([requested, forced], return_when=asyncio.FIRST_COMPLETED)
        if not forced.done():
            # the body's own drain uses the same deadline; this is the backstop
            await asyncio.wait([forced], timeout=shutdown.deadline_s + 1.0)
        if not forced.done():
            log.warning(
                "shutdown deadline passed: abandoning running work",
                extra={"fields": {"event": "deadline_passed", "deadline_s": shutdown.deadline_s}},
            )
    finally:
        requested.cancel()
        forced.cancel()


def _exited(code: ExitCode) -> None:
    log.info(
        "exited", extra={"fields": {"event": "exited", "code": int(code), "status": code.name}}
    )
    for h in logging.getLogger().handlers:
        h.flush()
