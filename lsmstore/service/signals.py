"""SIGTERM/SIGINT handling shared by every lsmstore process.

The first signal asks for a graceful stop: the process starts no new work and gives
running work ``--shutdown-timeout`` seconds (the deadline) to finish, then abandons it
(every multi-step operation is crash-safe, see the crash tables in docs/); one second
after the deadline :func:`~lsmstore.service.runtime.run_service` cancels whatever
still runs, so the process always exits.  A second signal abandons running work at
once.  Either way the exit status is 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

log = logging.getLogger("lsmstore.service")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Shutdown:
    """``requested`` is set by the first stop signal (or :meth:`request`); ``forced`` by
    the second.  Callbacks registered with :meth:`on_request` run once, in order."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self.requested = asyncio.Event()
        self.forced = asyncio.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._installed: list[signal.Signals] = []

    def on_request(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)
        if self.requested.is_set():
            callback()

    def request(self, reason: str = "requested") -> None:
        if self.requested.is_set():
            if not self.forced.is_set():
                log.warning(
                    "second stop signal: abandoning running work now",
                    extra={"fields": {"event": "stop_forced", "reason": reason}},
                )
                self.forced.set()
            return
        log.info(
            "stopping",
            extra={
                "fields": {"event": "stopping", "reason": reason, "deadline_s": self.deadline_s}
            },
        )
        self.requested.set()
        for cb in self._callbacks:
            cb()

    def install(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        loop = loop or asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self.request, sig.name)
            self._installed.append(sig)

    def uninstall(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        loop = loop or asyncio.get_running_loop()
        for sig in self._installed:
            loop.remove_signal_handler(sig)
        self._installed.clear()
