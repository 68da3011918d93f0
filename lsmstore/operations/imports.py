"""Import from an object-store prefix as one commit (lakeFS's ``importStart`` /
``importStatus`` / ``importCancel``), run in the background of the process that
started it.

**What lands.**  Each source (:class:`~lsmstore.types.ImportPath`) is listed from its
store, a page at a time, in key order: a ``common_prefix`` source's objects land at
``destination`` + the rest of their key, an ``object`` source's one object at
``destination``.  Each object becomes an entry that *references* it (its physical
address, size and ETag -- MD5 of its bytes where the store lists no ETag, a local
directory; no data is copied; modification time: the import's start).  The sources'
listings are merged in key order (a path two sources give is taken from the later one)
and cut into committed ranges as they stream (:class:`~lsmstore.graveler.ranges.
RangeWriter`): memory stays bounded whatever the number of objects.  The ranges are
then grafted onto the branch's base (:mod:`lsmstore.versioning.graft`) replacing every
``common_prefix`` destination -- a path under one that the import does not write is
deleted -- and committed with the caller's message and metadata: one commit, parent the
branch's base, with the ``pre-commit`` / ``post-commit`` actions a commit runs
(:mod:`lsmstore.actions.runner`); the branch's staged writes stay staged on top.

**Where a source may be** (docs/security.md, "Imports"): the rule of a link
(:meth:`~lsmstore.objects.addresses.Namespace.import_source`) -- inside the
repository's storage namespace or under one of its allowed external prefixes, which
never overlap another repository's namespace, or under one of the import sources the
process grants (``server_import_sources``) when that source overlaps no repository's
namespace (:func:`_check_granted`); files under an ``_lsm`` segment (the
service's own) are skipped.  Branch protection refuses an import into a protected
branch, as a commit.

**State** (any process can read it; the RefStore decides every race).  Three things
keyed ``<repository id>:<import id>``:

* the *status record* (small records, kind ``imports``): branch, progress, outcome.
  Written by the running import (with its progress, every fifth of
  ``import_lease_s``), and by whoever settles its fate;
* the *lease* ``import/<key>`` the running import holds and renews with its progress;
* the *decision record* (kind ``import-decisions``), written once with ``if_absent``:
  ``cancel`` (:func:`cancel`), ``abandon`` (the lease lapsed: the process running it
  stopped) or ``commit <owner>`` (the import's point of no return, taken just before
  its commit moves the branch).  The first writer wins: a cancel after ``commit`` is
  refused (409), an import whose decision is not its own ``commit`` stops without
  committing.

**Retention.**  The records of an import that finished (or whose process stopped)
more than ``import_records_retention_s`` ago are deleted when another import of its
repository starts (:func:`prune`); its status then reads as not found.

**After a restart** the import is not resumed: it fails with a clear status.  A status
read that finds it running checks the lease; a lapsed lease means the process stopped,
so the reader writes ``abandon`` and the status says the import was interrupted and
must be started again (docs/decisions.md, "Imports").  A process that stopped after
taking ``commit`` may or may not have moved the branch: the reader looks for the
commit it was swapping in (kept in the status record) in the branch's history and
reports completed or failed.

**Crash cases.**  Ranges written by an interrupted import are referenced by no tree:
garbage for :mod:`lsmstore.gc`.  So an import must commit within half
``compaction_grace_s`` of its first range (else it fails, as a Spark job would).
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from lsmstore import layout, namespace, validate
from lsmstore.actions import runner as _actions
from lsmstore.config import Config
from lsmstore.errors import (
    ConflictError,
    ImportNotFoundError,
    ImportSourceNotAllowedError,
    InvalidInputError,
    LsmError,
    ObjectNotFoundError,
    RecordExistsError,
    RecordNotFoundError,
    RefNotFoundError,
    UnavailableError,
)
from lsmstore.graveler.ranges import RangeInfo, RangeWriter
from lsmstore.graveler.record import Record
from lsmstore.objects.addresses import (
    IMPORT_SOURCES_SETTING,
    Location,
    Namespace,
    import_source_list,
)
from lsmstore.objects.api import namespace as namespace_rules
from lsmstore.objects.entry import DEFAULT_CONTENT_TYPE, AddressType, BatchEncoder
from lsmstore.objects.linking import made_record
from lsmstore.objects.rules import check_checksum, check_path
from lsmstore.operations import protection as _protection
from lsmstore.refstore.base import RefStore
from lsmstore.spark.stage import check_job_age
from lsmstore.storage.base import ObjectMeta, ObjectStore
from lsmstore.types import Commit, ImportPath, ImportStatus
from lsmstore.versioning.graft import commit_ranges
from lsmstore.versioning.history import is_ancestor

if TYPE_CHECKING:
    from lsmstore.client import Branch, Repository

log = logging.getLogger("lsmstore.operations.imports")

KIND = "imports"
DECISIONS = "import-decisions"
TYPES = ("common_prefix", "object")
#: Sources of one import, at most.
MAX_PATHS = 100
CANCELED = "import canceled"
#: Records between two yields to the event loop (a listing whose pages come from a
#: cache or a local directory may not wait on anything for long).
YIELD_EVERY = 1024
JOB = "import"


def _key(repo: Repository, import_id: str) -> str:
    return f"{namespace.owner_id(repo.info)}:{import_id}"


def _lease(key: str) -> str:
    return f"import/{key}"


def check_paths(paths: Sequence[ImportPath]) -> list[ImportPath]:
    """The sources, checked for form (InvalidInputError)."""
    if not isinstance(paths, Sequence) or isinstance(paths, str) or not paths:
        raise InvalidInputError("an import needs a non-empty list of paths")
    if len(paths) > MAX_PATHS:
        raise InvalidInputError(f"an import has at most {MAX_PATHS} paths, got {len(paths)}")
    out = []
    for p in paths:
        if not isinstance(p, ImportPath):
            raise InvalidInputError(f"an import path must be an ImportPath, not {p!r}")
        validate.check_str(p.path, "import path")
        validate.check_str(p.destination, "import destination", empty_ok=True)
        if p.type not in TYPES:
            raise InvalidInputError(f"import path type {p.type!r}: must be one of {TYPES}")
        if p.type == "object" and not p.destination:
            raise InvalidInputError("an object import needs a destination path")
        out.append(p)
    return out


@dataclass(slots=True)
class _Source:
    """One checked source: where to list it, and how its keys become paths."""

    path: ImportPath
    store: ObjectStore
    key: str  # the key prefix (or the object's key) in ``store``
    address: str  # the full address ``key`` stands for
    file_scheme: bool

    def address_of(self, key: str) -> str:
        rest = key[len(self.key) :]
        return self.address + (quote(rest) if self.file_scheme else rest)


def _sources(repo: Repository, ns: Namespace, paths: Sequence[ImportPath]) -> list[_Source]:
    out = []
    for p in paths:
        loc, address = ns.import_source(p.path)
        store = _store_of(repo, loc)
        if p.type == "object" and (not loc.key or loc.key.endswith("/")):
            raise InvalidInputError(f"import path {p.path!r} of type object names no object")
        out.append(_Source(p, store, loc.key, address, ns.scheme == "file"))
    return out


async def _check_granted(repo: Repository, ns: Namespace, sources: list[_Source]) -> None:
    """ImportSourceNotAllowedError when a source read through one of the server's
    import sources (``server_import_sources``) lies under one that overlaps a
    repository's namespace (this one's too): a caller never reaches a namespace that
    way, whatever part of the prefix it names."""
    checked: set[str] = set()
    for src in sources:
        prefix = ns.granted_source(src.address)
        if prefix is None or prefix in checked:
            continue
        where = f"import source {src.path.path!r}"
        await _check_grant(repo.refstore, prefix, repo.store.config.home, where)
        checked.add(prefix)


async def _check_grant(refstore: RefStore, prefix: str, home: Path, source: str) -> None:
    owner = await namespace.owner_within(refstore, prefix, home)
    if owner is not None:
        raise ImportSourceNotAllowedError(
            f"{source}: the server's import source {prefix!r} "
            f"(setting {IMPORT_SOURCES_SETTING!r}) overlaps the storage namespace of "
            f"repository {owner.name}; a namespace is read by its repository alone"
        )


async def check_grants(refstore: RefStore, config: Config) -> None:
    """The start-up check of the import sources ``config`` grants
    (``server_import_sources``, docs/security.md, "Import sources"):
    ImportSourceNotAllowedError naming the first one that overlaps a repository's
    storage namespace.  Reads follow the granted places (entries of raw writes too), so
    a process granting a place that holds a namespace would let any writer read that
    repository's data: such a daemon does not start."""
    for prefix in import_source_list(config.server_import_sources):
        await _check_grant(refstore, prefix, config.home, "the server does not start")


