"""The client API as an interface: what every store handle offers, embedded or remote.

:func:`lsmstore.connect` returns an embedded :class:`lsmstore.client.Store` for a
RefStore URL (or the default) and a :class:`lsmstore.remote.RemoteStore` for an
``http(s)://`` server URL.  Both satisfy these protocols, and one parametrised test
suite (``tests/test_client_api.py``) runs against each, so code written against
them -- the ``lsmstore`` command, the fsspec filesystem, :mod:`lsmstore.sync` --
behaves the same on either.  Both call one implementation of every state-changing
operation (:mod:`lsmstore.operations`: the embedded classes directly, the remote ones
through the server's routes, one request per call), and the remote side raises the
exception type the server's error body names (:mod:`lsmstore.error_types`).
docs/client.md and docs/versioning.md explain the model.

The embedded classes offer more (the engine parts version-control code and the
workers use: ``refstore``, ``objects``, ``context()`` ...); those are not part of
this interface.

Rules every method follows (the method docs below add what is particular to each):

* **Arguments** are checked before any I/O (:mod:`lsmstore.validate`): a bad key is
  :class:`InvalidKeyError`, a bad repository/branch/tag name or object path
  :class:`InvalidNameError`, a value or entry over its bound
  :class:`EntryTooLargeError`, any other bad argument :class:`InvalidInputError` (all
  ``ValueError``); ``None`` is the only "not given" (an empty name is invalid, never
  the default).  Keys are ``bytes`` or ``str`` (UTF-8).
* **Not found**: :class:`RepositoryNotFoundError`, :class:`RefNotFoundError`,
  :class:`NotFoundError`, :class:`ObjectNotFoundError` (all ``KeyError``); a ref
  expression that does not parse is :class:`InvalidRefExpressionError`, one that
  names several things :class:`AmbiguousRefError`.
* **Outages**: :class:`UnavailableError` (a ``ConnectionError``) when the RefStore,
  the object store or the server cannot be reached; on a write, ``outcome_unknown``
  says whether it may have been applied (read to find out).  A write held back by
  back-pressure past its bound raises :class:`WriteStalledError` (a ``TimeoutError``).
  A refused credential or action is :class:`PermissionDeniedError`.
* **Closed**: any call on a closed store (or a handle of one) raises
  :class:`ClosedError`.
* **Durability and order**: a write returns once it is durable on the object store
  and ordered by the RefStore; a read on a branch sees every write acknowledged
  before it began, from any process; a failed write leaves nothing of its batch
  visible (docs/client.md, "Consistency").
* **Concurrency**: every method may be called from any number of tasks of the
  store's event loop at once, and from other processes on the same repositories;
  operations on one branch are ordered by the RefStore (compare-and-swap), never by
  a lock held across processes.  Handles (repositories, branches, refs) are cheap and
  hold no I/O resource of their own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from lsmstore.config import Config
from lsmstore.objects import LinkItem
from lsmstore.refstore.base import Ref as RefValue
from lsmstore.refstore.base import Workspace
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
    ObjectStats,
    Stat,
)


@runtime_checkable
class ObjectReaderAPI(Protocol):
    """A reader of one object's data as it was when :meth:`ReadsAPI.open` returned it
    (later writes to the path do not change what it reads).  ``size`` and ``stats``
    describe that object.  One reader may serve several reads, one at a time or
    concurrently; close it when done (``async with`` does)."""

    size: int
    stats: ObjectStats

    async def read(self, offset: int = 0, length: int | None = None) -> bytes:
        """``length`` bytes from ``offset`` (to the end when None): one ranged read of
        the data, shorter past the end.  InvalidInputError for a negative offset or
        length; CorruptFileError when the data is shorter than the entry says; the
        object store's error when the data object is gone (ObjectNotFoundError) or
        cannot be reached (UnavailableError)."""
        ...

    def __aiter__(self) -> AsyncIterator[bytes]:
        """The whole object as chunks, in order (streamed: memory stays bounded by the
        chunk size).  Errors as :meth:`read`."""
        ...

    async def aclose(self) -> None:
        """Close the reader; idempotent.  Reads afterwards raise ClosedError."""
        ...

    async def __aenter__(self) -> Self:
        """The reader itself."""
        ...

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Closes the reader (:meth:`aclose`)."""
        ...


