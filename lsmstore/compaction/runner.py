"""The compaction engine shared by the worker process and the in-process compactor.

:class:`Compactor` decides whether a branch needs compaction (the policy, with sizes
from cached sidecars), takes the branch's lease, runs jobs until the policy is
satisfied (or a job conflicts or fails), and sweeps garbage.  It resolves a
repository's object store from its storage namespace (opened once, closed by
``aclose``) unless the caller passes one.

Leases (``compact/<repo>/<branch>``, ``gc/<repo>``) only keep several compactors from
doing the same work at once; correctness never depends on them: every swap is a
compare-and-swap, and a sweep deletes nothing a ref holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any

from lsmstore.compaction.job import CompactionJob, JobResult, Sidecars, StepHook
from lsmstore.compaction.merge_worker import MergeWorker
from lsmstore.compaction.policy import Policy
from lsmstore.config import Config
from lsmstore.errors import LsmError, RefNotFoundError, RepositoryNotFoundError
from lsmstore.gc.staging import Sweeper, SweepResult
from lsmstore.namespace import reachable_location
from lsmstore.refstore.base import Ref, RefStore
from lsmstore.staging.encoder import Encoder
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store

log = logging.getLogger(__name__)

#: Jobs run on one branch per call of :meth:`Compactor.compact` at most.
MAX_JOBS_PER_CALL = 64


def default_owner() -> str:
    """A lease owner naming this process: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Compactor:
    def __init__(
        self,
        refstore: RefStore,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
        on_result: Callable[[dict[str, Any]], None] | None = None,
        step: StepHook | None = None,
        encoder: Encoder | None = None,
        merger: MergeWorker | None = None,
    ) -> None:
        """``merger`` runs the jobs' merges and encodings in a process of its own;
        without it they run on the event loop and ``encoder`` encodes the output files
        (default: a thread per file)."""
        self.refstore = refstore
        self.config = config
        self.policy = Policy.from_config(config)
        self.clock = clock
        self.owner = owner or default_owner()
        self.on_result = on_result or _log_result
        self.step = step
        self.encoder = encoder
        self.merger = merger
        self.sidecars = Sidecars(min(config.sidecar_cache_entries, 100_000) or 1)
        self.sweeper = Sweeper(config.compaction_grace_s, clock=clock)
        self._stores: dict[str, ObjectStore] = {}
        self._store_lock = asyncio.Lock()

    # --- object stores --------------------------------------------------------------

    async def objects_for(self, repo: str) -> ObjectStore:
        """The object store of ``repo``'s storage namespace (opened once)."""
        ns = reachable_location(await self.refstore.get_repository(repo))
        async with self._store_lock:
            store = self._stores.get(ns)
            if store is None:
                store = self._stores[ns] = open_object_store(ns, local_sync=self.config.local_sync)
            return store

    async def aclose(self) -> None:
        stores, self._stores = list(self._stores.values()), {}
        for s in stores:
            with contextlib.suppress(Exception):
                await s.aclose()

    # --- policy -----------------------------------------------------------------------

    async def reason(self, repo: str, branch: str, ref: Ref, objects: ObjectStore) -> str | None:
        """Why ``branch`` (at ``ref``) needs compaction, or None."""
        if not ref.is_branch or not ref.l1:
            return None
        now = self.clock()
        cheap = self.policy.cheap_reason(ref.l1, now)
        if cheap is not None:
            return cheap
        sidecars = await self.sidecars.get(objects, branch, "L1", ref.l1)
        return self.policy.reason(ref.l1, [sc.sst_size for sc in sidecars], now)

    # --- compaction -------------------------------------------------------------------

    async def compact(
        self,
        repo: str,
        branch: str,
        objects: ObjectStore | None = None,
        *,
        force: bool = False,
        on_swap: Callable[[Ref], None] | None = None,
        max_jobs: int = MAX_JOBS_PER_CALL,
        stop: asyncio.Event | None = None,
    ) -> list[JobResult]:
        """Compact ``branch`` while the policy asks for it (``force``: at least once if
        its L1 is not empty).  Returns the results of the jobs run (none when the
        branch did not need it or another compactor holds its lease).

        ``on_swap`` is called with the new ref right after each successful swap (the
        in-process compactor wakes stalled writers with it).  ``stop`` being set ends
        the loop after the running job.
        """
        if objects is None:
            objects = await self.objects_for(repo)
        lease = f"compact/{repo}/{branch}"
        ttl = self.config.compaction_lease_s
        results: list[JobResult] = []
        held = False
        renewer: asyncio.Task[None] | None = None
        try:
            for _ in range(max_jobs):
                if stop is not None and stop.is_set():
                    break
                try:
                    ref = await self.refstore.get_ref(repo, branch)
                except (RefNotFoundError, RepositoryNotFoundError):
                    break
                why = await self.reason(repo, branch, ref, objects)
                if why is None and force and not results and ref.is_branch and ref.l1:
                    why = "forced"
                if why is None:
                    break
                if not held:
                    if not await self.refstore.acquire_lease(lease, self.owner, ttl):
                        break
                    held = True
                    renewer = asyncio.create_task(self._renew(lease, ttl))
                job = CompactionJob(
                    self.refstore,
                    objects,
                    repo,
                    branch,
                    self.config,
                    sidecars=self.sidecars,
                    clock=self.clock,
                    step=self.step,
                    reason=why,
                    encoder=self.encoder,
                    merger=self.merger,
                )
                result = await job.run(ref)
                results.append(result)
                self.on_result(result.to_log())
                if result.outcome != "compacted":
                    break
                if on_swap is not None and result.ref is not None:
                    on_swap(result.ref)
        finally:
            if renewer is not None:
                renewer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewer
            if held:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.refstore.release_lease(lease, self.owner))
        return results

    async def _renew(self, lease: str, ttl: float) -> None:
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                if not await self.refstore.acquire_lease(lease, self.owner, ttl):
                    log.info("lease %s was taken over; finishing the job anyway", lease)
                    return
            except LsmError as e:
                log.info("renewing lease %s: %s", lease, e)

    # --- garbage ----------------------------------------------------------------------

    async def sweep(
        self, repo: str, objects: ObjectStore | None = None, *, branch: str | None = None
    ) -> SweepResult | None:
        """Sweep ``repo`` (or one branch) unless another compactor is sweeping it."""
        if objects is None:
            objects = await self.objects_for(repo)
        lease = f"gc/{repo}" if branch is None else f"gc/{repo}/{branch}"
        ttl = self.config.compaction_lease_s
        if not await self.refstore.acquire_lease(lease, self.owner, ttl):
            return None
        try:
            result = await self.sweeper.sweep(self.refstore, repo, objects, branch=branch)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.refstore.release_lease(lease, self.owner))
        doc = result.to_log()
        if branch is not None:
            doc["branch"] = branch
        self.on_result(doc)
        return result


def _log_result(doc: dict[str, Any]) -> None:
    level = logging.WARNING if doc.get("outcome") == "failed" or doc.get("errors") else logging.INFO
    log.log(level, doc["event"], extra={"fields": doc})