def _store_of(repo: Repository, loc: Location) -> ObjectStore:
    return repo.objects if loc.store_url is None else repo.store.objects(loc.store_url)


async def md5_of(store: ObjectStore, key: str) -> str:
    """The MD5 hex of an object whose store lists no ETag (a local directory)."""
    h = hashlib.md5(usedforsecurity=False)
    async for chunk in store.get_stream(key):
        h.update(chunk)
    return h.hexdigest()


# --- the status record ------------------------------------------------------------------


@dataclass(slots=True)
class _State:
    """The status record's fields (JSON)."""

    branch: str
    state: str  # running | completed | failed
    updated: float
    ingested: int = 0
    commit_id: str | None = None
    metarange_id: str | None = None
    error: str | None = None

    def dump(self) -> bytes:
        return json.dumps(
            {
                "branch": self.branch,
                "state": self.state,
                "updated": self.updated,
                "ingested": self.ingested,
                "commit_id": self.commit_id,
                "metarange_id": self.metarange_id,
                "error": self.error,
            }
        ).encode()

    @classmethod
    def load(cls, data: bytes) -> _State:
        d = json.loads(data)
        return cls(
            d["branch"], d["state"], float(d["updated"]), int(d["ingested"]),
            d.get("commit_id"), d.get("metarange_id"), d.get("error"),
        )  # fmt: skip