class ReadsAPI(Protocol):
    """Reads of a branch or of any ref.

    On a branch (or a ref that is a bare branch name) every read sees the branch as of
    that read, staged writes included: every write acknowledged before the read began,
    from any process.  A ref naming a commit (a tag, an ID, ``main~1`` ...) is resolved
    once and then read with no RefStore call.  Reads never block writes."""

    async def get(self, key: str | bytes) -> bytes:
        """The value of ``key``.  NotFoundError (a KeyError) when absent or deleted."""
        ...

    async def lookup(self, key: str | bytes) -> tuple[bytes, Stat]:
        """The value of ``key`` and its :class:`Stat` from one lookup (one request
        remotely), so the two agree.  NotFoundError when absent or deleted."""
        ...

    async def exists(self, key: str | bytes) -> bool:
        """Whether ``key`` has a value (False when absent or deleted)."""
        ...

    async def stat(self, key: str | bytes) -> Stat:
        """``Stat(key, size, identity, staged)`` of ``key`` without its value;
        ``staged`` is True when the newest record is an uncommitted write.
        NotFoundError when absent or deleted."""
        ...

    def list(
        self,
        prefix: str | bytes = b"",
        *,
        after: str | bytes | None = None,
        limit: int | None = None,
        delimiter: str | bytes | None = None,
    ) -> AsyncIterator[Entry]:
        """The keys starting with ``prefix``, strictly after ``after``, in key (byte)
        order, at most ``limit`` (None: all), as :class:`Entry` (key, size, identity,
        value).  With a ``delimiter`` the keys that hold it after the prefix fold into
        one ``Entry(common_prefix=True)`` each (like ``ls``), counted against
        ``limit``.  Read lazily as the caller iterates."""
        ...

    async def stat_object(self, path: str) -> ObjectStats:
        """The object at ``path``: physical address (a full URI), size, checksum
        (ETag), mtime, content type, user metadata.  A raw ``put`` value reads as an
        inline object.  ObjectNotFoundError when absent or deleted."""
        ...

    async def open(self, path: str) -> Any:  # an ObjectReaderAPI
        """A reader (:class:`ObjectReaderAPI`) of the object at ``path`` as of now;
        nothing is read until its first read.  ObjectNotFoundError when absent or
        deleted."""
        ...

    def list_objects(
        self,
        prefix: str = "",
        delimiter: str = "",
        after: str | None = None,
        amount: int | None = None,
    ) -> AsyncIterator[ObjectStats]:
        """The objects under ``prefix``, strictly after ``after``, in path (UTF-8 byte)
        order, at most ``amount`` (None: all).  With a ``delimiter``, common prefixes
        come as ``ObjectStats(path_type="common_prefix")`` (only ``path`` set), counted
        against ``amount``.  Iterated lazily, as :meth:`list`."""
        ...


class RefAPI(ReadsAPI, Protocol):
    """A read-only view of a repository at a ref expression (a branch name -- live --,
    a tag, a commit ID or unique prefix, ``main~1``, ``v1^2`` ...); no I/O until used.
    Reads raise RefNotFoundError when the expression names nothing, and the expression
    errors of :mod:`lsmstore.refexpr`."""

    expression: str

    async def commit(self) -> Commit:
        """The commit the view names: a bare branch name's current base; otherwise the
        resolved commit (resolved once).  RefNotFoundError when it names nothing."""
        ...


