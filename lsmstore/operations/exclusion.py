"""Per-branch reader/writer exclusion inside one process: the Store's ``exclusion``,
taken by the operations layer for every front end (the embedded client and the server
alike).

Writes to a branch (object writes, batches, ``put_many``, staged SSTs, commits) hold its
lock *shared*; operations that must not interleave with them (reset, branch deletion,
stash, pop) take it *exclusively*, so they see no write of this process half-way between
the memstore and its L1 append.  Across processes the RefStore's compare-and-swap keeps
these operations safe; the lock only keeps this process's own writes out of their way.
Single raw ``put``/``delete`` calls take no lock (the hot path): such a write is ordered
against a reset or stash by the RefStore alone, like another process's write.  Locks of
idle branches are dropped.  The lock is not reentrant: an operation takes it once, at
its entry, and never calls another operation that takes it.

Shared holders enter in *groups*: one task holds the ``aiorwlock`` reader lock for the
group, and every shared holder arriving while the group is open joins it without
touching ``aiorwlock`` (which keeps its holders in a list searched on every entry and
exit: with hundreds of writes in flight that search was ~9% of the event loop).  A
waiting exclusive holder closes the open group: shared holders arriving after it form
the next group, whose reader acquisition ``aiorwlock`` holds back behind the exclusive
one (writers preferred, as before).  The group's reader lock is given back once its
last holder has left.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

import aiorwlock


class _Group:
    """Shared holders entering under one reader acquisition (module docstring)."""

    __slots__ = ("acquired", "done", "holders", "task")

    def __init__(self, lock: aiorwlock.RWLock) -> None:
        loop = asyncio.get_running_loop()
        #: Resolved once the group's task holds the reader lock (cancelled if it failed).
        self.acquired: asyncio.Future[None] = loop.create_future()
        #: Resolved when the last holder has left: the task gives the lock back.
        self.done: asyncio.Future[None] = loop.create_future()
        self.holders = 0
        self.task = loop.create_task(self._hold(lock))

    async def _hold(self, lock: aiorwlock.RWLock) -> None:
        try:
            await lock.reader_lock.acquire()
        except BaseException:
            self.acquired.cancel()  # its waiters fail as cancelled acquisitions do
            raise
        try:
            self.acquired.set_result(None)
            await self.done
        finally:
            lock.reader_lock.release()

    def leave(self) -> None:
        self.holders -= 1
        if not self.holders and not self.done.done():
            self.done.set_result(None)


class _Entry:
    """A branch's lock, its open shared group and how many hold it or wait for it."""

    __slots__ = ("group", "lock", "users")

    def __init__(self) -> None:
        # fast: no loop turn after an uncontended acquisition (nothing here relies on
        # one; waiters are still let in in order)
        self.lock = aiorwlock.RWLock(fast=True)
        self.group: _Group | None = None
        self.users = 0


class _Hold:
    """One holder's use of a branch's lock (``async with``).  A plain class, not an
    ``asynccontextmanager``: every write request enters one."""

    __slots__ = ("_entry", "_exclusive", "_group", "_key", "_locks")

    def __init__(self, locks: dict[tuple[str, str], _Entry], key: tuple[str, str],
                 exclusive: bool) -> None:  # fmt: skip
        self._locks = locks
        self._key = key
        self._exclusive = exclusive
        self._entry: _Entry | None = None
        self._group: _Group | None = None

    async def __aenter__(self) -> None:
        entry = self._locks.get(self._key)
        if entry is None:
            entry = self._locks[self._key] = _Entry()
        entry.users += 1
        self._entry = entry
        if self._exclusive:
            entry.group = None  # later shared holders wait behind this one
            try:
                await entry.lock.writer_lock.acquire()
            except BaseException:
                self._leave()
                raise
            return
        group = entry.group
        # a group whose reader acquisition failed takes no one in: its holders leave
        # cancelled, but a newcomer was never cancelled and starts a group of its own
        if group is None or group.done.done() or group.acquired.cancelled():
            group = entry.group = _Group(entry.lock)
        group.holders += 1
        self._group = group
        if group.acquired.done() and not group.acquired.cancelled():
            return  # the group holds the lock: in without a turn
        try:
            await asyncio.shield(group.acquired)
        except BaseException:
            self._leave()
            raise

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._entry is not None
        if self._exclusive:
            try:
                self._entry.lock.writer_lock.release()
            finally:
                self._leave()
        else:
            self._leave()

    def _leave(self) -> None:
        entry = self._entry
        assert entry is not None
        self._entry = None
        group = self._group
        if group is not None:
            self._group = None
            group.leave()
            if entry.group is group and not group.holders:
                entry.group = None
        entry.users -= 1
        if not entry.users and self._locks.get(self._key) is entry:
            del self._locks[self._key]


class BranchLocks:
    """The per-branch locks of one process (module docstring)."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], _Entry] = {}

    def shared(self, repo: str, branch: str) -> _Hold:
        """``async with``: hold ``repo``/``branch`` shared (writes)."""
        return _Hold(self._locks, (repo, branch), False)

    def exclusive(self, repo: str, branch: str) -> _Hold:
        """``async with``: hold ``repo``/``branch`` alone (reset, delete, stash, pop)."""
        return _Hold(self._locks, (repo, branch), True)