async def _read_state(repo: Repository, key: str) -> _State | None:
    try:
        return _State.load(await repo.refstore.get_record(KIND, key))
    except RecordNotFoundError:
        return None


async def _write_state(repo: Repository, key: str, st: _State) -> None:
    st.updated = repo.store.clock()
    await repo.refstore.put_record(KIND, key, st.dump())


async def _decision(repo: Repository, key: str) -> str | None:
    try:
        return (await repo.refstore.get_record(DECISIONS, key)).decode()
    except RecordNotFoundError:
        return None


async def _decide(repo: Repository, key: str, decision: str) -> str:
    """Write ``decision`` unless one is there; the decision that holds."""
    try:
        await repo.refstore.put_record(DECISIONS, key, decision.encode(), if_absent=True)
        return decision
    except RecordExistsError:
        found = await _decision(repo, key)
        if found is None:  # pragma: no cover - deleted once finished
            raise UnavailableError(f"import {key}: its decision vanished") from None
        return found


# --- start --------------------------------------------------------------------------------


class _Stopped(LsmError):
    """The import's decision is not its own commit: it stops without committing."""


async def start(
    branch: Branch,
    paths: Sequence[ImportPath],
    message: str,
    *,
    metadata: dict[str, str] | None = None,
    committer: str | None = None,
) -> str:
    """Start importing ``paths`` into ``branch`` (module docstring); the import's id.
    Checks run before it starts: the branch exists and is not protected, every source
    is one the repository may reach (InvalidInputError)."""
    repo = branch.repository
    store = repo.store
    cfg = store.config
    validate.check_str(message, "commit message", empty_ok=True)
    metadata = validate.check_metadata(metadata, "commit metadata")
    committer = validate.check_committer(committer) or cfg.user
    checked = check_paths(paths)
    await _protection.guard(repo, branch.name, "import into")
    ref = await repo.refstore.get_ref(repo.name, branch.name)
    if not ref.is_branch:
        raise InvalidInputError(f"{repo.name}/{branch.name} is not a branch")
    ns = namespace_rules(repo)
    sources = _sources(repo, ns, checked)
    await _check_granted(repo, ns, sources)
    await prune(repo)
    import_id = store.token(10)
    key = _key(repo, import_id)
    owner = f"{key}/{store.token(8)}"
    lease_s = cfg.import_lease_s
    if not await repo.refstore.acquire_lease(_lease(key), owner, lease_s):
        raise ConflictError(f"import {import_id}: its lease is taken")  # pragma: no cover
    st = _State(branch.name, "running", store.clock())
    await _write_state(repo, key, st)
    run = _Run(branch, key, owner, st, sources, message, metadata or {}, committer)
    store.start_job(f"{JOB} {import_id}", branch, lambda _b: run.run())
    return import_id


