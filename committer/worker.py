"""The committer worker: commits branches by policy, one pass every poll interval.

A pass lists every repository (or the ones asked for) and their branches, and commits
each branch that has staged files (L1 or L2) and is *due*:

* ``age``: its last commit is at least ``commit_interval_s`` old, or
* ``files``: L1 + L2 hold at least ``commit_max_staged_files`` files, or
* ``bytes``: their SSTs hold at least ``commit_max_staged_bytes`` bytes (read from the
  files' sidecars, which are cached: files are immutable).

``force`` commits every branch with staged files.  Commits on request go through the
client (``await branch.commit(...)``); the worker is the policy.

A policy commit is a commit like any other (docs/decisions.md, "Policy commits obey
protection and hooks"): it goes through the operations layer
(:func:`lsmstore.operations.versioning.commit_job`), so a protected branch is not
committed (outcome ``protected``) and the repository's ``pre-commit`` actions run
first -- a failing hook leaves the branch staged (outcome ``refused``) -- and its
``post-commit`` actions after.  A branch refused either way is not tried again while
its staged files are the same, for ``commit_interval_s`` (so a refusing hook is not
called every pass); a new staged file or the interval tries again.

Several workers may run at once: before committing a branch a worker takes the lease
``committer/<repo>/<branch>`` (renewed while the commit runs), and skips branches
leased by others.  The lease only avoids duplicated work; correctness comes from the
commit's compare-and-swap, so a worker that lost its lease (paused, partitioned) at
worst wastes its own work.

Each commit attempt logs one line (``event``: ``commit``, through :mod:`logging`, so
in the JSON-lines format of :mod:`lsmstore.service`; one request id per attempt) with
the branch, the outcome (``committed``, ``nothing``, ``conflict``, ``error``,
``leased``), the number of changes, ranges read/written/reused, the commit ID and the
duration; each pass logs ``pass``.

Outages: a pass that fails probes the RefStore and the failed repositories' object
stores (:class:`~lsmstore.service.dependencies.Dependencies`); while one does not
answer the worker reports not-ready and probes again after a jittered backoff instead
of running passes, and resumes on its own when they answer.  A repository that
disappears (deleted, or a RefStore that came back empty) is simply not listed any
more: nothing is written for it.

Stopping (:meth:`Worker.stop`, SIGTERM in ``__main__``): no new commit starts;
commits already running get ``shutdown_timeout_s`` to finish, then are cancelled.
A cancelled commit leaves only unreferenced objects behind (docs/versioning.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from lsmstore import layout, namespace
from lsmstore.cache import FileCache
from lsmstore.client import Store
from lsmstore.commit.job import CommitResult
from lsmstore.config import Config
from lsmstore.errors import (
    ConflictError,
    HookFailedError,
    LsmError,
    NotFoundError,
    NothingToCommitError,
    ProtectedBranchError,
    UnavailableError,
)
from lsmstore.graveler.range_encoder import shared_range_encoder
from lsmstore.graveler.source import CachedSource
from lsmstore.namespace import reachable_location
from lsmstore.operations.versioning import commit_job
from lsmstore.refstore.base import RefStore, Repository
from lsmstore.service import Backoff, ExitCode, Readiness, request_context
from lsmstore.service.dependencies import Dependencies
from lsmstore.staging.files import SIDECAR_SUFFIX, decode_sidecar
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store
from lsmstore.versioning.context import FileCacheLike, RepoContext, range_policy
from lsmstore.versioning.refs import BranchInfo, list_branches

COMMITTER = "lsmstore-committer"
MESSAGE = "Automatic commit"
#: Sidecar sizes remembered by the policy (file id -> SST bytes).
SIZE_CACHE_ENTRIES = 200_000
#: Branches remembered as refused (protected, or a pre-commit hook failed), at most.
REFUSED_ENTRIES = 10_000
_PAGE = 1000

log = logging.getLogger("committer")


@dataclass(slots=True)
class PassResult:
    committed: int = 0
    errors: int = 0
    unavailable: int = 0  # errors where a dependency did not answer
    failed_stores: dict[str, ObjectStore] = field(default_factory=dict)


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Commits due branches of one RefStore's repositories (module docstring)."""

    def __init__(
        self,
        refstore: RefStore,
        config: Config,
        *,
        repositories: Iterable[str] = (),
        force: bool = False,
        owner: str | None = None,
        committer: str = COMMITTER,
        message: str = MESSAGE,
        clock: Callable[[], float] = time.time,
        objects: Callable[[str], ObjectStore] = open_object_store,
        files: FileCacheLike | None = None,
        wrap_objects: Callable[[ObjectStore], ObjectStore] | None = None,
        on_step: Callable[[str], Awaitable[None]] | None = None,
        shutdown_timeout_s: float = 30.0,
        interval_s: float | None = None,
        readiness: Readiness | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        """``interval_s`` overrides ``commit_poll_interval_s``; ``readiness`` (default: a
        private one) reports whether the dependencies answer; ``backoff`` paces the
        probes during an outage."""
        self.refstore = refstore
        self.config = config
        self.repositories = tuple(repositories)
        self.force = force
        self.owner = owner or _owner()
        self.committer = committer
        self.message = message
        self.interval_s = interval_s if interval_s is not None else config.commit_poll_interval_s
        self.readiness = readiness or Readiness("committer")
        self.dependencies = Dependencies(self.readiness, refstore, backoff=backoff)
        self.clock = clock
        self.shutdown_timeout_s = shutdown_timeout_s
        self._open_objects = objects
        self._wrap = wrap_objects
        self._files = files
        self._on_step = on_step
        self._stores: dict[str, ObjectStore] = {}
        self._contexts: dict[str, RepoContext] = {}
        self._sizes: dict[tuple[str, str, str], int] = {}
        #: (repository id, branch) -> (its staged files, when) of a refused commit.
        self._refused: dict[tuple[str, str], tuple[tuple[str, ...], float]] = {}
        # Commits go through the operations layer on a Store over the same parts; it
        # runs no compaction of its own, and its RefStore is the caller's (not closed).
        self._own_cache = (
            FileCache(ram_bytes=config.cache_ram_bytes, disk_dir=None, disk_bytes=0)
            if files is None
            else None
        )
        self._library = Store(
            config.replace(compaction_in_process="off"),
            refstore=refstore,
            cache=files if files is not None else self._own_cache,
            open_objects=self._store,
            clock=clock,
        )
        self._slots = asyncio.Semaphore(config.commit_concurrency)
        self._stopping = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self.passes = 0
        self.committed = 0
        self._pass = PassResult()

    # --- logging -------------------------------------------------------------------

    @staticmethod
    def emit(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
        """Log ``event`` with ``fields`` (one JSON line with the service's set-up)."""
        log.log(level, event, extra={"fields": {"event": event, **fields}})

    def _failed(self, e: BaseException, store: ObjectStore | None = None) -> None:
        self._pass.errors += 1
        if isinstance(e, UnavailableError):
            self._pass.unavailable += 1
        if store is not None:
            self._pass.failed_stores[store.url] = store

    # --- the policy ----------------------------------------------------------------

    async def _staged_bytes(self, ctx: RepoContext, branch: BranchInfo) -> int:
        total = 0
        levels: list[tuple[layout.Level, tuple[str, ...]]] = [("L1", branch.l1), ("L2", branch.l2)]
        for level, ids in levels:
            for fid in ids:
                key = (ctx.objects.url, level, fid)
                size = self._sizes.get(key)
                if size is None:
                    meta = layout.staging_key(branch.name, level, fid, SIDECAR_SUFFIX)
                    size = decode_sidecar(await ctx.objects.get(meta), meta).sst_size
                    if len(self._sizes) >= SIZE_CACHE_ENTRIES:
                        self._sizes.clear()
                    self._sizes[key] = size
                total += size
        return total

    async def due(self, ctx: RepoContext, branch: BranchInfo) -> str | None:
        """Why ``branch`` should be committed now (``force``, ``age``, ``files``,
        ``bytes``), or None."""
        if not branch.staged_files:
            return None
        if self.force:
            return "force"
        cfg = self.config
        if branch.staged_files >= cfg.commit_max_staged_files:
            return "files"
        if branch.commit_id:
            last = (await ctx.commit(branch.commit_id)).created_at
            if self.clock() - last >= cfg.commit_interval_s:
                return "age"
        else:
            return "age"
        if await self._staged_bytes(ctx, branch) >= cfg.commit_max_staged_bytes:
            return "bytes"
        return None

    # --- one pass ------------------------------------------------------------------

    def _context(self, repo: Repository) -> RepoContext:
        ctx = self._contexts.get(repo.name)
        if ctx is None or ctx.objects.url != self._store(reachable_location(repo)).url:
            objects = self._store(reachable_location(repo))
            ctx = self._contexts[repo.name] = RepoContext(
                repo.name,
                self.refstore,
                objects,
                policy=range_policy(self.config),
                source=CachedSource(objects, self._files) if self._files is not None else None,
                files=self._files,
                default_branch=repo.default_branch,
                clock=self.clock,
                range_encoder=shared_range_encoder(),
            )
        return ctx

    def _store(self, namespace: str) -> ObjectStore:
        store = self._stores.get(namespace)
        if store is None:
            store = self._open_objects(namespace)
            if self._wrap is not None:
                store = self._wrap(store)
            self._stores[namespace] = store
        return store

    async def _repositories(self) -> AsyncIterator[Repository]:
        if self.repositories:
            for name in self.repositories:
                try:
                    repo = await self.refstore.get_repository(name)
                except NotFoundError:
                    self.emit("missing", level=logging.WARNING, repo=name)
                    continue
                yield repo
            return
        after: str | None = None
        while True:
            page = await self.refstore.list_repositories(after=after, limit=_PAGE)
            for repo in page:
                yield repo
            if len(page) < _PAGE:
                return
            after = page[-1].name

    async def run_once(self) -> int:
        """One pass: commit every due branch (at most ``commit_concurrency`` at once);
        the number of commits made.  Failures are logged, never raised."""
        self.passes += 1
        self._pass = result = PassResult()
        started = time.monotonic()
        before = self.committed
        tasks: list[asyncio.Task[None]] = []
        try:
            async for repo in self._repositories():
                if self._stopping.is_set():
                    break
                await self._visit(repo, tasks)
        except LsmError as e:  # listing the repositories failed: the next pass retries
            self._failed(e)
            self.emit("error", level=logging.WARNING, error=f"{type(e).__name__}: {e}")
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        result.committed = self.committed - before
        if not result.errors:
            self.dependencies.reachable()
        self.emit(
            "pass",
            committed=result.committed,
            errors=result.errors,
            unavailable=result.unavailable,
            duration_s=_since(started),
        )
        return result.committed

    async def _visit(self, repo: Repository, tasks: list[asyncio.Task[None]]) -> None:
        ctx: RepoContext | None = None
        try:
            ctx = self._context(repo)
            async for branch in list_branches(ctx):
                if self._stopping.is_set():
                    break
                if self._still_refused(repo, branch):
                    continue
                reason = await self.due(ctx, branch)
                if reason is None:
                    continue
                await self._slots.acquire()
                if self._stopping.is_set():
                    self._slots.release()
                    break
                task = asyncio.create_task(self._commit(ctx, repo, branch, reason))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
                tasks.append(task)
        except NotFoundError:  # deleted during the pass
            return
        except LsmError as e:
            self._failed(e, ctx.objects if ctx is not None else None)
            error = f"{type(e).__name__}: {e}"
            self.emit("error", level=logging.WARNING, repo=repo.name, error=error)

    def _still_refused(self, repo: Repository, branch: BranchInfo) -> bool:
        """Whether ``branch``'s commit was refused with the same staged files less than
        ``commit_interval_s`` ago (module docstring)."""
        key = (namespace.owner_id(repo), branch.name)
        refused = self._refused.get(key)
        if refused is None:
            return False
        files, when = refused
        if files == branch.l1 + branch.l2 and self.clock() - when < self.config.commit_interval_s:
            return True
        del self._refused[key]
        return False

    def _refuse(self, repo: Repository, branch: BranchInfo) -> None:
        if len(self._refused) >= REFUSED_ENTRIES:
            self._refused.clear()
        key = (namespace.owner_id(repo), branch.name)
        self._refused[key] = (branch.l1 + branch.l2, self.clock())

    async def _commit(
        self, ctx: RepoContext, repo: Repository, branch: BranchInfo, reason: str
    ) -> None:
        with request_context():
            await self._commit_in_context(ctx, repo, branch, reason)

    async def _commit_in_context(
        self, ctx: RepoContext, repo: Repository, info: BranchInfo, reason: str
    ) -> None:
        branch = info.name
        try:
            lease = f"committer/{ctx.name}/{branch}"
            ttl = self.config.commit_lease_s
            if not await self.refstore.acquire_lease(lease, self.owner, ttl):
                self.emit("commit", repo=ctx.name, branch=branch, outcome="leased")
                return
            renew = asyncio.create_task(self._renew(lease, ttl))
            try:
                await self._commit_leased(ctx, repo, info, reason)
            finally:
                renew.cancel()
                await asyncio.gather(renew, return_exceptions=True)
                try:
                    await self.refstore.release_lease(lease, self.owner)
                except LsmError:
                    pass  # it expires by itself
        finally:
            self._slots.release()

    async def _renew(self, lease: str, ttl: float) -> None:
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                await self.refstore.acquire_lease(lease, self.owner, ttl)
            except LsmError:
                pass

    async def _commit_leased(
        self, ctx: RepoContext, repo: Repository, info: BranchInfo, reason: str
    ) -> None:
        branch = info.name
        started = time.monotonic()
        base: dict[str, Any] = {"repo": ctx.name, "branch": branch, "reason": reason}
        try:
            handle = await self._library.get_repository(repo.name)
            if namespace.owner_id(handle.info) != namespace.owner_id(repo):
                raise NotFoundError(f"repository {repo.name} was re-created meanwhile")
            result: CommitResult = await commit_job(
                handle.branch(branch),
                self.message,
                committer=self.committer,
                on_step=self._on_step,
            )
        except (ProtectedBranchError, HookFailedError) as e:
            # The repository's rules refuse this commit: not a failure of the worker.
            self._refuse(repo, info)
            took = _since(started)
            outcome = "protected" if isinstance(e, ProtectedBranchError) else "refused"
            self.emit(
                "commit",
                **base,
                level=logging.WARNING,
                outcome=outcome,
                error=str(e),
                duration_s=took,
            )
        except NothingToCommitError as e:
            took = _since(started)
            self.emit("commit", **base, outcome="nothing", detail=str(e), duration_s=took)
        except ConflictError as e:
            took = _since(started)
            self.emit("commit", **base, outcome="conflict", error=str(e), duration_s=took)
        except Exception as e:  # one branch's trouble must not stop the worker
            self._failed(e, ctx.objects)
            error = f"{type(e).__name__}: {e}"
            took = _since(started)
            self.emit(
                "commit",
                **base,
                level=logging.WARNING,
                outcome="error",
                error=error,
                duration_s=took,
            )
        else:
            self.committed += 1
            self.emit("commit", **base, outcome="committed", **result.to_log())

    # --- running -------------------------------------------------------------------

    async def run(self, *, once: bool = False) -> ExitCode:
        """Passes every ``interval_s`` until :meth:`stop` (one with ``once``).

        After a failed pass the dependencies are probed; while one does not answer the
        worker is not ready and waits for it (module docstring).  ``once`` exits
        instead: ``UNAVAILABLE`` when a dependency did not answer, ``FAILED`` when a
        commit failed otherwise, else ``OK``."""
        self.emit("configured", owner=self.owner, once=once, force=self.force)
        self.readiness.set_started()
        code = ExitCode.OK
        while not self._stopping.is_set():
            started = time.monotonic()
            await self.run_once()
            result = self._pass
            if result.errors and not self._stopping.is_set():
                stores = result.failed_stores.values()
                reachable = await self.dependencies.check(stores)
                if once:
                    code = ExitCode.FAILED if reachable else ExitCode.UNAVAILABLE
                elif not reachable:
                    await self.dependencies.settle(stores, self._stopping)
                    continue  # a pass right away once they answer
            if once:
                break
            wait = self.interval_s - (time.monotonic() - started)
            if wait > 0:
                try:
                    await asyncio.wait_for(self._stopping.wait(), wait)
                except TimeoutError:
                    pass
        self.emit("stopped", passes=self.passes, committed=self.committed)
        return code

    def stop(self) -> None:
        """Start no new commit; commits already running get ``shutdown_timeout_s`` to
        finish, then are cancelled.  :meth:`run` returns once they have ended."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._running:
            self._reaper = asyncio.create_task(self._abandon_late())

    async def _abandon_late(self) -> None:
        running = list(self._running)
        _, pending = await asyncio.wait(running, timeout=self.shutdown_timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            self.emit("abandoned", commits=len(pending))

    async def aclose(self) -> None:
        """Stop (see :meth:`stop`), wait for running commits, close the object stores
        this worker opened (not the RefStore: the caller's)."""
        self.stop()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        if self._reaper is not None:
            await asyncio.gather(self._reaper, return_exceptions=True)
        # The Store's own parts: not its RefStore (the caller's), nor the object
        # stores and file cache it shares with this worker (closed here).
        await self._library.refs.aclose()
        await self._library.encoder.aclose()
        for store in self._stores.values():
            await store.aclose()
        self._stores.clear()
        self._contexts.clear()
        if self._own_cache is not None:
            await self._own_cache.aclose()


def _since(started: float) -> float:
    return round(time.monotonic() - started, 6)
