"""Write coalescing of the remote client: the put/link/delete calls of one process to
one branch, made within one window, travel to the server as one batch request.

Each call is checked first (a bad key fails only its caller), then joins the branch's
pending batch.  The batch is sent ``window`` seconds after its first entry arrived, or
at once when it holds ``max_entries`` entries or ``max_bytes`` bytes.  Up to
``max_inflight`` batch requests of a branch are in flight together; entries arriving
meanwhile form the next batch.  The server stages a batch as one write (one
acknowledgement, all or nothing), so each caller's ``await`` returns when the batch
holding its entry is durable and ordered, and fails with that batch's error otherwise.

Order: a batch that touches a key also held by a batch in flight is not sent until
that one is answered, so writes to one key from one process keep their call order
(batches on disjoint keys may overtake each other, like concurrent writers).
``put_many`` is one entry group: it is never split across requests.

An :attr:`Batcher.idle` coalescer holds nothing (no entry pending, no request in
flight): its owner may drop it and make a new one for the branch's next call without
losing or reordering a write (the order rule above only concerns batches in flight).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

#: Sends one batch (a list of entries); raises the typed error of a failed request.
Send = Callable[[list[Any]], Awaitable[None]]


class _Group:
    __slots__ = ("entries", "future", "keys", "nbytes")

    def __init__(
        self, entries: list[Any], keys: list[bytes], nbytes: int, future: asyncio.Future[None]
    ) -> None:
        self.entries = entries
        self.keys = keys
        self.nbytes = nbytes
        self.future = future


class Batcher:
    """The coalescer of one branch (see the module docstring)."""

    def __init__(
        self,
        send: Send,
        *,
        window_s: float = 0.001,
        max_entries: int = 10_000,
        max_bytes: int = 8 << 20,
        max_inflight: int = 4,
    ) -> None:
        self._send = send
        self.window_s = window_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_inflight = max_inflight
        self._pending: list[_Group] = []
        self._pending_entries = 0
        self._pending_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._inflight: dict[asyncio.Task[None], frozenset[bytes]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        #: Counters: requests sent, entries sent.
        self.requests = 0
        self.entries = 0

    @property
    def idle(self) -> bool:
        """Nothing pending and nothing in flight: dropping this coalescer loses no write."""
        return not self._pending and not self._inflight

    async def submit(self, entries: list[Any], keys: list[bytes], nbytes: int) -> None:
        """Queue ``entries`` (touching ``keys``) as one group; returns once the batch
        holding them is acknowledged.  The group is queued before the first
        suspension, so a coalescer handed to a caller is not idle once it calls."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append(_Group(entries, keys, nbytes, future))
        self._pending_entries += len(entries)
        self._pending_bytes += nbytes
        self._idle.clear()
        if self._pending_entries >= self.max_entries or self._pending_bytes >= self.max_bytes:
            self._kick()
        elif self._timer is None:
            if self.window_s > 0:
                self._timer = loop.call_later(self.window_s, self._kick)
            else:
                self._timer = loop.call_soon(self._kick)  # type: ignore[assignment]
        await future

    def _kick(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._pending and len(self._inflight) < self.max_inflight:
            busy: set[bytes] = set()
            for keys in self._inflight.values():
                busy |= keys
            batch: list[_Group] = []
            n = size = 0
            for g in self._pending:
                if batch and (
                    n + len(g.entries) > self.max_entries or size + g.nbytes > self.max_bytes
                ):
                    break
                if busy and not busy.isdisjoint(g.keys):
                    break  # wait for the batch in flight holding one of its keys
                batch.append(g)
                n += len(g.entries)
                size += g.nbytes
            if not batch:
                return  # the next answer kicks again
            del self._pending[: len(batch)]
            self._pending_entries -= n
            self._pending_bytes -= size
            keys = frozenset(k for g in batch for k in g.keys)
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._inflight[task] = keys

    async def _run(self, batch: list[_Group]) -> None:
        entries = [e for g in batch for e in g.entries]
        error: BaseException | None = None
        try:
            await self._send(entries)
            self.requests += 1
            self.entries += len(entries)
        except BaseException as e:  # every caller of the batch gets it
            error = e
        for g in batch:
            if not g.future.done():
                if error is None:
                    g.future.set_result(None)
                else:
                    g.future.set_exception(error)
        task = asyncio.current_task()
        if task is not None:
            self._inflight.pop(task, None)
        if self._pending:
            self._kick()
        elif not self._inflight:
            self._idle.set()
        if isinstance(error, asyncio.CancelledError):
            raise error

    async def flush(self) -> None:
        """Wait until every entry submitted so far has its outcome."""
        if self._pending and self._timer is not None:
            self._kick()
        await self._idle.wait()

    async def aclose(self) -> None:
        await self.flush()