class _Run:
    """One import running in this process."""

    def __init__(
        self,
        branch: Branch,
        key: str,
        owner: str,
        st: _State,
        sources: list[_Source],
        message: str,
        metadata: dict[str, str],
        committer: str,
    ) -> None:
        self.branch = branch
        self.repo = branch.repository
        self.key = key
        self.owner = owner
        self.st = st
        self.sources = sources
        self.message = message
        self.metadata = metadata
        self.committer = committer
        cfg = self.repo.store.config
        self.lease_s = cfg.import_lease_s
        #: Why the heartbeat stopped the import, if it did.
        self.stop_reason: str | None = None

    async def run(self) -> None:
        """The import beside its heartbeat; the outcome written to the status record."""
        repo = self.repo
        work = asyncio.ensure_future(self._import())
        beat = asyncio.ensure_future(self._heartbeat(work))
        try:
            await asyncio.wait([work])
            if work.cancelled():  # the heartbeat stopped it
                await self._fail(self.stop_reason or CANCELED)
            elif (e := work.exception()) is not None:
                if isinstance(e, _Stopped):
                    await self._fail(str(e))
                elif isinstance(e, LsmError):
                    decision = await _decide(repo, self.key, "abandon")
                    await self._fail(
                        CANCELED if decision == "cancel" else f"{type(e).__name__}: {e}"
                    )
                else:
                    await _decide(repo, self.key, "abandon")
                    await self._fail(f"import failed: {e!r}")
                    raise e
        except asyncio.CancelledError:  # the process stops, or import_cancel here
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            decision = await _decide(repo, self.key, "abandon")
            if not decision.startswith("commit"):
                await self._fail(
                    CANCELED
                    if decision == "cancel"
                    else "import stopped: the process running it was shut down before it "
                    "committed; start it again"
                )
            # else: stopped past its point of no return (or done); the record says
            # running with its commit id, and the next status read settles it
            raise
        finally:
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
            await repo.refstore.release_lease(_lease(self.key), self.owner)

    async def _fail(self, error: str) -> None:
        self.st.state, self.st.error = "failed", error
        await _write_state(self.repo, self.key, self.st)

    async def _heartbeat(self, work: asyncio.Future[None]) -> None:
        """Every fifth of the lease, while the import runs: the lease renewed, the
        decision read, the progress written.  A lapsed lease, or a decision other than
        its own commit, stops the import (``stop_reason``)."""
        repo = self.repo
        while not work.done():
            await asyncio.sleep(self.lease_s / 5)
            try:
                if not await repo.refstore.acquire_lease(
                    _lease(self.key), self.owner, self.lease_s
                ):
                    self.stop_reason = "import stopped: its lease lapsed (the process was slow)"
                else:
                    decision = await _decision(repo, self.key)
                    if decision is None or decision == self._commit_decision:
                        await _write_state(repo, self.key, self.st)
                        continue
                    self.stop_reason = CANCELED if decision == "cancel" else "import abandoned"
            except LsmError as e:  # the RefStore is unreachable: try again next beat
                log.warning("import %s: heartbeat failed: %s", self.key, e)
                continue
            if self.st.commit_id is None:  # not past its point of no return
                work.cancel()
                return

    @property
    def _commit_decision(self) -> str:
        return f"commit {self.owner}"

    async def _listing(
        self, src: _Source, index: int, mtime: int
    ) -> AsyncIterator[tuple[bytes, int, Record]]:
        """``(key, -index, record)`` of one source, in key order."""
        cfg = self.repo.store.config
        ns = namespace_rules(self.repo)
        encoders: dict[AddressType, BatchEncoder] = {}
        metas: AsyncIterator[ObjectMeta]
        if src.path.type == "object":
            metas = _one(src.store, src.key)
        else:
            metas = src.store.list(src.key)
        prefix = src.path.destination
        async for meta in metas:
            rest = meta.key[len(src.key) :]
            if f"/{layout.PREFIX}/" in f"/{meta.key}":
                continue  # the service's own files
            path = prefix if src.path.type == "object" else prefix + rest
            key = check_path(path, cfg.max_key_bytes)
            address, atype = ns.for_link(src.address_of(meta.key), granted=True)
            etag = meta.etag or await md5_of(src.store, meta.key)
            enc = encoders.get(atype)
            if enc is None:
                enc = encoders[atype] = BatchEncoder(mtime, 0, int(atype), DEFAULT_CONTENT_TYPE)
            identity, data = enc.encode(address, meta.size, check_checksum(etag))
            yield key, -index, made_record(key, identity, data, cfg.max_value_bytes)

    async def _merged(self, mtime: int) -> AsyncIterator[Record]:
        """Every source's records in key order; of equal paths the later source's."""
        streams = [self._listing(s, i, mtime) for i, s in enumerate(self.sources)]
        heap: list[tuple[bytes, int, Record, int]] = []
        for n, s in enumerate(streams):
            head = await anext(s, None)
            if head is not None:
                heap.append((head[0], head[1], head[2], n))
        heapq.heapify(heap)
        last: bytes | None = None
        while heap:
            key, _, rec, n = heap[0]
            if key != last:  # else an earlier source's record of the same path
                last = key
                self.st.ingested += 1
                yield rec
                if not self.st.ingested % YIELD_EVERY:
                    await asyncio.sleep(0)  # the heartbeat and the daemon's requests run
            nxt = await anext(streams[n], None)
            if nxt is None:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (nxt[0], nxt[1], nxt[2], n))

    async def _import(self) -> None:
        repo = self.repo
        store = repo.store
        cfg = store.config
        started = store.clock()
        policy = repo.context().policy
        async with RangeWriter(repo.objects, policy) as writer:
            async for rec in self._merged(int(started)):
                await writer.add(rec)
            ranges = await writer.finish()
        check_job_age(f"import {self.key}", started, store.clock(), cfg.compaction_grace_s)
        replace = [
            s.path.destination.encode() for s in self.sources if s.path.type == "common_prefix"
        ]

        async def point_of_no_return(commit_id: str) -> None:
            await _protection.guard(repo, self.branch.name, "import into")
            decision = await _decide(repo, self.key, self._commit_decision)
            if decision != self._commit_decision:
                raise _Stopped(CANCELED if decision == "cancel" else "import abandoned")
            self.st.commit_id = commit_id  # the one this attempt swaps in
            await _write_state(repo, self.key, self.st)

        # lakeFS runs the commit's hooks for an import's commit: pre-commit here, once
        # the tree is built (a failing hook fails the import, nothing committed)
        event = _actions.Event(
            "pre-commit", self.branch.name, branch_id=self.branch.name,
            commit_message=self.message, committer=self.committer,
            commit_metadata=self.metadata,
        )  # fmt: skip
        pending = await _actions.pre(repo, event, defer=True)
        commit_id = ""
        try:
            commit_id, commit = await self._commit(ranges, replace, point_of_no_return)
        finally:
            await _actions.finish(pending, commit_id)
        # post-commit before the status says completed, as lakeFS's commit returns
        # after its post hooks (their failures are recorded, never raised)
        await _actions.post(repo, event.post(source_ref=commit_id, commit_id=commit_id))
        self.st.state, self.st.commit_id = "completed", commit_id
        self.st.metarange_id = commit.metarange_id
        await _write_state(repo, self.key, self.st)

    async def _commit(
        self,
        ranges: list[RangeInfo],
        replace: list[bytes],
        point_of_no_return: Callable[[str], Awaitable[None]],
    ) -> tuple[str, Commit]:
        repo = self.repo
        return await commit_ranges(
            repo.refstore,
            repo.objects,
            repo.name,
            self.branch.name,
            ranges,
            message=self.message,
            policy=repo.context().policy,
            committer=self.committer,
            metadata=self.metadata,
            replace=replace,
            source=repo.source,
            before_swap=point_of_no_return,
            clock=repo.store.clock,
        )


