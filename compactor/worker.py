"""The compactor worker: scans every repository and branch, compacts those that need it,
sweeps garbage, logs one JSON object per line.

A pass lists repositories and their refs through the RefStore's ordered, paged
listing, asks the policy about every branch with L1 files, and compacts up to
``concurrency`` branches at once (each under its lease, job after job until the
policy is satisfied).  Each repository is swept every ``compaction_sweep_interval_s``
(every pass with ``once``).  ``stop()`` (SIGTERM/SIGINT in ``python -m compactor``)
schedules nothing more; running jobs get ``shutdown_timeout`` seconds to finish,
then are cancelled -- a cancelled job deletes its outputs, and whatever it could not
clean up is left to the sweep.  Either way nothing it did is half-visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from lsmstore.compaction.job import StepHook
from lsmstore.compaction.runner import Compactor
from lsmstore.config import Config
from lsmstore.errors import LsmError, NotFoundError, UnavailableError
from lsmstore.refstore.base import Ref, RefStore, Repository
from lsmstore.service import Backoff, ExitCode, Readiness, request_context
from lsmstore.service.dependencies import Dependencies
from lsmstore.storage.base import ObjectStore

log = logging.getLogger("compactor")

PAGE = 1000


@dataclass(slots=True)
class PassResult:
    branches: int = 0  # branches looked at (with L1 files)
    needing: int = 0  # of which the policy picked
    outcomes: Counter[str] = field(default_factory=Counter)
    sweeps: int = 0
    errors: int = 0
    unavailable: int = 0  # of which a dependency was unreachable
    #: Stores of the repositories whose work failed (probed after the pass).
    failed_stores: dict[str, ObjectStore] = field(default_factory=dict)

    def to_log(self) -> dict[str, Any]:
        return {
            "event": "pass",
            "branches": self.branches,
            "needing": self.needing,
            "outcomes": dict(self.outcomes),
            "sweeps": self.sweeps,
            "errors": self.errors,
            "unavailable": self.unavailable,
        }


class Worker:
    def __init__(
        self,
        refstore: RefStore,
        config: Config,
        *,
        concurrency: int | None = None,
        interval: float | None = None,
        shutdown_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
        step: StepHook | None = None,
        owner: str | None = None,
        readiness: Readiness | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        """``readiness`` (default: a private one) reports whether the RefStore and the
        object stores answer; ``backoff`` paces the probes during an outage."""
        self.refstore = refstore
        self.config = config
        self.concurrency = max(1, concurrency or config.compaction_concurrency)
        self.interval = interval if interval is not None else config.compaction_interval_s
        self.shutdown_timeout = shutdown_timeout
        self.clock = clock
        self.compactor = Compactor(refstore, config, clock=clock, step=step, owner=owner)
        self.readiness = readiness or Readiness("compactor")
        self.dependencies = Dependencies(self.readiness, refstore, backoff=backoff)
        self._stop = asyncio.Event()
        self._next_sweep: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def stop(self) -> None:
        """Schedule nothing more; running jobs finish (or are cancelled at the timeout)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # --- listing ------------------------------------------------------------------------

    async def repositories(self) -> AsyncIterator[Repository]:
        after: str | None = None
        while True:
            page = await self.refstore.list_repositories(after=after, limit=PAGE)
            for repo in page:
                yield repo
            if len(page) < PAGE:
                return
            after = page[-1].name

    async def branches(self, repo: str) -> AsyncIterator[tuple[str, Ref]]:
        after: str | None = None
        while True:
            # No kind filter: it applies after paging, so a short page would not mean
            # the end.  Tags are skipped here.
            page = await self.refstore.list_refs(repo, after=after, limit=PAGE)
            for name, ref in page:
                if ref.is_branch:
                    yield name, ref
            if len(page) < PAGE:
                return
            after = page[-1][0]

    # --- passes ---------------------------------------------------------------------------

    async def run_pass(self, *, sweep_all: bool = False) -> PassResult:
        """One pass over every branch; waits for the jobs it started."""
        result = PassResult()
        slots = asyncio.Semaphore(self.concurrency)
        try:
            async for repo in self.repositories():
                if self.stopping:
                    break
                await self._visit(repo.name, slots, result, sweep_all)
        except LsmError as e:  # the RefStore listing failed: try again next pass
            self._error(result, "listing repositories", e)
        else:
            if not result.errors:
                self.dependencies.reachable()
        finally:
            await self._drain()
        return result

    async def _visit(
        self, repo: str, slots: asyncio.Semaphore, result: PassResult, sweep_all: bool
    ) -> None:
        objects: ObjectStore | None = None
        try:
            objects = await self.compactor.objects_for(repo)
            await self._scan_repo(repo, objects, slots, result)
            if self.stopping:
                return
            if sweep_all or self.clock() >= self._next_sweep.get(repo, 0.0):
                self._next_sweep[repo] = self.clock() + self.config.compaction_sweep_interval_s
                swept = await self.compactor.sweep(repo, objects)
                if swept is not None:
                    result.sweeps += 1
                    result.errors += len(swept.errors)
        except NotFoundError:  # deleted during the pass
            return
        except LsmError as e:
            if objects is not None:
                result.failed_stores[objects.url] = objects
            self._error(result, f"repository {repo}", e, repo=repo)

    @staticmethod
    def _error(result: PassResult, what: str, e: Exception, **fields: str) -> None:
        result.errors += 1
        if isinstance(e, UnavailableError):
            result.unavailable += 1
        error = f"{type(e).__name__}: {e}"
        log.warning(
            "%s: %s", what, error, extra={"fields": {"event": "error", **fields, "error": error}}
        )

    async def _scan_repo(
        self, repo: str, objects: ObjectStore, slots: asyncio.Semaphore, result: PassResult
    ) -> None:
        async for name, ref in self.branches(repo):
            if self.stopping:
                return
            if not ref.l1:
                continue
            result.branches += 1
            try:
                why = await self.compactor.reason(repo, name, ref, objects)
            except LsmError as e:
                result.failed_stores[objects.url] = objects
                self._error(result, f"{repo}/{name}: policy check", e, repo=repo, branch=name)
                continue
            if why is None:
                continue
            result.needing += 1
            if not await self._slot(slots):
                return
            task = asyncio.create_task(self._compact(repo, name, objects, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda _: slots.release())

    async def _slot(self, slots: asyncio.Semaphore) -> bool:
        """Take a job slot; False (and no slot) once stopping."""
        acquire = asyncio.create_task(slots.acquire())
        stop = asyncio.create_task(self._stop.wait())
        await asyncio.wait([acquire, stop], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not acquire.done():
            acquire.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await acquire
        if acquire.cancelled():
            return False
        if self.stopping:
            slots.release()
            return False
        return True

    async def _compact(
        self, repo: str, branch: str, objects: ObjectStore, result: PassResult
    ) -> None:
        try:
            with request_context():
                jobs = await self.compactor.compact(repo, branch, objects, stop=self._stop)
            for r in jobs:
                result.outcomes[r.outcome] += 1
                if r.outcome == "failed":
                    result.failed_stores[objects.url] = objects
        except asyncio.CancelledError:
            result.outcomes["cancelled"] += 1
            raise
        except Exception as e:
            result.failed_stores[objects.url] = objects
            self._error(result, f"{repo}/{branch}", e, repo=repo, branch=branch)

    async def _drain(self) -> None:
        """Wait for running jobs; once stopping, at most ``shutdown_timeout`` seconds."""
        while self._tasks:
            tasks = set(self._tasks)
            if not self.stopping:
                stop_wait = asyncio.create_task(self._stop.wait())
                await asyncio.wait([*tasks, stop_wait], return_when=asyncio.FIRST_COMPLETED)
                stop_wait.cancel()
                continue
            _, pending = await asyncio.wait(tasks, timeout=self.shutdown_timeout)
            for t in pending:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def run(self, *, once: bool = False) -> ExitCode:
        """Passes every ``interval`` seconds until stopped (``once``: one pass with a
        sweep of every repository).

        After a pass with failures the RefStore and the failed repositories' stores are
        probed; while one is unreachable the worker is not ready and probes again after
        a jittered backoff instead of running passes; it resumes when they answer.
        ``once`` exits instead: ``UNAVAILABLE`` when a dependency did not answer,
        ``FAILED`` when work failed otherwise, else ``OK``."""
        self.readiness.set_started()
        try:
            while True:
                t0 = time.monotonic()
                result = await self.run_pass(sweep_all=once)
                doc = result.to_log()
                doc["duration_s"] = round(time.monotonic() - t0, 4)
                log.info("pass", extra={"fields": doc})
                failed = result.errors + result.outcomes.get("failed", 0)
                if failed and not self.stopping:
                    stores = result.failed_stores.values()
                    if once:
                        if not await self.dependencies.check(stores):
                            return ExitCode.UNAVAILABLE
                        return ExitCode.FAILED
                    if not await self.dependencies.check(stores):
                        if not await self.dependencies.settle(stores, self._stop):
                            return ExitCode.OK  # stopped while waiting
                        continue  # a pass right away once they answer
                if once or self.stopping:
                    return ExitCode.OK
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.interval)
                if self.stopping:
                    return ExitCode.OK
        finally:
            await self.compactor.aclose()
