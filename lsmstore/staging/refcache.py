"""Coalesced ref reads with read-your-writes.

Every read of a branch must see every write acknowledged before the read began, from
any process, so it needs a ref value fetched *after* it began.  Concurrent reads of one
ref share fetches ("flights") under this rule:

* no flight: the read starts one (its RefStore call begins at the next turn of the
  event loop);
* a flight whose RefStore call has not begun yet: the read joins it -- every read
  made in the same turn of the loop shares one call;
* a flight whose call has begun: its answer may predate a write acknowledged just
  before the read, so the read joins the *next* flight, which starts the moment the
  running one ends.  All reads arriving meanwhile share that next one.

So at most one RefStore call per ref is in flight, at most one is queued, and a read
waits at most two round trips; no time window is involved.  Each waiter has its own
future: cancelling one read never cancels the fetch the others wait on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from lsmstore.errors import ClosedError
from lsmstore.refstore.base import Ref, RefStore


class _Flight:
    __slots__ = ("started", "waiters")

    def __init__(self) -> None:
        self.waiters: list[asyncio.Future[Ref]] = []
        self.started = False  # set just before the RefStore call begins


class _Slot:
    __slots__ = ("next", "running")

    def __init__(self) -> None:
        self.running: _Flight | None = None
        self.next: _Flight | None = None


class RefCache:
    """Fetches refs of one RefStore, one flight at a time per ``(repo, name)``."""

    def __init__(
        self,
        refstore: RefStore,
        fetch: Callable[[str, str], Awaitable[Ref]] | None = None,
    ) -> None:
        self._fetch = fetch or refstore.get_ref
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.fetches = 0  # RefStore calls made (for tests and stats)
        self._closed = False
        # The loop of the last call.  asyncio.get_running_loop() makes a getpid()
        # system call (CPython's check against a fork), which cost more than the rest
        # of get() on a busy 2-core VM; a loop that is not running is not the caller's.
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self, repo: str, name: str) -> asyncio.Future[Ref]:
        """A future of a ref value read after this call. Await it."""
        if self._closed:
            raise ClosedError("ref cache is closed")
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[Ref] = loop.create_future()
        slot = self._slots.get((repo, name))
        if slot is None:
            slot = self._slots[(repo, name)] = _Slot()
        running = slot.running
        if running is None:
            flight = slot.running = _Flight()
            flight.waiters.append(fut)
            self._start(repo, name, slot)
        elif not running.started:  # its call begins after this read began
            running.waiters.append(fut)
        else:
            if slot.next is None:
                slot.next = _Flight()
            slot.next.waiters.append(fut)
        return fut

    def _start(self, repo: str, name: str, slot: _Slot) -> None:
        task = asyncio.get_running_loop().create_task(self._fly(repo, name, slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fly(self, repo: str, name: str, slot: _Slot) -> None:
        flight = slot.running
        assert flight is not None
        self.fetches += 1
        flight.started = True
        try:
            ref = await self._fetch(repo, name)
        except asyncio.CancelledError:
            for w in flight.waiters:
                w.cancel()
            raise
        except Exception as e:
            for w in flight.waiters:
                if not w.done():
                    w.set_exception(e)
        else:
            for w in flight.waiters:
                if not w.done():
                    w.set_result(ref)
        finally:
            slot.running = slot.next
            slot.next = None
            if slot.running is not None and not self._closed:
                self._start(repo, name, slot)
            else:
                if slot.running is not None:
                    for w in slot.running.waiters:
                        if not w.done():
                            w.set_exception(ClosedError("ref cache is closed"))
                    slot.running = None
                self._slots.pop((repo, name), None)

    async def aclose(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