async def _one(store: ObjectStore, key: str) -> AsyncIterator[ObjectMeta]:
    try:
        meta = await store.head(key)
    except ObjectNotFoundError:
        raise InvalidInputError(f"import source object {key!r} does not exist") from None
    yield ObjectMeta(key, meta.size, meta.etag)


# --- retention ----------------------------------------------------------------------------


async def prune(repo: Repository) -> int:
    """Delete the records of ``repo``'s imports that finished (or whose process
    stopped: settled first) more than ``import_records_retention_s`` ago; how many.
    Run when an import starts, so the records of a repository stay bounded by what it
    imports in that time.  The decision record goes first: a crash between the two
    leaves a finished status, which reads the same and goes next time."""
    cutoff = repo.store.clock() - repo.store.config.import_records_retention_s
    prefix = f"{namespace.owner_id(repo.info)}:"
    after = prefix
    stale: list[tuple[str, _State]] = []
    while page := await repo.refstore.list_records(KIND, after=after, limit=1000):
        for name, value in page:
            if not name.startswith(prefix):
                break
            try:
                st = _State.load(value)
            except (ValueError, KeyError, TypeError):  # pragma: no cover - written here
                log.warning("import record %s is unreadable: left alone", name)
                continue
            if st.updated < cutoff:
                stale.append((name, st))
        else:
            after = page[-1][0]
            continue
        break
    pruned = 0
    for name, st in stale:
        if (await _settled(repo, name, st)).state == "running":
            continue
        for kind in (DECISIONS, KIND):
            try:
                await repo.refstore.delete_record(kind, name)
            except RecordNotFoundError:
                pass
        pruned += 1
    return pruned


