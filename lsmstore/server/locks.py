"""Per-branch reader/writer locks inside one server process.

Writes to a branch hold its lock *shared*; operations that must not interleave with
them (reset, delete, stash of staged changes) take it *exclusively*, so they see no
write half-way between the memstore and its L1 append.  Across processes the
RefStore's compare-and-swap keeps these operations safe; the lock only keeps this
process's own writes out of their way.  Locks of idle branches are dropped.

The lock prefers writers: once an exclusive holder waits, new shared holders queue
behind it (a steady stream of writes cannot starve a reset); when it leaves, every
queued shared holder enters at once.  A shared acquisition of a free or shared lock
-- every write on the hot path -- takes no loop turn and no future: a counter goes
up.  Not reentrant (no route takes a branch's lock twice).
"""

from __future__ import annotations

import asyncio
import collections
from types import TracebackType


class _BranchLock:
    """One branch's lock; ``users`` counts holders and waiters (0: droppable)."""

    __slots__ = ("readers", "users", "waiting", "writer")

    def __init__(self) -> None:
        self.readers = 0
        self.writer = False
        self.users = 0
        #: Queued acquisitions in order: (exclusive, future resolved on entry).
        self.waiting: collections.deque[tuple[bool, asyncio.Future[None]]] = collections.deque()

    def _wake(self) -> None:
        """Let in what may enter now, in queue order: one exclusive holder, or every
        shared holder up to the next exclusive one."""
        waiting = self.waiting
        while waiting and not self.writer:
            exclusive, fut = waiting[0]
            if fut.done():  # cancelled while waiting
                waiting.popleft()
                continue
            if exclusive:
                if self.readers:
                    return
                self.writer = True
            else:
                self.readers += 1
            waiting.popleft()
            fut.set_result(None)

    async def acquire(self, exclusive: bool) -> None:
        if not self.writer and not self.waiting:
            if not exclusive:
                self.readers += 1
                return
            if not self.readers:
                self.writer = True
                return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((exclusive, fut))
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():  # let in, but leaving
                self.release(exclusive)
            else:
                fut.cancel()
                self._wake()  # a queued exclusive holder may have been the block
            raise

    def release(self, exclusive: bool) -> None:
        if exclusive:
            self.writer = False
        else:
            self.readers -= 1
        self._wake()


class _Hold:
    """``async with`` of one acquisition (a class, not a generator: it is on every
    write's path)."""

    __slots__ = ("_exclusive", "_key", "_lock", "_locks")

    def __init__(self, locks: BranchLocks, key: tuple[str, str], exclusive: bool) -> None:
        self._locks = locks
        self._key = key
        self._exclusive = exclusive
        self._lock: _BranchLock | None = None

    async def __aenter__(self) -> None:
        table = self._locks._locks
        lock = table.get(self._key)
        if lock is None:
            lock = table[self._key] = _BranchLock()
        lock.users += 1
        try:
            await lock.acquire(self._exclusive)
        except BaseException:
            self._forget(lock)
            raise
        self._lock = lock

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        lock = self._lock
        assert lock is not None
        self._lock = None
        lock.release(self._exclusive)
        self._forget(lock)

    def _forget(self, lock: _BranchLock) -> None:
        lock.users -= 1
        if not lock.users and self._locks._locks.get(self._key) is lock:
            del self._locks._locks[self._key]


class BranchLocks:
    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], _BranchLock] = {}

    def shared(self, repo: str, branch: str) -> _Hold:
        return _Hold(self, (repo, branch), False)

    def exclusive(self, repo: str, branch: str) -> _Hold:
        return _Hold(self, (repo, branch), True)
