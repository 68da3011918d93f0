"""Compaction inside the client process (``compaction_in_process``; docs/compaction.md).

A lone script writing millions of keys through the embedded default must never stall
for want of a separate compactor, so a client runs the same jobs as the worker in the
background, one loop per branch it writes to.  :func:`attach` wires it into a
:class:`lsmstore.client.Store` through the store's seams: on the first append to a
branch it starts the branch's loop as the store's ``"compactor"`` job; each append
hands the new ref to :meth:`BackgroundCompactor.notify`; each swap calls
``store.notify_l1_changed`` so writers stalled by the L1 hard bound resume at once.
Without a Store::

    bg = BackgroundCompactor(refstore, config)
    writer = BranchWriter(..., on_append=bg.notifier(repo, branch))
    bg.watch(repo, branch, objects, on_compacted=lambda ref: writer.l1_changed())
    ...
    await writer.aclose(); await bg.aclose()

* An append whose L1 list passes the policy's file count (or reaches the writer's hard
  bound) wakes the branch's loop at once; otherwise it looks every
  ``compaction_interval_s`` (the age and byte triggers).
* ``on_compacted`` runs right after each swap lands, with the new ref.
* The loop also sweeps the branch's garbage every ``compaction_sweep_interval_s``.
* Several processes may compact the same branch: the per-branch lease makes one of
  them do it, and the swap's compare-and-swap keeps any race harmless.
* Stopping (``aclose()``, or the store cancelling its job) lets nothing half-done
  show: a cancelled job deletes its outputs; what it cannot, the sweep collects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lsmstore.compaction.merge_worker import MergeWorker
from lsmstore.compaction.runner import Compactor
from lsmstore.config import Config
from lsmstore.errors import ClosedError, InvalidInputError
from lsmstore.refstore.base import Ref, RefStore
from lsmstore.staging.encoder import Encoder
from lsmstore.storage.base import ObjectStore

if TYPE_CHECKING:
    from lsmstore.client import Branch, Store

log = logging.getLogger(__name__)

#: The name of the client-store job that runs a branch's loop.
JOB_NAME = "compactor"


@dataclass(eq=False)
class _Branch:
    repo: str
    branch: str
    objects: ObjectStore
    callbacks: list[Callable[[Ref], None]]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class BackgroundCompactor:
    def __init__(
        self,
        refstore: RefStore,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        on_result: Callable[[dict[str, Any]], None] | None = None,
        shutdown_timeout: float = 10.0,
        encoder: Encoder | None = None,
        merge_process: bool | None = None,
    ) -> None:
        """``merge_process``: merge and encode in a child process of our own
        (:class:`lsmstore.compaction.merge_worker.MergeWorker`) -- ``None``: when this machine
        has more than one CPU.  Otherwise jobs merge on the event loop and ``encoder``
        encodes their output files."""
        self.config = config
        if merge_process is None:
            merge_process = (os.cpu_count() or 1) > 1
        self.merger = MergeWorker() if merge_process else None
        self.compactor = Compactor(
            refstore,
            config,
            clock=clock,
            on_result=on_result,
            encoder=encoder,
            merger=self.merger,
        )
        self.shutdown_timeout = shutdown_timeout
        self._branches: dict[tuple[str, str], _Branch] = {}
        self._closing = asyncio.Event()
        self._clock = clock

    # --- registration ---------------------------------------------------------------

    def watch(
        self,
        repo: str,
        branch: str,
        objects: ObjectStore,
        *,
        on_compacted: Callable[[Ref], None] | None = None,
    ) -> None:
        """Compact ``repo/branch`` in a task of our own until :meth:`unwatch` (watching
        it again only adds ``on_compacted``)."""
        if self._closing.is_set():
            raise ClosedError("background compactor is closed")
        b = self._branches.get((repo, branch))
        if b is not None:
            if on_compacted is not None:
                b.callbacks.append(on_compacted)
            return
        b = self._register(repo, branch, objects, on_compacted)
        b.task = asyncio.get_running_loop().create_task(
            self._loop(b), name=f"compactor {repo}/{branch}"
        )

    def unwatch(self, repo: str, branch: str) -> None:
        """Stop compacting ``repo/branch`` (a running job is cancelled: it cleans up)."""
        b = self._branches.pop((repo, branch), None)
        if b is not None and b.task is not None:
            b.task.cancel()

    async def run_branch(
        self,
        repo: str,
        branch: str,
        objects: ObjectStore,
        *,
        on_compacted: Callable[[Ref], None] | None = None,
    ) -> None:
        """The loop of ``repo/branch``, in the caller's task, until cancelled or
        :meth:`aclose` (for a host that runs its own background jobs)."""
        if (repo, branch) in self._branches:
            raise InvalidInputError(f"{repo}/{branch} is already compacted in this process")
        b = self._register(repo, branch, objects, on_compacted)
        try:
            await self._loop(b)
        finally:
            if self._branches.get((repo, branch)) is b:
                del self._branches[(repo, branch)]

    def _register(
        self,
        repo: str,
        branch: str,
        objects: ObjectStore,
        on_compacted: Callable[[Ref], None] | None,
    ) -> _Branch:
        b = _Branch(repo, branch, objects, [on_compacted] if on_compacted else [])
        self._branches[(repo, branch)] = b
        return b

    def notify(self, repo: str, branch: str, ref: Ref) -> None:
        """A writer appended to ``repo/branch``: wake its loop if the ref needs it."""
        b = self._branches.get((repo, branch))
        if b is None:
            return
        n = len(ref.l1)
        if n > self.compactor.policy.max_l1_files or n >= self.config.l1_hard_limit:
            b.wake.set()

    def notifier(self, repo: str, branch: str) -> Callable[[Ref], None]:
        """``notify`` bound to one branch: a writer's ``on_append`` hook."""
        return lambda ref: self.notify(repo, branch, ref)

    # --- the per-branch loop -------------------------------------------------------------

    async def _loop(self, b: _Branch) -> None:
        interval = self.config.compaction_interval_s
        sweep_every = self.config.compaction_sweep_interval_s
        next_sweep = self._clock() + sweep_every

        def swapped(ref: Ref) -> None:
            for cb in list(b.callbacks):
                try:
                    cb(ref)
                except Exception as e:  # a callback's bug must not stop compaction
                    log.warning("compaction callback of %s/%s: %s", b.repo, b.branch, e)

        while not self._closing.is_set():
            try:
                await self.compactor.compact(
                    b.repo, b.branch, b.objects, on_swap=swapped, stop=self._closing
                )
                if self._clock() >= next_sweep:
                    next_sweep = self._clock() + sweep_every
                    await self.compactor.sweep(b.repo, b.objects, branch=b.branch)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # RefStore or store trouble: try again next round
                log.warning("background compaction of %s/%s: %s", b.repo, b.branch, e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(b.wake.wait(), interval)
            b.wake.clear()

    # --- life cycle -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop: running jobs get ``shutdown_timeout`` seconds, then are cancelled."""
        if self._closing.is_set():
            return
        self._closing.set()
        tasks = [b.task for b in self._branches.values() if b.task is not None]
        for b in self._branches.values():
            b.wake.set()
        self._branches.clear()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.shutdown_timeout)
            for t in pending:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.merger is not None:
            await self.merger.aclose()
        await self.compactor.aclose()


