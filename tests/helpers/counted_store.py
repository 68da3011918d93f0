"""A store wrapper that counts the puts that landed, for tests that wait on uploads."""

from __future__ import annotations

import asyncio

from lsmstore.storage.base import ForwardingStore, ObjectStore, PutMode


class CountedPuts(ForwardingStore):
    """Counts the puts that landed whose key holds ``containing``; ``until(n)`` waits
    for the n-th.  ``put_fresh`` goes to the inner store's own (uncounted), so a local
    store keeps its separate durability step."""

    def __init__(self, inner: ObjectStore, containing: str = "") -> None:
        super().__init__(inner)
        self.containing = containing
        self.puts = 0
        self._landed = asyncio.Condition()

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        await super().put(key, data, mode)
        if self.containing in key:
            async with self._landed:
                self.puts += 1
                self._landed.notify_all()

    async def put_fresh(self, key: str, data: bytes) -> asyncio.Future[None]:
        return await self.inner.put_fresh(key, data)

    async def until(self, n: int) -> None:
        async with self._landed:
            await self._landed.wait_for(lambda: self.puts >= n)