class BranchAPI(ReadsAPI, Protocol):
    """Reads and writes of one branch; no I/O until used.  Writes raise
    RefNotFoundError when the branch does not exist.

    Writes of one process to one branch are batched: concurrent calls share one
    staging file and one RefStore append, and each returns when its batch is
    acknowledged.  Writes from several processes are ordered by the RefStore; on one
    key the write acknowledged later wins."""

    name: str

    async def put(self, key: str | bytes, value: bytes, *, identity: bytes | None = None) -> None:
        """Set ``key`` to ``value``; returns once the write is durable and ordered.
        ``identity`` (1..255 bytes) is the value's fingerprint used by diff and merge
        (default: SHA-256 of the value).  EntryTooLargeError for a value over
        ``max_value_bytes``."""
        ...

    async def put_many(self, items: Any) -> None:
        """Write many ``(key, value)`` or ``(key, value, identity)`` items as one batch
        with one acknowledgement: all are checked first (one bad item: its error, and
        nothing is staged), then all become visible at once.  A ``str``, ``bytes`` or
        mapping where a list of items is expected is InvalidInputError."""
        ...

    async def delete(self, key: str | bytes) -> None:
        """Write a tombstone for ``key``; deleting an absent key is not an error."""
        ...

    async def delete_many(self, keys: Iterable[str | bytes]) -> None:
        """Tombstones for ``keys`` as one batch, as :meth:`put_many`."""
        ...

    async def stage_sst(self, sst: str | os.PathLike[str] | bytes) -> str:
        """Stage a prepared SST (a path or its bytes) as one L1 file, atomically: all of
        its records become visible at once, or none.  It is validated completely first
        (CorruptFileError, EntryTooLargeError, InvalidInputError; nothing staged).
        Returns the L1 file id."""
        ...

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
        ``committer`` defaults to the configured one.  Returns the new commit.

        NothingToCommitError when nothing is staged, or the staged writes change
        nothing (those are then dropped), unless ``allow_empty``.  ConflictError when
        the branch kept moving (another commit, merge or reset) through every attempt.
        Safe against concurrent commits and compactions of the branch: exactly one swap
        wins, the others retry on the new base."""
        ...

    async def cherry_pick(
        self,
        ref: str,
        *,
        parent_number: int = 1,
        strategy: Any = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Commit:
        """Apply the changes of the commit ``ref`` names onto this branch as one new
        commit (lakeFS's cherry-pick): a three-way merge with base the commit's
        ``parent_number``-th parent (1 or 2, for a merge commit), destination the
        branch's base and source the commit, committed with the single parent the
        branch's base.  Message and metadata are the picked commit's unless given; the
        branch's staged writes stay staged on top.  MergeConflictError (``keys``) when
        the branch changed those keys differently since, unless ``strategy``
        (``"source-wins"`` / ``"dest-wins"``) settles it, nothing written;
        NothingToCommitError when it changes nothing (already picked);
        InvalidInputError for a parent the commit lacks.  Retried as a merge when the
        branch moves; ConflictError after the last attempt.  Returns the new commit."""
        ...

    async def diff_uncommitted(self) -> list[Change]:
        """The staged writes as changes against the branch's base (``added``,
        ``removed``, ``changed``), in key order.  A staged value equal to the base's, or
        a delete of a key the base lacks, is no change.  A snapshot: writes landing
        meanwhile may or may not be in it."""
        ...

    async def import_start(
        self,
        paths: Sequence[ImportPath],
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        committer: str | None = None,
    ) -> str:
        """Start importing the object-store ``paths`` onto this branch as one commit
        (lakeFS's ``importStart``); the import's id.  It runs in the background of the
        process that serves the call (the server, or this process when embedded).
        A ``common_prefix`` path's objects land under its ``destination`` and replace
        what the branch had there; an ``object`` path's object at its ``destination``.
        Entries reference the listed objects (no copy).  InvalidInputError for a source
        outside the storage namespace and its allowed external prefixes;
        ProtectedBranchError for a protected branch (docs/client.md, "Imports")."""
        ...

    async def import_status(self, import_id: str) -> ImportStatus:
        """Where the import stands (lakeFS's ``importStatus``): ``completed`` with its
        commit, ``error`` once failed or canceled (an import whose process stopped
        reads as failed), else running with ``ingested_objects`` so far.
        ImportNotFoundError for an id unknown on this branch."""
        ...

    async def import_cancel(self, import_id: str) -> None:
        """Cancel a running import (lakeFS's ``importCancel``): it commits nothing.
        ConflictError when it already completed, failed, or passed the point where its
        commit is being made; ImportNotFoundError."""
        ...

    async def flush(self) -> None:
        """Wait until every write this process staged on the branch has its outcome
        (acknowledged or failed).  Writes of other processes are not waited for."""
        ...

    async def head(self) -> RefValue:
        """The branch's current ref value: base commit, L2 and L1 file ids (a
        snapshot; it moves with every write, compaction and commit)."""
        ...

    async def reset(self) -> RefValue:
        """Drop the branch's uncommitted changes (lakectl ``branch reset``): every write
        acknowledged before this call is discarded and the branch reads as its last
        commit.  It excludes this process's writes to the branch while it runs (for a
        remote client: the server's).  One compare-and-swap of the ref, retried up to
        ``commit_max_attempts * 10`` times while compaction moves the staging lists
        (ConflictError after that, nothing changed); writes acknowledged by other
        processes while it runs may be dropped too.  The dropped files become garbage
        ("branch reset").  Returns the new ref value."""
        ...

    async def upload(
        self,
        path: str,
        data: Any,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        if_absent: bool = False,
    ) -> ObjectStats:
        """Store ``data`` -- bytes, a file path (``str``/``PathLike``), a binary file
        object or an async iterable of bytes chunks -- as the object at ``path``: the
        contents are streamed to a new data object under the namespace, then the entry
        is staged; returns the object's stats once the entry is durable and ordered
        (``checksum``: MD5 hex of the contents).  ``if_absent``: ObjectExistsError when
        ``path`` holds an object (docs/client.md states how far that check is atomic).
        A failure or cancellation part way leaves no entry and at most an unreferenced
        data object; replaced uncommitted data is recorded for garbage collection."""
        ...

    async def link(
        self,
        path: str,
        physical_address: str,
        *,
        size: int,
        checksum: str,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        mtime: int | None = None,
        if_absent: bool = False,
        verify: bool = False,
    ) -> ObjectStats:
        """Register an object whose data is already at ``physical_address`` (a full URI
        inside the storage namespace or under an allowed external prefix); returns its
        stats once the entry is durable and ordered.  ``verify``: InvalidInputError
        unless the data exists with exactly ``size`` bytes.  ``if_absent``:
        ObjectExistsError when ``path`` holds an object, checked and staged as one step
        within one process (for a remote client: the server), so of two clients of one
        server racing on a path exactly one wins.  ``mtime`` defaults to now."""
        ...

    async def stash(self, name: str) -> Workspace:
        """Move the branch's uncommitted changes into a new workspace ``name`` (only
        file ids move, in one atomic RefStore step); the branch reads as its last commit
        afterwards, and every write acknowledged before the call is in the workspace.
        NothingToCommitError when nothing is staged; WorkspaceExistsError when the name
        is taken; ConflictError when the branch kept moving.  A lost answer is resolved
        by reading the workspace back."""
        ...

    async def pop(self, name: str) -> RefValue:
        """Put workspace ``name`` on top of the branch's uncommitted changes (newer than
        what is staged) and delete it, in one atomic step; the branch's new ref value.
        WorkspaceNotFoundError; EntryTooLargeError when the branch would hold too many
        files (nothing changes)."""
        ...

    async def link_many(self, links: Iterable[LinkItem]) -> None:
        """Register many objects whose data is already on the store, with one
        acknowledgement.  Each link is an :class:`ObjectLink` or, cheaper to build, a
        tuple of its fields in order: ``(path, physical_address, size, checksum)``
        optionally followed by ``content_type``, ``metadata``, ``mtime``
        (:data:`~lsmstore.objects.LinkTuple`).  Every link is checked first: one bad
        link -- a tuple of another length, a field of the wrong type, a path or an
        address breaking the rules -- raises its InvalidInputError (InvalidNameError
        for a bad path) and nothing is staged.  All links become visible at once."""
        ...

    async def delete_object(self, path: str) -> None:
        """Delete the object at ``path`` (a tombstone; its data is left to garbage
        collection).  ObjectNotFoundError when there is none."""
        ...

    async def delete_objects(self, paths: Iterable[str]) -> None:
        """Delete many objects in one batch; absent paths are ignored."""
        ...

    async def copy_object(
        self, src_path: str, dst_path: str, *, src_ref: str | None = None
    ) -> ObjectStats:
        """Make ``dst_path`` an object with the data of ``src_path`` (read on
        ``src_ref``, default this branch): the same physical address, no copy of data,
        a new mtime.  Returns the new object's stats.  ObjectNotFoundError when the
        source is absent."""
        ...


class RepositoryAPI(Protocol):
    """One repository: its settings, handles on its branches and refs, and version
    control (docs/versioning.md).  Obtained from :class:`StoreAPI`; no I/O of its own
    until a method is awaited.  Every method raises RepositoryNotFoundError once the
    repository has been deleted."""

    name: str
    storage_namespace: str
    default_branch: str

    @property
    def created_at(self) -> float:
        """When the repository was created (seconds since the epoch)."""
        ...

    def branch(self, name: str | None = None) -> Any:  # a BranchAPI
        """A :class:`BranchAPI` handle on branch ``name`` (the default branch when None;
        an empty name is InvalidNameError).  No I/O: a missing branch shows on use."""
        ...

    def ref(self, expression: str) -> Any:  # a RefAPI
        """A read-only :class:`RefAPI` view at ``expression`` (InvalidInputError for a
        non-string or empty one now; parsed and resolved on first use)."""
        ...

    async def list_branches(
        self, *, prefix: str = "", after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """Branch names with ``prefix``, strictly after ``after``, in name order, at
        most ``limit``.  Pass the last name as ``after`` for the next page."""
        ...

    async def create_branch(self, name: str, *, source: str | None = None) -> Any:
        """Create branch ``name`` at the commit ``source`` names (any ref expression;
        default: the default branch) and return its :class:`BranchAPI` handle.  The new
        branch starts from the committed state: staged writes of a source branch are
        not copied.  RefExistsError if a branch or tag has the name (atomic: of two
        concurrent creations exactly one succeeds); RefNotFoundError for a source that
        names nothing."""
        ...

    async def delete_branch(self, name: str) -> None:
        """Delete a branch and drop its staged writes (this process's pending writes to
        it are flushed first; its staging files become garbage).  RefNotFoundError when
        absent; InvalidInputError for the default branch; ConflictError when writes
        kept moving it through every attempt of the compare-and-delete."""
        ...

    async def create_tag(self, name: str, target: str) -> str:
        """Tag the commit ``target`` names and return its ID.  Create-if-absent:
        RefExistsError if a branch or tag has the name; tags never move."""
        ...

    async def workspaces(self, *, after: str | None = None, limit: int = 1000) -> list[Workspace]:
        """The repository's workspaces in name order, strictly after ``after``, at most
        ``limit``."""
        ...

    async def get_workspace(self, name: str) -> Workspace:
        """WorkspaceNotFoundError if there is none."""
        ...

    async def drop_workspace(self, name: str) -> None:
        """Delete a workspace; its changes are lost (the staging sweep collects its files
        after the grace period).  WorkspaceNotFoundError."""
        ...

    async def delete_tag(self, name: str) -> None:
        """Delete tag ``name``.  RefNotFoundError if there is no such tag (a branch
        name is not a tag)."""
        ...

    async def list_tags(
        self, *, prefix: str = "", after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """Tag names, paged as :meth:`list_branches`."""
        ...

    def log(
        self,
        ref: str | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
        first_parent: bool = True,
    ) -> AsyncIterator[LogEntry]:
        """Commits from ``ref`` (default: the default branch's head) back, newest
        first, at most ``limit``: the first-parent line, or with ``first_parent=False``
        every ancestor once by decreasing generation.  ``after``: continue past that
        commit ID (the last of the previous page).  Commits are immutable, so a page
        read later continues the same history."""
        ...

    def diff(self, left: str, right: str) -> AsyncIterator[Change]:
        """The changes that turn the commit ``left`` names into the one ``right``
        names, in key order (committed states only; staged writes are not part of
        it)."""
        ...

    async def branch_protection(self) -> BranchProtection:
        """The repository's branch protection rules (glob patterns over branch names)
        and their ``etag``.  A branch matching a pattern refuses staging writes,
        commits, reverts, cherry-picks, resets, stash/pop and deletion with
        ProtectedBranchError (403 on a server); merges into it are accepted (lakeFS's
        branch protection)."""
        ...

    async def set_branch_protection(
        self, patterns: Sequence[str], *, if_match: str | None = None
    ) -> BranchProtection:
        """Replace the rules with ``patterns`` (an empty list removes them all); with
        ``if_match`` only while the current ETag is that one: PreconditionFailedError
        otherwise, nothing changed.  InvalidInputError for a pattern that is empty, too
        long, repeated or holds a control character.  Returns the new rules and ETag;
        they apply to every write appended afterwards, in every process."""
        ...

    async def action_runs(
        self,
        *,
        branch: str | None = None,
        commit: str | None = None,
        after: str | None = None,
        amount: int = 100,
    ) -> list[ActionRun]:
        """The recorded runs of the repository's actions (docs/actions.md), newest
        first, strictly after run ID ``after``, at most ``amount`` (1..1000); with
        ``branch`` / ``commit``: only the runs of that branch / commit ID."""
        ...

    async def action_run(self, run_id: str) -> ActionRun:
        """One run; NotFoundError when there is none (or it passed its retention)."""
        ...

    async def run_hooks(
        self, run_id: str, *, after: str | None = None, amount: int = 100
    ) -> list[HookRun]:
        """The hooks of a run, in hook run ID order, strictly after ``after``."""
        ...

    async def hook_output(self, run_id: str, hook_run_id: str) -> bytes:
        """What one hook of a run sent and received (empty for a skipped hook);
        NotFoundError for an unknown run or hook."""
        ...

    async def merge(
        self,
        source: str,
        *,
        into: str | None = None,
        strategy: Any = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
        squash: bool = False,
    ) -> MergeResult:
        """Three-way merge of the commit ``source`` names into branch ``into`` (default:
        the default branch): a merge commit with parents ``[into's base, source]``, or
        with ``squash`` the single parent ``[into's base]``.  The destination's staged
        writes stay staged on top.  Already merged (``source`` is an ancestor of the
        destination's base): nothing is written and the result has ``merged=False``.

        MergeConflictError (``.keys``) when both sides changed a key differently and
        ``strategy`` (``"source-wins"``/``"dest-wins"``) does not settle it; nothing is
        written then.  InvalidInputError for an unknown strategy or a tag as
        destination.  A destination that moves meanwhile (commits, other merges) makes
        the merge start over on its new base; ConflictError after the last attempt."""
        ...

    async def revert(
        self,
        commit: str,
        *,
        branch: str | None = None,
        parent: int = 1,
        strategy: Any = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> MergeResult:
        """Undo the changes of the commit ``commit`` names on ``branch`` (default: the
        default branch) with a new commit whose single parent is the branch's base;
        ``parent`` picks the side of a merge commit to revert to.  Keys changed again
        since conflict as in :meth:`merge` (MergeConflictError unless ``strategy``);
        a revert that changes nothing raises NothingToCommitError.  Retried as a merge
        when the branch moves; ConflictError after the last attempt."""
        ...


class StoreAPI(Protocol):
    """A connection to a deployment (:func:`lsmstore.connect`): its repositories.
    One per process is the intended use; safe for any number of tasks of one event
    loop.  Use it as ``async with`` or call :meth:`aclose`."""

    config: Config

    async def create_repository(
        self, name: str, *, storage_namespace: str, default_branch: str = "main"
    ) -> Any:  # a RepositoryAPI
        """Record repository ``name`` with its storage namespace URL and create its
        default branch on an initial empty commit; returns the :class:`RepositoryAPI`.
        RefExistsError if the name is taken (atomic across processes);
        InvalidURLError for a namespace URL that cannot be used."""
        ...

    async def get_repository(self, name: str) -> Any:
        """The repository ``name``; RepositoryNotFoundError if there is none."""
        ...

    async def list_repositories(self, *, after: str | None = None, limit: int = 1000) -> Any:
        """Repositories in name order, strictly after ``after``, at most ``limit``."""
        ...

    async def delete_repository(self, name: str) -> None:
        """Forget the repository and its refs (its objects stay until garbage
        collection); this process's pending writes to it are flushed first.
        RepositoryNotFoundError if there is none."""
        ...

    async def aclose(self) -> None:
        """Flush and acknowledge every pending write, stop background work, close every
        connection; then raise the first failure, if any.  Idempotent; any call on the
        store afterwards raises ClosedError."""
        ...

    async def __aenter__(self) -> Self:
        """The store itself (no I/O: connections open on first use)."""
        ...

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Closes the store (:meth:`aclose`); leaving because of an exception notes a
        failure to close on that exception instead of raising it in its place."""
        ...


def store_location(store: StoreAPI) -> str:
    """Which store a message speaks of: ``server URL``, ``the embedded store at
    PATH`` or ``RefStore URL`` (so a user sees where a missing repository was looked
    for)."""
    url = getattr(store, "url", None)
    if isinstance(url, str) and url:
        return f"server {url}"
    cfg = store.config
    if not cfg.refstore:
        return f"the embedded store at {cfg.home}"
    return f"RefStore {cfg.refstore_url}"