def attach(store: Store) -> BackgroundCompactor:
    """Run compaction inside ``store``'s process (see the module docstring)."""
    # jobs merge and encode in a process of their own (the writers' event loop sees
    # bytes, never records); where that process cannot run, output files are encoded
    # by the store's encoder (its worker process) rather than a thread holding the GIL
    bg = BackgroundCompactor(store.refstore, store.config, clock=store.clock, encoder=store.encoder)
    started: set[tuple[str, str]] = set()
    starting: set[asyncio.Task[None]] = set()

    async def start(repo: str, branch: str) -> None:
        if store.closed:
            return
        try:
            handle = (await store.get_repository(repo)).branch(branch)
            objects = handle.repository.objects

            def wake_writer(ref: Ref) -> None:
                store.notify_l1_changed(repo, branch)

            async def job(_: Branch) -> None:
                await bg.run_branch(repo, branch, objects, on_compacted=wake_writer)

            task = store.start_job(JOB_NAME, handle, job)
            # stopped (repository deleted, store closed): a later append may start it again
            task.add_done_callback(lambda _: started.discard((repo, branch)))
        except Exception as e:  # closed store, deleted repository: try on a later append
            started.discard((repo, branch))
            log.info("not compacting %s/%s in process: %s", repo, branch, e)

    def on_append(repo: str, branch: str, ref: Ref) -> None:
        if (repo, branch) not in started and not store.closed:
            started.add((repo, branch))
            task = asyncio.get_running_loop().create_task(start(repo, branch))
            starting.add(task)
            task.add_done_callback(starting.discard)
        bg.notify(repo, branch, ref)

    store.add_append_listener(on_append)
    return bg
