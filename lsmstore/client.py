"""The public async API: ``Store`` -> ``Repository`` -> ``Branch`` / ``Ref``.

::

    async with lsmstore.connect() as store:       # embedded default under ~/.lsmstore
        repo = await store.create_repository("demo", storage_namespace="file:///tmp/demo")
        main = repo.branch("main")
        await main.put("a/b.parquet", b"...")
        value = await main.get("a/b.parquet")

Life cycle (httpx style): :func:`connect` returns an open :class:`Store`; ``aclose()``
(or leaving ``async with``) flushes and acknowledges every pending write, stops
background tasks and releases connections; any later call raises ClosedError.

Concurrency: one Store per process is the intended use; it is safe for any number of
tasks of one event loop.  All writes to one branch share one writer (one batch every
``batch_interval_ms``); all reads share one RefStore fetch at a time per ref.

Consistency: a read on a branch sees every write acknowledged before it began, from
any process; reads through a :class:`Ref` of a commit or tag are immutable.

Errors are :mod:`lsmstore.errors` types (re-exported by ``lsmstore``): a missing key
raises NotFoundError (a KeyError); a bad key InvalidKeyError, a value over its bound
EntryTooLargeError, any other bad argument InvalidInputError (all ValueErrors), before
anything is staged.  Arguments are checked at method entry with :mod:`lsmstore.validate`;
``None`` is the only "not given" (an empty name is invalid, never the default).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from lsmstore import namespace, refexpr, validate
from lsmstore.actions import runs as _runs
from lsmstore.cache import FileCache
from lsmstore.config import Config, load_config
from lsmstore.errors import (
    ClosedError,
    InvalidInputError,
    InvalidNameError,
    InvalidURLError,
    LsmError,
    NotFoundError,
    RefNotFoundError,
    UnavailableError,
)
from lsmstore.gcfreeze import freeze_startup_state
from lsmstore.graveler.range_encoder import shared_range_encoder
from lsmstore.graveler.record import Record
from lsmstore.graveler.source import CachedSource, RangeSource
from lsmstore.objects.addresses import ALLOWED_EXTERNAL_PREFIXES_KEY, parse_allowed_prefixes
from lsmstore.objects.api import ObjectReads
from lsmstore.operations import batch as _batch
from lsmstore.operations import branches as _branches
from lsmstore.operations import imports as _imports
from lsmstore.operations import protection as _protection
from lsmstore.operations import repositories as _repositories
from lsmstore.operations import tags as _tags
from lsmstore.operations import versioning as _versioning
from lsmstore.operations import workspaces as _workspaces
from lsmstore.operations.exclusion import BranchLocks
from lsmstore.operations.objects import ObjectWrites
from lsmstore.refstore.base import Ref as RefValue
from lsmstore.refstore.base import RefStore, Workspace
from lsmstore.refstore.base import Repository as RepositoryInfo
from lsmstore.refstore.names import (
    check_new_branch_name,
    check_new_repository_name,
    check_ref_name,
)
from lsmstore.refstore.url import open_refstore
from lsmstore.staging.encoder import Encoder
from lsmstore.staging.keys import check_key, encode_opt, make_put_records, make_record
from lsmstore.staging.reader import BranchView, FileCacheLike, Files, SidecarCache, Snapshot
from lsmstore.staging.refcache import RefCache
from lsmstore.staging.writer import BranchWriter, WriterStats
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store
from lsmstore.tasks import retrieve_exception
from lsmstore.types import (
    ActionRun,
    BranchProtection,
    Change,
    Commit,
    Entry,
    HookRun,
    ImportPath,
    ImportStatus,
    LogEntry,
    MergeResult,
    Stat,
    Strategy,
)
from lsmstore.versioning import changes as _changes
from lsmstore.versioning import history as _history
from lsmstore.versioning import refs as _refs
from lsmstore.versioning.context import RepoContext, range_policy

if TYPE_CHECKING:
    from lsmstore.remote.client import RemoteStore

__all__ = [
    "Branch",
    "Entry",
    "Ref",
    "Repository",
    "ResolvedRef",
    "Stat",
    "Store",
    "connect",
]

_sha256 = hashlib.sha256

#: Listener of appends: ``(repository, branch, ref after the append)``.
AppendListener = Callable[[str, str, RefValue], None]
#: A background job of one branch (e.g. a compaction loop), run as a task until stopped.
BranchJob = Callable[["Branch"], Coroutine[Any, Any, None]]


def connect(
    refstore: str | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    **settings: Any,
) -> Store | RemoteStore:
    """Open a :class:`Store`, or a :class:`~lsmstore.remote.RemoteStore` for a server.

    ``refstore`` names the RefStore (``local:///dir``, ``redis://host:port/db``,
    ``dynamodb://table?region=...&endpoint_url=...``) or a server
    (``http(s)://host:port``, also the ``server_url`` setting; credentials from the
    ``access_key_id``/``secret_access_key`` settings); without it, the configured one
    or the embedded default ``local://<home>/refs``.  ``config`` is a TOML file
    (else ``$LSMSTORE_CONFIG``); ``settings`` override any setting by name
    (:class:`lsmstore.config.Config`).  Precedence: arguments > ``LSMSTORE_*``
    variables > file > defaults.  No I/O happens until first use.  Both kinds of
    store offer the same API (:mod:`lsmstore.api`).  A ``refstore`` that is not a
    string raises InvalidInputError.
    """
    if refstore is not None:
        validate.check_str(refstore, "refstore URL", empty_ok=True)
    if refstore is not None and refstore.lower().startswith(("http://", "https://")):
        settings["server_url"], refstore = refstore, None
    cfg = load_config(refstore, config=config, **settings)
    url = cfg.server_url or (cfg.refstore if cfg.refstore.lower().startswith("http") else "")
    if url:
        from lsmstore.remote.client import RemoteStore

        return RemoteStore(cfg, url=url)
    return Store(cfg)


def _file_cache(config: Config) -> FileCache:
    return FileCache(
        ram_bytes=config.cache_ram_bytes,
        disk_dir=config.cache_path if config.cache_disk_bytes else None,
        disk_bytes=config.cache_disk_bytes,
    )


@dataclass(frozen=True, slots=True)
class ResolvedRef:
    """What ``Repository.resolve_ref`` found: a live branch, or a fixed commit."""

    expression: str
    branch: str | None  # set for a bare branch name: reads see its staged writes
    commit_id: str  # the commit (for a branch: its base at resolution time; "" if none)


class Store:
    """Repositories of one RefStore, with a shared file cache. See the module docstring."""

    def __init__(
        self,
        config: Config,
        *,
        refstore: RefStore | None = None,
        cache: FileCacheLike | None = None,
        open_objects: Callable[[str], ObjectStore] | None = None,
        clock: Callable[[], float] = time.time,
        token: Callable[[int], str] = secrets.token_hex,
    ) -> None:
        """``refstore``, ``cache`` and ``open_objects`` (storage namespace URL -> store)
        replace the parts the configuration would open (by default
        :func:`open_object_store` with the ``local_sync`` setting); tests use them to
        inject faults."""
        if not isinstance(config, Config):
            raise InvalidInputError(
                f"Store needs a Config (lsmstore.load_config), not {type(config).__name__}"
            )
        self.config = config
        self.refstore: RefStore = refstore or open_refstore(config.refstore_url)
        self.cache: FileCacheLike = cache or _file_cache(config)
        self.sidecars = SidecarCache(config.sidecar_cache_entries)
        self.refs = RefCache(self.refstore)
        #: Encodes the writers' batches (in a worker process when there is a spare CPU).
        self.encoder = Encoder()
        self.clock = clock
        #: The per-branch locks the operations layer takes (lsmstore.operations.exclusion).
        self.exclusion = BranchLocks()
        #: Randomness of repository, action run and import ids.
        self.token = token
        self._open_objects = open_objects or functools.partial(
            open_object_store, local_sync=config.local_sync
        )
        self._objects: dict[str, ObjectStore] = {}
        #: Keyed by (repository name, repository id, branch).  Both are bounded
        #: (docs/security.md, "Per-branch state"): views are an LRU of
        #: ``branch_views_cached``; a writer leaves when its branch is found gone or it
        #: has been idle ``writer_idle_s`` (:meth:`_sweep_idle_writers`).
        self._writers: dict[tuple[str, str, str], BranchWriter] = {}
        self._views: OrderedDict[tuple[str, str, str], BranchView] = OrderedDict()
        #: Writers dropped from ``_writers``, until their close (which flushes what they
        #: hold) is over.
        self._retiring: dict[BranchWriter, asyncio.Task[None]] = {}
        self._last_sweep = clock()
        self._repos: dict[str, Repository] = {}
        self._jobs: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._append_listeners: list[AppendListener] = []
        self._closed = False
        self._background: Any = None
        if config.compaction_in_process_enabled:
            # In-process compaction wires itself in through the seams below; imported
            # here so that a client without it never loads the compaction engine.
            from lsmstore.compaction.inprocess import attach

            self._background = attach(self)

    # --- repositories ------------------------------------------------------------------

    async def create_repository(
        self,
        name: str,
        *,
        storage_namespace: str,
        default_branch: str = "main",
        metadata: Mapping[str, str] | None = None,
    ) -> Repository:
        """Record a repository and create its default branch on an initial empty commit.

        ``metadata`` is kept with the repository; the key
        ``lsmstore.allowed_external_prefixes`` lists URI prefixes outside the storage
        namespace that ``Branch.link`` may point at (docs/client.md, "Objects API").
        RefExistsError if the name is taken, NamespaceInUseError if the namespace is
        (docs/security.md, "Namespaces, ownership and deletion"); InvalidNameError/InvalidURLError/
        InvalidInputError for bad names, namespaces or metadata (checked before
        anything is written).
        """
        self._check_open()
        check_new_repository_name(name)
        check_new_branch_name(default_branch)
        validate.check_url_text(storage_namespace, "storage namespace", InvalidURLError)
        md = validate.check_metadata(metadata, "repository metadata")
        parse_allowed_prefixes(
            md.get(ALLOWED_EXTERNAL_PREFIXES_KEY), storage_namespace.partition("://")[0].lower()
        )
        location = namespace.resolve(storage_namespace, self.config.home)
        created = self.clock()
        info = RepositoryInfo(
            name,
            storage_namespace,
            default_branch,
            created_at=created,
            metadata=md,
            uid=namespace.new_uid(self.token),
            location=location,
        )
        return await _repositories.create(self, info)

    async def get_repository(self, name: str) -> Repository:
        """RepositoryNotFoundError if there is none."""
        self._check_open()
        info = await self.refstore.get_repository(name)
        return self._repository(info)

    async def list_repositories(
        self, *, after: str | None = None, limit: int = 1000
    ) -> list[Repository]:
        self._check_open()
        infos = await self.refstore.list_repositories(after=after, limit=limit)
        return [self._repository(i, reachable=False) for i in infos]

    async def delete_repository(self, name: str) -> None:
        """Forget the repository and its refs (objects stay until garbage collection).
        Pending writes to it are flushed first.  Its namespace's ownership marker is
        marked released first (a new repository may then take the namespace)."""
        self._check_open()
        for job in [k for k in self._jobs if k[0] == name]:
            await self.stop_job(*job)
        for key in [k for k in self._writers if k[0] == name]:
            await self._writers.pop(key).aclose()
        await self._retired(lambda w: w.repo == name)
        await _repositories.delete(self, await self.refstore.get_repository(name))
        self._repos.pop(name, None)
        for key in [k for k in self._views if k[0] == name]:
            del self._views[key]

    def _repository(self, info: RepositoryInfo, *, reachable: bool = True) -> Repository:
        """The handle of ``info`` (kept while the record is unchanged).  ``reachable``:
        UnavailableError if its recorded ``local://`` directory is not there (another
        machine's); listings skip the check."""
        repo = self._repos.get(info.name)
        if repo is None or repo.info != info:
            if reachable:
                namespace.reachable_location(info)
            repo = self._repos[info.name] = Repository(self, info)
        return repo

    # --- shared parts ------------------------------------------------------------------

    def objects(self, storage_namespace: str) -> ObjectStore:
        """The object store of a storage namespace URL (one per URL, shared)."""
        self._check_open()
        validate.check_url_text(storage_namespace, "storage namespace", InvalidURLError)
        store = self._objects.get(storage_namespace)
        if store is None:
            store = self._objects[storage_namespace] = self._open_objects(storage_namespace)
        return store

    def open_objects(self, url: str) -> ObjectStore:
        """A new object store of ``url``, not shared: the caller closes it."""
        self._check_open()
        return self._open_objects(url)

    def writer(self, repo: Repository, branch: str) -> BranchWriter:
        """The one writer of ``repo``/``branch`` in this process (created on first use).

        Writers (and views) are keyed by the repository's id, never only its name: a
        repository deleted and re-created meanwhile gets new ones, and a writer of the
        old one is closed (its appends are refused by the RefStore)."""
        key = (repo.name, namespace.owner_id(repo.info), branch)
        w = self._writers.get(key)
        if w is None:
            self._check_open()
            check_ref_name(branch)
            for stale in [k for k in self._writers if k[0] == repo.name and k[2] == branch]:
                self._retire(stale, self._writers[stale])
            self._sweep_idle_writers()
            if self.config.gc_freeze != "off":
                freeze_startup_state()
            w = self._writers[key] = BranchWriter(
                self.refstore,
                repo.objects,
                repo.name,
                branch,
                self.config,
                clock=self.clock,
                on_append=lambda ref: self._appended(repo.name, branch, ref),
                encoder=self.encoder,
                repository_id=repo.info.uid,
                before_append=functools.partial(
                    _protection.check, self.refstore, repo.info, branch, "write to"
                ),
                on_gone=functools.partial(self._retire, key),
            )
        return w

    def _retire(self, key: tuple[str, str, str], w: BranchWriter) -> None:
        """Drop ``w`` (the writer of ``key``: its branch is gone, it is idle, or its
        repository was re-created) and close it in the background.  Writes it holds are
        still flushed, with the outcome they would have had (:meth:`aclose` and
        ``Branch.flush`` wait for them); the next write opens a new writer."""
        if self._writers.get(key) is w:
            del self._writers[key]
        if w.closing:
            return
        w.retire()
        task = asyncio.ensure_future(w.aclose())
        self._retiring[w] = task

        def done(t: asyncio.Future[None]) -> None:
            self._retiring.pop(w, None)
            retrieve_exception(t)

        task.add_done_callback(done)

    def _sweep_idle_writers(self) -> None:
        """Retire the writers idle for ``writer_idle_s`` (nothing pending, no batch
        sealed since).  Run when a writer is made, at most every quarter of that time,
        so a writer outlives its last write by at most about 1.25 ``writer_idle_s``
        (measured in writer creations: no new writer, no growth)."""
        now = self.clock()
        idle_s = self.config.writer_idle_s
        if now - self._last_sweep < idle_s / 4:
            return
        self._last_sweep = now
        for key, w in list(self._writers.items()):
            if now - w.last_active >= idle_s and w.idle():
                self._retire(key, w)

    async def _retired(self, which: Callable[[BranchWriter], bool]) -> None:
        """Wait for the closes of the retired writers ``which`` selects."""
        tasks = [t for w, t in self._retiring.items() if which(w)]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def view(self, repo: Repository, branch: str) -> BranchView:
        key = (repo.name, namespace.owner_id(repo.info), branch)
        views = self._views
        v = views.get(key)
        if v is None:
            check_ref_name(branch)
            for stale in [k for k in views if k[0] == repo.name and k[2] == branch]:
                del views[stale]
            v = views[key] = BranchView(repo.name, branch, repo.files, self.refs)
            # A view is a cache (a Branch handle keeps its own): dropping one only
            # costs the next handle a snapshot load.
            while len(views) > self.config.branch_views_cached:
                views.popitem(last=False)
        else:
            views.move_to_end(key)
        return v

    # --- background seams ----------------------------------------------------------------

    def add_append_listener(self, listener: AppendListener) -> None:
        """Call ``listener(repo, branch, ref)`` after every L1 append by this process
        (e.g. to schedule compaction when L1 grows). It must not block."""
        self._append_listeners.append(listener)

    def _appended(self, repo: str, branch: str, ref: RefValue) -> None:
        for listener in self._append_listeners:
            listener(repo, branch, ref)

    def start_job(self, name: str, branch: Branch, job: BranchJob) -> asyncio.Task[None]:
        """Run ``job(branch)`` as a background task named ``name`` (e.g. "compactor")
        until :meth:`stop_job` or ``aclose()``.  One job per name and branch."""
        self._check_open()
        key = (branch.repository.name, branch.name, name)
        if key in self._jobs and not self._jobs[key].done():
            raise InvalidInputError(f"job {name!r} already runs on {key[0]}/{key[1]}")
        task = asyncio.get_running_loop().create_task(job(branch), name=f"{name} {key[0]}/{key[1]}")
        self._jobs[key] = task
        return task

    async def stop_job(self, repo: str, branch: str, name: str) -> None:
        task = self._jobs.pop((repo, branch, name), None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def notify_l1_changed(self, repo: str, branch: str) -> None:
        """Tell this process's writer of ``repo``/``branch`` that its L1 list shrank
        (after a compaction or commit), waking it if it stalls at the hard limit."""
        for key, w in list(self._writers.items()):
            if key[0] == repo and key[2] == branch:
                w.l1_changed()

    def writer_stats(self) -> dict[tuple[str, str], WriterStats]:
        return {(k[0], k[2]): w.stats for k, w in self._writers.items()}

    # --- life cycle ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("store is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Flush and acknowledge pending writes, stop jobs, close every connection."""
        if self._closed:
            return
        self._closed = True
        # Writers first: their last flush may wait on the L1 hard bound, which only a
        # still-running (in-process) compactor can relieve.
        writers = list(self._writers.values())
        self._writers.clear()
        await asyncio.gather(*(w.aclose() for w in writers), return_exceptions=True)
        await self._retired(lambda w: True)
        for key in list(self._jobs):
            await self.stop_job(*key)
        # Every part is closed even when one fails; the first failure is raised last.
        steps: list[Callable[[], Awaitable[None]]] = [self.encoder.aclose, self.refs.aclose]
        steps += [objects.aclose for objects in self._objects.values()]
        self._objects.clear()
        close = getattr(self.cache, "aclose", None)
        if close is not None:
            steps.append(close)
        steps.append(self.refstore.aclose)
        failures: list[Exception] = []
        for step in steps:
            try:
                await step()
            except Exception as e:
                failures.append(e)
        if failures:
            first = failures[0]
            if isinstance(first, LsmError):
                raise first
            raise UnavailableError(f"closing the store failed: {first!r}") from first

    async def __aenter__(self) -> Self:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            await self.aclose()
            return
        # The body's error is the one to report: a failure while closing after it
        # is noted on it instead of replacing it.
        try:
            await self.aclose()
        except Exception as e:
            exc.add_note(f"also, closing the store failed: {type(e).__name__}: {e}")


class Repository:
    """A repository: its branches, refs and the stores behind them.

    ``refstore``, ``objects`` (the storage namespace's ObjectStore), ``cache`` (the
    shared FileCache) and ``source`` (committed ranges through the cache) are public
    so that version control, compaction and tools can work on the same parts.
    """

    def __init__(self, store: Store, info: RepositoryInfo) -> None:
        self.store = store
        self.info = info
        self.name = info.name
        self.storage_namespace = info.storage_namespace
        self.default_branch = info.default_branch
        self.refstore = store.refstore
        self.objects = store.objects(namespace.location_of(info))
        self.cache = store.cache
        self.source: RangeSource = CachedSource(self.objects, self.cache)
        self.files = Files(self.objects, self.cache, self.source, store.sidecars)

    def __repr__(self) -> str:
        return f"Repository({self.name!r}, {self.storage_namespace!r})"

    @property
    def created_at(self) -> float:
        """When the repository was created (seconds since the epoch)."""
        return self.info.created_at

    def branch(self, name: str | None = None) -> Branch:
        """A handle on a branch (the default branch when ``name`` is None; an empty name
        is invalid). No I/O."""
        return Branch(self, check_ref_name(self.default_branch if name is None else name))

    def ref(self, expression: str) -> Ref:
        """A read-only view of a branch, tag or commit (resolved on first read).

        A bare branch name reads the branch's current state, staged writes included;
        a tag or commit ID reads that commit, immutably.
        """
        if not isinstance(expression, str) or not expression:
            raise InvalidInputError(f"invalid ref expression {expression!r}")
        return Ref(self, expression)

    async def resolve_ref(self, expression: str) -> ResolvedRef:
        """Resolve a ref expression (:mod:`lsmstore.refexpr`: branch, tag, commit ID or
        prefix, ``~N``/``^N``).  A bare branch name stays a live branch.  Assign
        :attr:`ref_resolver` to resolve differently."""
        if self.ref_resolver is not None:
            return await self.ref_resolver(self, expression)
        found = await refexpr.resolve(self.context(), expression)
        return ResolvedRef(expression, found.branch, found.commit_id)

    def context(self) -> RepoContext:
        """This repository as version-control code sees it (same stores and cache; one
        per repository, so parsed commits are kept)."""
        ctx = self._context
        if ctx is None:
            ctx = self._context = RepoContext(
                self.name,
                self.refstore,
                self.objects,
                policy=range_policy(self.store.config),
                source=self.source,
                files=self.cache,
                default_branch=self.default_branch,
                clock=self.store.clock,
                range_encoder=shared_range_encoder(),
            )
        return ctx

    _context: RepoContext | None = None

    #: An alternative resolver (``(repository, expression) -> ResolvedRef``).
    ref_resolver: Callable[[Repository, str], Awaitable[ResolvedRef]] | None = None

    async def list_branches(
        self, *, prefix: str = "", after: str | None = None, limit: int = 1000
    ) -> list[str]:
        refs = await self.refstore.list_refs(
            self.name, prefix=prefix, after=after, limit=limit, kind="branch"
        )
        return [name for name, _ in refs]

    # --- version control (docs/versioning.md) -------------------------------------------

    async def create_branch(self, name: str, *, source: str | None = None) -> Branch:
        """Create branch ``name`` at the commit ``source`` names (any ref expression;
        default: the default branch).  The new branch starts from the *committed* state:
        staged writes of a source branch are not copied.  RefExistsError if a branch or
        tag has the name."""
        await _branches.create(self, name, self.default_branch if source is None else source)
        return self.branch(name)

    async def delete_branch(self, name: str) -> None:
        """Delete a branch and drop its staged writes (this process's pending writes to
        it are flushed first).  The default branch cannot be deleted (InvalidInputError)."""
        await _branches.delete(self, name)

    async def create_tag(self, name: str, target: str) -> str:
        """Tag the commit ``target`` names (create-if-absent: RefExistsError if the name
        is taken; tags never move).  Returns the commit ID."""
        return await _tags.create(self, name, target)

    # --- workspaces (docs/client.md, "Workspaces") --------------------------------------

    async def workspaces(self, *, after: str | None = None, limit: int = 1000) -> list[Workspace]:
        """The repository's workspaces in name order (``name``, ``branch`` it came from,
        ``base``, ``l1``/``l2`` file ids, ``created_at``)."""
        return await self.refstore.list_workspaces(self.name, after=after, limit=limit)

    async def get_workspace(self, name: str) -> Workspace:
        """WorkspaceNotFoundError if there is none."""
        return await self.refstore.get_workspace(self.name, name)

    async def drop_workspace(self, name: str) -> None:
        """Delete a workspace; its changes are lost (the files are collected by the
        staging sweep after the grace period).  WorkspaceNotFoundError."""
        await self.refstore.drop_workspace(self.name, name)

    async def delete_tag(self, name: str) -> None:
        """RefNotFoundError if there is no such tag."""
        await _tags.delete(self, name)

    async def list_tags(
        self, *, prefix: str = "", after: str | None = None, limit: int = 1000
    ) -> list[str]:
        return [t.name async for t in _refs.list_tags(
            self.context(), prefix=prefix, after=after, limit=limit
        )]  # fmt: skip

    async def log(
        self,
        ref: str | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
        first_parent: bool = True,
    ) -> AsyncIterator[LogEntry]:
        """Commits from ``ref`` (default: the default branch's head) back, newest first:
        entries with ``id`` and the commit's fields.  ``first_parent`` follows the
        branch's own line (``main~1``, ``main~2`` ...); False lists every ancestor by
        generation.  Page with ``after=<last id>`` and ``limit``."""
        validate.check_optional_str(after, "log after")
        validate.check_bool(first_parent, "log first_parent")
        ctx = self.context()
        head = await refexpr.resolve(ctx, self.default_branch if ref is None else ref)
        async for entry in _history.log(
            ctx, head.commit_id, after=after, limit=limit, first_parent=first_parent
        ):
            yield entry

    async def diff(self, left: str, right: str) -> AsyncIterator[Change]:
        """Changes from the committed state ``left`` names to the one ``right`` names, in
        key order: ``Change(key, kind, left, right)`` with kind added/removed/changed."""
        async for change in _changes.diff_refs(self.context(), left, right):
            yield change

    async def diff_uncommitted(self, branch: str | None = None) -> list[Change]:
        """What committing ``branch`` (default: the default branch) now would change."""
        return await self.branch(branch).diff_uncommitted()

    async def branch_protection(self) -> BranchProtection:
        """The repository's branch protection rules and their ETag."""
        return await _protection.get_rules(self)

    async def set_branch_protection(
        self, patterns: Sequence[str], *, if_match: str | None = None
    ) -> BranchProtection:
        """Replace the branch protection rules (``if_match``: only while their ETag is
        that one, else PreconditionFailedError); the new rules and ETag."""
        return await _protection.set_rules(self, patterns, if_match=if_match)

    # --- actions (docs/actions.md) -------------------------------------------------------

    async def action_runs(
        self,
        *,
        branch: str | None = None,
        commit: str | None = None,
        after: str | None = None,
        amount: int = 100,
    ) -> list[ActionRun]:
        """Runs of the repository's actions, newest first, strictly after run ID
        ``after``; with ``branch`` / ``commit``: only those of that branch / commit ID."""
        validate.check_int(amount, "amount", min_value=1, max_value=1000)
        out: list[ActionRun] = []
        async for run in _runs.list_runs(
            self.objects, after=after or "", branch=branch or "", commit=commit or ""
        ):
            out.append(run)
            if len(out) == amount:
                break
        return out

    async def action_run(self, run_id: str) -> ActionRun:
        """One run; NotFoundError when there is none."""
        return (await _runs.get_run(self.objects, run_id))[0]

    async def run_hooks(
        self, run_id: str, *, after: str | None = None, amount: int = 100
    ) -> list[HookRun]:
        """The hooks of a run in hook run ID order, strictly after ``after``."""
        validate.check_int(amount, "amount", min_value=1, max_value=1000)
        _, hooks = await _runs.get_run(self.objects, run_id)
        return [h for h in hooks if not after or h.hook_run_id > after][:amount]

    async def hook_output(self, run_id: str, hook_run_id: str) -> bytes:
        """What a hook of a run sent and received (docs/actions.md, "Output")."""
        return await _runs.get_output(self.objects, run_id, hook_run_id)

    async def merge(
        self,
        source: str,
        *,
        into: str | None = None,
        strategy: Strategy | None = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
        squash: bool = False,
    ) -> MergeResult:
        """Three-way merge of the commit ``source`` names into branch ``into`` (default:
        the default branch); a merge commit with parents ``[into's base, source]``, or
        with ``squash`` the single parent ``[into's base]`` (lakeFS's squash merge).

        The destination's staged writes stay staged on top.  Already merged (with
        ``squash``: the merge would change nothing): nothing is written (``merged``
        False).  Conflicts raise MergeConflictError (``keys``) unless ``strategy`` is
        ``"source-wins"`` or ``"dest-wins"``.
        """
        return await _versioning.merge(
            self, source, self.branch(into).name, strategy=strategy, message=message,
            committer=committer, metadata=metadata, squash=squash,
        )  # fmt: skip

    async def revert(
        self,
        commit: str,
        *,
        branch: str | None = None,
        parent: int = 1,
        strategy: Strategy | None = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> MergeResult:
        """Undo the changes of the commit ``commit`` names on ``branch`` with a new
        commit (``parent`` picks the side of a merge commit to revert to)."""
        return await _versioning.revert(
            self, commit, self.branch(branch).name, parent=parent, strategy=strategy,
            message=message, committer=committer, metadata=metadata,
        )  # fmt: skip


class _Reads(ObjectReads):
    """Reads shared by Branch and Ref: ``get``, ``exists``, ``stat``, ``list``, and the
    object reads ``stat_object``, ``open``, ``list_objects``.

    A key a write would refuse (empty, over ``max_key_bytes``, not str/bytes) raises
    InvalidKeyError on reads too."""

    repository: Repository
    _max_key: int

    def _snapshot_lookup(self, key: bytes) -> Awaitable[tuple[Record | None, bool]]:
        raise NotImplementedError

    def _list(
        self, prefix: bytes, after: bytes | None, limit: int | None, delimiter: bytes | None
    ) -> AsyncIterator[Entry]:
        raise NotImplementedError

    def _where(self) -> str:
        raise NotImplementedError

    async def lookup(self, key: str | bytes) -> tuple[bytes, Stat]:
        """The value of ``key`` and its :class:`Stat`, from one lookup; NotFoundError
        (a KeyError) when absent or deleted."""
        k = check_key(key, self._max_key)
        rec, staged = await self._snapshot_lookup(k)
        if rec is None or rec.value is None:
            raise NotFoundError(f"key {validate.key_text(k)} not found in {self._where()}")
        return rec.value, Stat(k, len(rec.value), rec.identity, staged)

    async def get(self, key: str | bytes) -> bytes:
        """The value of ``key``; NotFoundError (a KeyError) when absent or deleted."""
        k = check_key(key, self._max_key)
        rec, _ = await self._snapshot_lookup(k)
        return self._value(k, rec)

    def _value(self, key: bytes, rec: Record | None) -> bytes:
        if rec is None or rec.value is None:
            raise NotFoundError(f"key {validate.key_text(key)} not found in {self._where()}")
        return rec.value

    async def exists(self, key: str | bytes) -> bool:
        rec, _ = await self._snapshot_lookup(check_key(key, self._max_key))
        return rec is not None and rec.value is not None

    async def stat(self, key: str | bytes) -> Stat:
        """Size, identity and whether the newest record is staged; NotFoundError if absent."""
        return (await self.lookup(key))[1]

    def list(
        self,
        prefix: str | bytes = b"",
        *,
        after: str | bytes | None = None,
        limit: int | None = None,
        delimiter: str | bytes | None = None,
    ) -> AsyncIterator[Entry]:
        """Entries in key order: keys starting with ``prefix``, strictly after ``after``,
        at most ``limit``; with ``delimiter`` (e.g. ``"/"``) keys that hold it after the
        prefix fold into one ``Entry(common_prefix=True)`` each, like ``ls``."""
        p = encode_opt(prefix, "prefix") or b""
        validate.check_optional_int(limit, "list limit", min_value=0)
        return self._list(p, encode_opt(after, "after"), limit, encode_opt(delimiter, "delimiter"))


class Branch(_Reads, ObjectWrites):
    """Reads and writes of one branch (raw values and objects). Cheap to create; all
    handles share one writer."""

    def __init__(self, repository: Repository, name: str) -> None:
        self.repository = repository
        self.name = name
        store = repository.store
        self._store = store
        self._config = store.config
        self._max_key = store.config.max_key_bytes
        self._max_value = store.config.max_value_bytes
        self._writer: BranchWriter | None = None
        #: The branch's reads (an engine view; the operations layer looks up through it).
        self.view = store.view(repository, name)

    def __repr__(self) -> str:
        return f"Branch({self.repository.name!r}, {self.name!r})"

    def _where(self) -> str:
        return f"{self.repository.name}/{self.name}"

    def writer(self) -> BranchWriter:
        """The branch's writer in this process (the operations layer stages through it)."""
        w = self._writer
        if w is None or w.closing:
            w = self._writer = self._store.writer(self.repository, self.name)
        return w

    def batch(self) -> _batch.WriteBatch:
        """A new :class:`~lsmstore.operations.batch.WriteBatch` of this branch: many kv /
        link / put / delete / copy entries, staged as one write by ``await
        batch.apply()``."""
        return _batch.WriteBatch(self)

    # --- writes ----------------------------------------------------------------------

    async def put(self, key: str | bytes, value: bytes, *, identity: bytes | None = None) -> None:
        """Write ``value`` under ``key``; returns once the write is durable and ordered.

        ``identity`` defaults to the SHA-256 of the value (two records with equal key
        and identity are equal).  Bounds: key 1..``max_key_bytes``, value at most
        ``max_value_bytes``; violations raise before anything is staged.
        """
        rec = make_record(key, value, identity, self._max_key, self._max_value, defer_identity=True)
        w = self._writer
        if w is None or w.closing:
            w = self.writer()
        # the common case awaits the write's own future: no coroutine per put
        fut = w.try_stage(rec)
        await (w.write(rec) if fut is None else fut)

    async def put_many(
        self,
        items: Iterable[tuple[str | bytes, bytes]] | Iterable[tuple[str | bytes, bytes, bytes]],
    ) -> None:
        """Write several ``(key, value)`` or ``(key, value, identity)`` items in one batch,
        with one acknowledgement for the lot.  All are checked first: one bad item
        stages none."""
        records = make_put_records(items, self._max_key, self._max_value)
        async with self._store.exclusion.shared(self.repository.name, self.name):
            await self.writer().write_many(records)

    async def delete(self, key: str | bytes) -> None:
        """Delete ``key`` (a tombstone; deleting an absent key is not an error)."""
        k = check_key(key, self._config.max_key_bytes)
        await self.writer().write((k, b"", None))

    async def delete_many(self, keys: Iterable[str | bytes]) -> None:
        max_key = self._config.max_key_bytes
        checked = validate.check_items(keys, "delete_many keys")
        records = [(check_key(k, max_key), b"", None) for k in checked]
        async with self._store.exclusion.shared(self.repository.name, self.name):
            await self.writer().write_many(records)

    async def stage_sst(self, sst: str | os.PathLike[str] | bytes) -> str:
        """Stage a prepared SST (a path or its bytes) as one L1 file, atomically: all of
        its records become visible at once, or none.  It is validated completely first
        (CorruptFileError, EntryTooLargeError, InvalidInputError; nothing staged).
        Returns the L1 file id."""
        data = await validate.sst_argument(sst)
        async with self._store.exclusion.shared(self.repository.name, self.name):
            return await self.writer().stage_sst(data)

    async def commit(
        self,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        committer: str | None = None,
        allow_empty: bool = False,
    ) -> Commit:
        """Commit the branch's staged writes: every write acknowledged before this call
        (from any process) is in the commit; writes acknowledged meanwhile stay staged.

        NothingToCommitError when nothing is staged (or the staged writes change
        nothing) unless ``allow_empty``.  The returned commit has ``id``, ``parents``,
        ``metarange_id``, ``committer``, ``message``, ``created_at``, ``metadata``.
        """
        return await _versioning.commit(
            self, message, metadata=metadata, committer=committer, allow_empty=allow_empty
        )

    async def cherry_pick(
        self,
        ref: str,
        *,
        parent_number: int = 1,
        strategy: Strategy | None = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Commit:
        """Apply the changes of the commit ``ref`` names (against its ``parent_number``-th
        parent, for a merge commit) onto this branch as a new commit, with the picked
        commit's message and metadata unless given.  MergeConflictError (``keys``) when
        the branch changed those keys differently, unless ``strategy``;
        NothingToCommitError when it changes nothing.  Returns the new commit."""
        r = await _versioning.cherry_pick(
            self.repository, ref, self.name, parent=parent_number, strategy=strategy,
            message=message, committer=committer, metadata=metadata,
        )  # fmt: skip
        assert r.commit is not None
        return r.commit

    async def import_start(
        self,
        paths: Sequence[ImportPath],
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        committer: str | None = None,
    ) -> str:
        """Start importing object-store ``paths`` onto this branch as one commit, in the
        background of this process (docs/client.md, "Imports"); the import's id."""
        return await _imports.start(
            self, paths, message,
            metadata=dict(metadata) if metadata is not None else None, committer=committer,
        )  # fmt: skip

    async def import_status(self, import_id: str) -> ImportStatus:
        """Where the import stands; ImportNotFoundError."""
        return await _imports.status(self, import_id)

    async def import_cancel(self, import_id: str) -> None:
        """Cancel a running import; ConflictError when it is no longer running."""
        await _imports.cancel(self, import_id)

    async def diff_uncommitted(self) -> list[Change]:
        """The staged writes as changes against the branch's base (added, removed,
        changed), in key order."""
        return [c async for c in _changes.diff_uncommitted(self.repository.context(), self.name)]

    async def flush(self) -> None:
        """Wait until every write this process staged on the branch has its outcome."""
        repo = self.repository
        w = self._store._writers.get((repo.name, namespace.owner_id(repo.info), self.name))
        if w is not None:
            await w.flush()
        await self._store._retired(lambda w: w.repo == repo.name and w.branch == self.name)

    async def stash(self, name: str) -> Workspace:
        """Move the branch's uncommitted changes into a new workspace ``name``; the branch
        reads as its last commit afterwards.  Only file ids move, in one atomic
        compare-and-swap on the branch (retried when a write, compaction or commit moved
        it meanwhile): every write acknowledged before this call is in the workspace.

        NothingToCommitError when nothing is staged; WorkspaceExistsError when the name
        is taken.  A lost answer is resolved by reading the workspace back.
        """
        return await _workspaces.stash(self, name)

    async def pop(self, name: str) -> RefValue:
        """Put workspace ``name`` on top of this branch's uncommitted changes (newer than
        what is staged here) and delete the workspace, in one atomic step.  Returns
        the branch's new ref.  WorkspaceNotFoundError, EntryTooLargeError when the
        branch would hold too many files (nothing changes)."""
        return await _workspaces.pop(self, name)

    async def reset(self) -> RefValue:
        """Drop the branch's uncommitted changes (lakectl ``branch reset``): every write
        acknowledged before this call is discarded; the branch reads as its last commit.

        One compare-and-swap of the ref (the committer's swap onto the same base), retried
        when compaction moved the staging lists meanwhile; writes acknowledged while it
        runs may be dropped too.  The dropped files become garbage.  Returns the new ref.
        """
        return await _branches.reset(self)

    # --- reads -----------------------------------------------------------------------

    async def get(self, key: str | bytes) -> bytes:
        """The value of ``key``; NotFoundError (a KeyError) when absent or deleted."""
        if type(key) is bytes and 0 < len(key) <= self._max_key:
            k = key
        else:
            k = check_key(key, self._max_key)
        # BranchView.lookup inlined: this coroutine is the only one of a warm read
        view = self.view
        ref = await view.fresh_ref()
        found = view.lookup_cached(ref, k) or await view.lookup_at(ref, k)
        return self._value(k, found[0])

    def _snapshot_lookup(self, key: bytes) -> Awaitable[tuple[Record | None, bool]]:
        return self.view.lookup(key)  # the coroutine itself: one frame less per read

    def _list(
        self, prefix: bytes, after: bytes | None, limit: int | None, delimiter: bytes | None
    ) -> AsyncIterator[Entry]:
        return self.view.list(prefix, after=after, limit=limit, delimiter=delimiter)

    async def head(self) -> RefValue:
        """The branch's current ref value: base commit, L2 and L1 file ids."""
        return await self._store.refs.get(self.repository.name, self.name)

    @property
    def writer_stats(self) -> WriterStats:
        return self.writer().stats


class Ref(_Reads):
    """A read-only view of a branch, tag or commit, resolved on first read.

    A bare branch name stays live (each read sees the branch as of that read); a tag
    or commit is resolved once and then read with no RefStore call.
    """

    def __init__(self, repository: Repository, expression: str) -> None:
        self.repository = repository
        self.expression = expression
        self._max_key = repository.store.config.max_key_bytes
        self._resolved: ResolvedRef | None = None
        self._snapshot: Snapshot | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"Ref({self.repository.name!r}, {self.expression!r})"

    def _where(self) -> str:
        return f"{self.repository.name}/{self.expression}"

    async def resolve(self) -> ResolvedRef:
        if self._resolved is None:
            async with self._lock:
                if self._resolved is None:
                    self._resolved = await self.repository.resolve_ref(self.expression)
        return self._resolved

    async def _live_branch(self) -> RefValue | None:
        """On the first read of a bare name (no modifiers, the default resolver): the
        branch's ref value, fetched through the store's coalesced ref reads
        (:class:`RefCache`, a value read after this read began), which both resolves the
        name and is the snapshot the read uses -- one shared RefStore call instead of a
        resolution of its own plus the branch's.  None when the name is resolved
        already or is not a branch with a commit (then :meth:`resolve` decides: a tag,
        a commit ID, or the error)."""
        expr = self.expression
        if (
            self._resolved is not None
            or self.repository.ref_resolver is not None
            or "~" in expr
            or "^" in expr
        ):
            return None
        repo = self.repository
        try:
            ref = await repo.store.refs.get(repo.name, expr)
        except (RefNotFoundError, InvalidNameError):
            return None
        if not ref.is_branch or not ref.base:
            return None
        self._resolved = ResolvedRef(expr, expr, ref.base)
        return ref

    async def _fixed(self) -> Snapshot | None:
        """The snapshot of a commit, or None for a live branch."""
        if self._snapshot is not None:
            return self._snapshot
        r = await self.resolve()
        if r.branch is not None:
            return None
        snap = await Snapshot.load(
            RefValue("tag", r.commit_id), self.repository.files, self.repository.default_branch
        )
        self._snapshot = snap
        return snap

    def _view(self) -> BranchView:
        return self.repository.store.view(self.repository, self.expression)

    async def _snapshot_lookup(self, key: bytes) -> tuple[Record | None, bool]:
        snap = self._snapshot
        if snap is None:
            live = await self._live_branch()
            if live is not None:
                return await self._view().lookup(key, live)
            snap = await self._fixed()
            if snap is None:
                return await self._view().lookup(key)
        return await snap.lookup(key)

    async def _list(
        self, prefix: bytes, after: bytes | None, limit: int | None, delimiter: bytes | None
    ) -> AsyncIterator[Entry]:
        live = None if self._snapshot is not None else await self._live_branch()
        snap = None if live is not None else await self._fixed()
        if snap is None:
            it = self._view().list(prefix, after=after, limit=limit, delimiter=delimiter, ref=live)
        else:
            it = snap.list(prefix, after=after, limit=limit, delimiter=delimiter)
        async for e in it:
            yield e

    @property
    def commit_id(self) -> str | None:
        """The resolved commit (None before the first read or for a live branch)."""
        r = self._resolved
        return None if r is None or r.branch is not None else r.commit_id

    @property
    def id(self) -> str | None:
        """The commit this view reads, once resolved (``await ref.resolve()`` or a first
        read); None before, and for a live branch (see :meth:`commit`)."""
        return self.commit_id

    async def commit(self) -> Commit:
        """The commit this view names: for a tag, commit ID or expression with
        modifiers the resolved commit; for a bare branch name its current base."""
        r = await self.resolve()
        ctx = self.repository.context()
        if r.branch is not None:
            return await ctx.commit((await refexpr.resolve(ctx, r.branch)).commit_id)
        return await ctx.commit(r.commit_id)
