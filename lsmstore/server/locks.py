"""Per-branch reader/writer locks inside one server process.

Writes to a branch hold its lock *shared*; operations that must not interleave with
them (reset, delete, stash of staged changes) take it *exclusively*, so they see no
write half-way between the memstore and its L1 append.  Across processes the
RefStore's compare-and-swap keeps these operations safe; the lock only keeps this
process's own writes out of their way.  Locks of idle branches are dropped.
"""

from __future__ import annotations

from types import TracebackType

import aiorwlock


class _Entry:
    """A branch's lock and how many holders hold it or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        # fast: no loop turn after an uncontended acquisition (nothing here relies on
        # one; waiters are still let in in order)
        self.lock = aiorwlock.RWLock(fast=True)
        self.users = 0


class _Hold:
    """One holder's use of a branch's lock (``async with``).  A plain class, not an
    ``asynccontextmanager``: every write request enters one."""

    __slots__ = ("_entry", "_exclusive", "_key", "_locks")

    def __init__(self, locks: dict[tuple[str, str], _Entry], key: tuple[str, str],
                 exclusive: bool) -> None:  # fmt: skip
        self._locks = locks
        self._key = key
        self._exclusive = exclusive
        self._entry: _Entry | None = None

    async def __aenter__(self) -> None:
        entry = self._locks.get(self._key)
        if entry is None:
            entry = self._locks[self._key] = _Entry()
        entry.users += 1
        self._entry = entry
        lock = entry.lock
        try:
            await (lock.writer_lock if self._exclusive else lock.reader_lock).acquire()
        except BaseException:
            self._leave()
            raise

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._entry is not None
        lock = self._entry.lock
        try:
            (lock.writer_lock if self._exclusive else lock.reader_lock).release()
        finally:
            self._leave()

    def _leave(self) -> None:
        entry = self._entry
        assert entry is not None
        self._entry = None
        entry.users -= 1
        if not entry.users and self._locks.get(self._key) is entry:
            del self._locks[self._key]


class BranchLocks:
    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], _Entry] = {}

    def shared(self, repo: str, branch: str) -> _Hold:
        return _Hold(self._locks, (repo, branch), False)

    def exclusive(self, repo: str, branch: str) -> _Hold:
        return _Hold(self._locks, (repo, branch), True)
