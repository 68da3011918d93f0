"""Waiting out an outage of the RefStore or an object store.

A worker that sees a pass fail calls :meth:`Dependencies.settle` with the object stores
involved.  It probes the RefStore (a one-entry repository listing) and then each store
(a ``head`` of a key that never exists: "not found" means reachable); every probe that
fails with :class:`~lsmstore.errors.UnavailableError` marks the dependency down in the
:class:`~lsmstore.service.readiness.Readiness` (logged once per state change), and the
probes repeat after a jittered, growing delay (:class:`~lsmstore.service.backoff.Backoff`)
until everything answers or the process is asked to stop.  Nothing else is retried
here: the next pass redoes whatever failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from lsmstore.errors import ObjectNotFoundError
from lsmstore.refstore.base import RefStore
from lsmstore.service.backoff import Backoff
from lsmstore.service.readiness import Readiness
from lsmstore.storage.base import ObjectStore

REFSTORE = "refstore"
OBJECTS = "objects"
#: A key no writer uses: a probe's ``head`` of it answers "not found" when the store is up.
PROBE_KEY = "_lsm/probe/readiness"


class Dependencies:
    def __init__(
        self, readiness: Readiness, refstore: RefStore, *, backoff: Backoff | None = None
    ) -> None:
        self.readiness = readiness
        self.refstore = refstore
        self.backoff = backoff or Backoff()

    async def _probe_refstore(self) -> None:
        await self.refstore.list_repositories(limit=1)

    @staticmethod
    async def _probe_objects(stores: list[ObjectStore]) -> None:
        for store in stores:
            try:
                await store.head(PROBE_KEY)
            except ObjectNotFoundError:
                pass

    async def check(self, stores: Iterable[ObjectStore] = ()) -> bool:
        """Probe once; True when the RefStore and every one of ``stores`` answered."""
        if not await self.readiness.check(REFSTORE, self._probe_refstore):
            return False
        listed = list(stores)
        if not listed:
            return True
        return await self.readiness.check(OBJECTS, lambda: self._probe_objects(listed))

    def reachable(self) -> None:
        """A pass just talked to the RefStore (and the stores) without trouble."""
        self.readiness.up(REFSTORE)
        if OBJECTS in self.readiness.dependencies:
            self.readiness.up(OBJECTS)

    async def settle(self, stores: Iterable[ObjectStore], stop: asyncio.Event) -> bool:
        """Probe until everything answers (True) or ``stop`` is set (False)."""
        listed = list(stores)
        while not stop.is_set():
            if await self.check(listed):
                self.backoff.reset()
                return True
            if not await self.backoff.wait(stop):
                break
        return False
