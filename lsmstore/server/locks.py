"""Per-branch reader/writer locks inside one server process.

Writes to a branch hold its lock *shared*; operations that must not interleave with
them (reset, delete, stash of staged changes) take it *exclusively*, so they see no
write half-way between the memstore and its L1 append.  Across processes the
RefStore's compare-and-swap keeps these operations safe; the lock only keeps this
process's own writes out of their way.  Locks of idle branches are dropped.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiorwlock


class BranchLocks:
    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], tuple[aiorwlock.RWLock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def _hold(self, repo: str, branch: str, exclusive: bool) -> AsyncIterator[None]:
        key = (repo, branch)
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = (aiorwlock.RWLock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            side = lock.writer_lock if exclusive else lock.reader_lock
            async with side:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._locks.pop(key, None)

    def shared(self, repo: str, branch: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self._hold(repo, branch, False)

    def exclusive(self, repo: str, branch: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self._hold(repo, branch, True)