# --- status and cancel ---------------------------------------------------------------------


async def _settled(repo: Repository, key: str, st: _State) -> _State:
    """``st``, with the fate of an import whose record says running settled: canceled,
    or stopped when its lease lapsed (module docstring)."""
    if st.state != "running":
        return st
    decision = await _decision(repo, key)
    if decision == "cancel":
        st.state, st.error = "failed", CANCELED
        return st
    probe = f"{key}/status-{repo.store.token(8)}"
    if not await repo.refstore.acquire_lease(_lease(key), probe, repo.store.config.import_lease_s):
        return st  # its process holds the lease: running
    try:
        if decision is None:
            decision = await _decide(repo, key, "abandon")
        if decision == "cancel":
            st.state, st.error = "failed", CANCELED
        elif decision == "abandon":
            st.state = "failed"
            st.error = (
                "import interrupted: the process running it stopped (a server restart?) "
                "before it committed; nothing was committed, start it again"
            )
        else:  # it stopped after taking its point of no return
            if st.commit_id is not None and await _landed(repo, st.branch, st.commit_id):
                st.state = "completed"
                st.metarange_id = (await repo.context().commit(st.commit_id)).metarange_id
            else:
                st.state = "failed"
                st.error = (
                    "import interrupted while committing: its commit "
                    f"{st.commit_id or '(not written)'} did not become the branch's base; "
                    "start it again"
                )
        await _write_state(repo, key, st)
    finally:
        await repo.refstore.release_lease(_lease(key), probe)
    return st


async def _landed(repo: Repository, branch: str, commit_id: str) -> bool:
    """Whether the commit a stopped import was swapping in is in its branch's history."""
    ref = await repo.refstore.get_ref(repo.name, branch)
    if not ref.base:
        return False
    try:
        return await is_ancestor(repo.context(), commit_id, ref.base)
    except RefNotFoundError:  # never written
        return False


async def _state_of(branch: Branch, import_id: str) -> tuple[str, _State]:
    validate.check_str(import_id, "import id")
    repo = branch.repository
    key = _key(repo, import_id)
    st = await _read_state(repo, key)
    if st is None or st.branch != branch.name:
        raise ImportNotFoundError(f"no import {import_id!r} on {repo.name}/{branch.name}")
    return key, st


async def status(branch: Branch, import_id: str) -> ImportStatus:
    """The import's status (``Branch.import_status``); ImportNotFoundError."""
    repo = branch.repository
    key, st = await _state_of(branch, import_id)
    st = await _settled(repo, key, st)
    commit: Commit | None = None
    if st.state == "completed" and st.commit_id is not None:
        commit = await repo.context().commit(st.commit_id)
    return ImportStatus(
        import_id,
        st.state == "completed",
        st.updated,
        st.ingested,
        st.metarange_id,
        st.commit_id if st.state == "completed" else None,
        commit,
        st.error,
    )


async def cancel(branch: Branch, import_id: str) -> None:
    """Cancel a running import (``Branch.import_cancel``): it stops and commits nothing.
    ConflictError (409, as lakeFS) when it already completed, failed, was canceled, or
    is committing; ImportNotFoundError."""
    repo = branch.repository
    key, st = await _state_of(branch, import_id)
    st = await _settled(repo, key, st)
    if st.state != "running":
        raise ConflictError(f"import {import_id} is {st.state}: nothing to cancel")
    decision = await _decide(repo, key, "cancel")
    if decision != "cancel":
        raise ConflictError(f"import {import_id} is committing: too late to cancel")
    st.state, st.error = "failed", CANCELED
    await _write_state(repo, key, st)
    await repo.store.stop_job(repo.name, branch.name, f"{JOB} {import_id}")


__all__ = ["cancel", "check_paths", "md5_of", "prune", "start", "status"]
