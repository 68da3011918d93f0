"""The RefStore interface: the only mutable state of lsmstore.

One logical table ``refs`` keyed by ``(repository, name)`` plus a table of
repositories.  A branch is ``Ref(kind="branch", base, l2, l1)``; a tag is
``Ref(kind="tag", base=<commit id>)`` with empty ``l1``/``l2``.  ``base == ""``
means "no commit" (only before a repository's initial commit exists).

Every method is atomic on one key.  Conditions (docs/design.md, "RefStore contract"):

=================  ======================================================  =====================
operation          effect                                                  condition
=================  ======================================================  =====================
append_l1          ``l1 += [id]`` (no-op if ``id`` is in ``l1`` or was     ref is a branch
                   consumed by one of the last swaps, see below)
swap_compacted     ``l2 = l2_new; l1 = l1[len(l1_prefix):]``               base, l2 equal; l1
                                                                           starts with prefix
swap_committed     ``base = new_base; l2 = []; l1 = l1[len(prefix):]``    same as above
set_base           ``base = new_base`` (l1, l2 kept)                       base == expected_base
append_l1_many     ``l1 += ids`` as one unit (each skipped as by append_l1) ref is a branch
append_l1_group    ``l1 += ids`` as one unit; no-op for a known group id   ref is a branch
stash_workspace    workspace ``name = (l2, l1)``; ``l2 = l1 = []``         value == expected,
                   (two keys, one atomic step)                             workspace absent
pop_workspace      ``l1 += workspace``; workspace deleted (one step)       branch, workspace
create_ref         insert                                                  absent
delete_ref         remove                                                  value == expected
=================  ======================================================  =====================

A failed condition raises :class:`ConflictError` whose ``found`` is the current
:class:`Ref`.  Appends never make swaps fail: swaps look at a *prefix* of ``l1``.

Consumed ids: besides its value, a branch keeps the ids its swaps took out of L1,
newest last -- the last :data:`MAX_CONSUMED_IDS`, and never fewer than the whole
prefix of the latest swap.  ``append_l1`` of such an id changes nothing, so an append
retried after an unknown outcome cannot re-stage a file that a compaction or commit
consumed in between (it would shadow newer writes).  The tail is internal: it is not
part of :class:`Ref`, reads do not fetch it, ``set_base`` keeps it, a new ref starts
with none and ``delete_ref`` drops it.  It never makes an operation fail for size.

Group ids: a branch also remembers the last :data:`MAX_GROUP_IDS` group ids appended
with ``append_l1_group``; a group whose id is among them is not appended again, so a
job that re-sends its commit after an unknown outcome stages its files once, even
after a compaction or commit consumed them.

Workspaces (docs/refstore.md, "Workspaces"): ``stash_workspace`` moves a branch's L2
and L1 ids into a named workspace record of the repository and empties the branch's
staging; ``pop_workspace`` puts them on top of a branch's L1 (the workspace's L2 ids
first, then its L1 ids: all newer than what the branch held) and deletes the record.
Files never move: an id that lands in another branch's list, or in another level, is
*qualified* with where its file lives (:data:`lsmstore.refstore.names.STAGED_ENTRY`).
Both bump the repository's :meth:`move_count`, which garbage collection reads before
and after it collects the referenced files.

Repository ids: a repository carries ``uid``, a random id that a deleted and
re-created repository does not share.  The appends take an optional ``repository_id``:
when given, the append applies only while the repository's ``uid`` equals it (``""``
names a repository recorded without one), atomically with the append; otherwise it
raises RepositoryNotFoundError and changes nothing -- a writer prepared for a
repository that was deleted, or deleted and re-created, is refused, never acknowledged.

Small records (``put_record`` ...): named byte strings in kinds (credentials,
settings), outside any repository, at most :data:`MAX_RECORD_BYTES` each.

Window counters (``count_in_window``, ``read_window_count``): named integers that
count events in a fixed window shared by every process on the RefStore (the failed
authentications of docs/security.md).  ``count_in_window(name, window_s)`` adds one
and returns the new :class:`WindowCount`: a counter that is absent or whose window
has ended (``ends_at <= now``) starts again at 1 with ``ends_at = now + window_s``;
otherwise the value grows and ``ends_at`` stays.  Atomic: N concurrent calls from
any processes add exactly N.  ``read_window_count`` returns the current value
(``WindowCount(0, 0.0)`` for an absent or ended counter) and changes nothing.  Time
is the backend's injectable clock (seconds since the epoch).  Ended counters are
removed by the backend at some later time (Redis: a key expiry; embedded: on later
counts; DynamoDB: an ``expires`` attribute for the table's TTL).  An increment is
not idempotent: after an unknown outcome (UnavailableError) it may have counted.

Members (``announce_member`` / ``list_members`` / ``withdraw_member``): the live
processes of a group (the daemons serving one RefStore) announce themselves with an
address and a lifetime and renew it with each heartbeat; ``list_members`` returns the
members whose lifetime has not run out, by the store's clock (the ``clock`` a backend
is given; the process that announces computes the expiry, so clock skew between
processes adds to it).  A member that stops renewing leaves the list when its lifetime
ends, one that withdraws leaves at once.  Membership is advisory: it chooses which
process batches a branch's writes (docs/server.md, "Branch affinity"), never whether
an operation is correct.  Every backend keeps members as small records of kind
:data:`MEMBER_RECORD_KIND` (one key per member: atomic per member, and an expired
member's record is deleted by the next listing that sees it).

Operations that only make sense on a branch (``append_l1``, the swaps, ``set_base``)
raise :class:`ConflictError` on a tag; tags are immutable once created.

Errors: :class:`RepositoryNotFoundError` / :class:`RefNotFoundError` (both
``KeyError``; any ref operation on a missing repository raises the former),
:class:`RefExistsError`, :class:`ConflictError`, :class:`EntryTooLargeError` (a ref
holding more than :data:`MAX_FILE_IDS` ids, repository metadata over
:data:`MAX_REPOSITORY_METADATA_BYTES`; nothing is changed), :class:`InvalidNameError`
and :class:`InvalidInputError` (checked here, before the backend is called), and
:class:`UnavailableError` when the backend cannot be reached or times out -- with
``outcome_unknown=True`` for a mutation that may have been applied.  ``append_l1``
is idempotent, so callers retry it after an unknown outcome (within the window the
consumed tail covers: until :data:`MAX_CONSUMED_IDS` later files were consumed).
Backends never retry a non-idempotent mutation (swaps, ``set_base``, create/delete)
by themselves: a retry after an applied attempt would report a false conflict.

Concurrency: any number of processes may call any operation at once; the backend
serialises operations on one key.  Implementations are safe for concurrent tasks of
one event loop.  Names are validated by the public methods of this class, which
then call the ``_``-prefixed backend hooks.
"""

from __future__ import annotations

import abc
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from lsmstore import validate
from lsmstore.closing import AsyncCloseable
from lsmstore.errors import (
    ClosedError,
    EntryTooLargeError,
    InvalidInputError,
    InvalidNameError,
    RecordNotFoundError,
)
from lsmstore.refstore.names import (
    check_commit_id,
    check_file_id,
    check_lease_name,
    check_ref_name,
    check_repository_name,
    check_staged_entry,
    qualify_entry,
)

RefKind = Literal["branch", "tag"]

#: Upper bound on the number of file ids a ref may hold (L1 + L2). Writers stall
#: far below it; it keeps every backend well inside its item-size limit.
MAX_FILE_IDS = 2000

#: A branch remembers the ids its swaps consumed from L1: the last this many (but
#: always the whole prefix of its latest swap, which may be longer), so that an
#: ``append_l1`` retried after an unknown outcome is a no-op even when a compaction
#: or commit consumed the file in between.  An id leaves the tail only after this
#: many files appended *after* it were consumed too.  A writer retries for seconds
#: (``append_attempts`` tries, each bounded by the backend timeout, 5 s by default);
#: 1024 files is more than 10 s of one writer process flushing every 10 ms, and
#: compaction jobs consume 128 files at most.  At ~30 bytes an id it adds about 30 KB
#: to a ref (DynamoDB bills a write by item size: see docs/refstore.md).
MAX_CONSUMED_IDS = 1024

#: A branch remembers this many group ids of ``append_l1_group`` (newest last).  A
#: group is one job's commit (a Spark write, an import): hundreds of jobs later, a
#: re-sent commit of the first is long out of its retry window.
MAX_GROUP_IDS = 128

#: Upper bound on the bytes of the *qualified* entries (files living elsewhere, from a
#: popped workspace) of one ref or workspace.  With 2,000 plain ids, the consumed tail
#: and the group ids, a ref stays under DynamoDB's 400 KB item limit.
MAX_QUALIFIED_BYTES = 96 * 1024

#: Upper bound on a small record's value.
MAX_RECORD_BYTES = 64 * 1024
RECORD_KIND = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")

#: The record kind that holds members (see "Members" in the module docstring).
MEMBER_RECORD_KIND = "members"
#: Upper bound on a member's address (UTF-8 bytes) and on a group's size.
MAX_MEMBER_ADDRESS_BYTES = 1024
MAX_MEMBERS = 1000
#: Longest lifetime a member may announce, in seconds.
MAX_MEMBER_TTL = 3600.0


@dataclass(frozen=True, slots=True)
class Member:
    """A live process of a group: ``name`` (unique, never reused by another process),
    where to reach it, and until when (seconds since the epoch) it counts as live."""

    name: str
    address: str
    expires_at: float


#: Upper bound on a repository record's metadata, encoded as JSON (UTF-8 bytes).
MAX_REPOSITORY_METADATA_BYTES = 64 * 1024
MAX_STORAGE_NAMESPACE_BYTES = 1024
#: Upper bound on one page of a listing.
MAX_PAGE = 10_000


@dataclass(frozen=True, slots=True)
class Ref:
    kind: RefKind
    base: str
    l2: tuple[str, ...] = ()
    l1: tuple[str, ...] = ()

    def __post_init__(self) -> None:  # accept lists; store tuples so values compare equal
        if not isinstance(self.l2, tuple):
            object.__setattr__(self, "l2", tuple(self.l2))
        if not isinstance(self.l1, tuple):
            object.__setattr__(self, "l1", tuple(self.l1))

    @property
    def is_branch(self) -> bool:
        return self.kind == "branch"


@dataclass(frozen=True, slots=True)
class Repository:
    name: str
    storage_namespace: str
    default_branch: str
    created_at: float = 0.0  # seconds since the epoch
    metadata: dict[str, str] = field(default_factory=dict)
    #: The repository's unique id: random, never reused (a repository deleted and
    #: created again under the same name gets another).  ``""`` for a repository
    #: recorded before ids existed (see :func:`lsmstore.namespace.owner_id`).
    uid: str = ""
    #: Where the storage namespace resolves for every process sharing this RefStore
    #: (``file:///abs/path`` for a ``local://`` namespace); ``""``: the namespace itself.
    location: str = ""


@dataclass(frozen=True, slots=True)
class WindowCount:
    """A window counter: its value, and when its window ends (seconds since the epoch)."""

    value: int
    ends_at: float


#: Longest window of a window counter (a day).
MAX_COUNTER_WINDOW_S = 86_400.0


@dataclass(frozen=True, slots=True)
class Workspace:
    """A branch's staged changes saved under ``name`` (see "Workspaces" above).

    ``l2``/``l1`` are the branch's lists when it was stashed, as that branch names them
    (plain ids live under ``branch``); ``base`` was its base commit then.
    """

    name: str
    branch: str
    base: str
    l2: tuple[str, ...] = ()
    l1: tuple[str, ...] = ()
    created_at: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.l2, tuple):
            object.__setattr__(self, "l2", tuple(self.l2))
        if not isinstance(self.l1, tuple):
            object.__setattr__(self, "l1", tuple(self.l1))

    @property
    def entries(self) -> tuple[str, ...]:
        """Every file, oldest first, qualified: the order a pop appends them in."""
        return (
            *(qualify_entry(self.branch, "L2", f) for f in self.l2),
            *(qualify_entry(self.branch, "L1", f) for f in self.l1),
        )


class RefStore(AsyncCloseable, abc.ABC):
    """Async RefStore. Use ``async with`` or call ``aclose()``."""

    url: str
    _closed: bool = False

    # --- repositories ----------------------------------------------------------

    async def create_repository(self, repo: Repository) -> None:
        """Insert if absent, else RefExistsError. Does not create any branch."""
        self._check_open()
        _check_repository(repo)
        await self._create_repository(repo)

    async def get_repository(self, name: str) -> Repository:
        self._check_open()
        return await self._get_repository(check_repository_name(name))

    async def list_repositories(
        self, *, after: str | None = None, limit: int = 1000
    ) -> list[Repository]:
        """Repositories in name order, strictly after ``after``, at most ``limit``."""
        self._check_open()
        _check_page(after, limit)
        return await self._list_repositories(after, limit)

    async def delete_repository(self, name: str) -> None:
        """Remove the repository and all its refs. RepositoryNotFoundError if absent."""
        self._check_open()
        await self._delete_repository(check_repository_name(name))

    # --- refs ------------------------------------------------------------------

    async def get_ref(self, repo: str, name: str) -> Ref:
        self._check_open()
        return await self._get_ref(check_repository_name(repo), check_ref_name(name))

    async def get_refs(self, repo: str, names: Sequence[str]) -> dict[str, Ref]:
        """Several refs in one round trip; absent names are left out of the result."""
        self._check_open()
        check_repository_name(repo)
        if isinstance(names, str):
            raise InvalidInputError("get_refs takes a sequence of names, not one string")
        for n in names:
            check_ref_name(n)
        return await self._get_refs(repo, list(dict.fromkeys(names)))

    async def list_refs(
        self,
        repo: str,
        *,
        prefix: str = "",
        after: str | None = None,
        limit: int = 1000,
        kind: RefKind | None = None,
    ) -> list[tuple[str, Ref]]:
        """Refs in name order with ``prefix``, strictly after ``after``, at most ``limit``.

        ``kind`` filters branches or tags (filtering happens after paging by name, so a
        page may hold fewer than ``limit`` entries while more remain).
        """
        self._check_open()
        check_repository_name(repo)
        _check_page(after, limit)
        validate.check_str(prefix, "list_refs prefix", empty_ok=True, max_bytes=MAX_PAGE_TOKEN)
        if kind not in (None, "branch", "tag"):
            raise InvalidInputError(f"list_refs kind must be 'branch', 'tag' or None, not {kind!r}")
        return await self._list_refs(repo, prefix, after, limit, kind)

    async def create_ref(self, repo: str, name: str, ref: Ref) -> None:
        self._check_open()
        self._check_ref(repo, name, ref)
        await self._create_ref(repo, name, ref)

    async def delete_ref(self, repo: str, name: str, expected: Ref) -> None:
        self._check_open()
        self._check_ref(repo, name, expected)
        await self._delete_ref(repo, name, expected)

    # --- branch operations -------------------------------------------------------

    async def append_l1(
        self, repo: str, branch: str, file_id: str, *, repository_id: str | None = None
    ) -> Ref:
        """Append ``file_id`` to the branch's L1 (idempotent). Returns the new value.
        ``repository_id``: see "Repository ids" in the module docstring."""
        self._check_open()
        check_repository_name(repo)
        check_ref_name(branch)
        check_file_id(file_id)
        return await self._append_l1(repo, branch, file_id, _check_uid(repository_id))

    async def swap_compacted(
        self,
        repo: str,
        branch: str,
        *,
        base: str,
        l2_old: Sequence[str],
        l1_prefix: Sequence[str],
        l2_new: Sequence[str],
    ) -> Ref:
        self._check_open()
        check_repository_name(repo)
        check_ref_name(branch)
        check_commit_id(base)
        for f in (*l2_old, *l2_new):
            check_file_id(f)
        for f in l1_prefix:
            check_staged_entry(f)
        if len(l2_new) > MAX_FILE_IDS:
            raise EntryTooLargeError(
                f"{repo}/{branch}: {len(l2_new)} L2 ids exceed the limit of {MAX_FILE_IDS}"
            )
        return await self._swap_compacted(
            repo, branch, base, tuple(l2_old), tuple(l1_prefix), tuple(l2_new)
        )

    async def swap_committed(
        self,
        repo: str,
        branch: str,
        *,
        base: str,
        l2_old: Sequence[str],
        l1_prefix: Sequence[str],
        new_base: str,
    ) -> Ref:
        self._check_open()
        check_repository_name(repo)
        check_ref_name(branch)
        check_commit_id(base)
        check_commit_id(new_base, "new base commit")
        for f in l2_old:
            check_file_id(f)
        for f in l1_prefix:
            check_staged_entry(f)
        return await self._swap_committed(
            repo, branch, base, tuple(l2_old), tuple(l1_prefix), new_base
        )

    async def set_base(self, repo: str, branch: str, *, expected_base: str, new_base: str) -> Ref:
        self._check_open()
        check_repository_name(repo)
        check_ref_name(branch)
        check_commit_id(expected_base, "expected base commit")
        check_commit_id(new_base, "new base commit")
        return await self._set_base(repo, branch, expected_base, new_base)

    async def append_l1_many(
        self,
        repo: str,
        branch: str,
        file_ids: Sequence[str],
        *,
        repository_id: str | None = None,
    ) -> Ref:
        """Append ``file_ids`` to the branch's L1, in order, as one unit: all or none.

        Each id is skipped as by ``append_l1`` (already in L1, or consumed), so the
        call is idempotent: retry it after an unknown outcome.  No group id is
        remembered (a writer appending several ready batches at once uses it; a job's
        commit uses ``append_l1_group``).  More ids than the ref can hold raise
        EntryTooLargeError and change nothing.
        """
        self._check_open()
        check_repository_name(repo)
        check_ref_name(branch)
        ids = self._check_id_list(repo, branch, "append_l1_many", file_ids)
        return await self._append_l1_many(repo, branch, ids, _check_uid(repository_id))

    @staticmethod
    def _check_id_list(repo: str, branch: str, op: str, file_ids: Sequence[str]) -> tuple[str, ...]:
        if isinstance(file_ids, str):
            raise InvalidInputError(f"{op} takes a sequence of file ids")
        ids = tuple(file_ids)
        for f in ids:
            check_file_id(f)
        if len(set(ids)) != len(ids):
            raise InvalidInputError(f"{repo}/{branch}: {op} repeats a file id")
        if len(ids) > MAX_FILE_IDS:
            raise EntryTooLargeError(
                f"{repo}/{branch}: {len(ids)} ids exceed the limit of {MAX_FILE_IDS}"
            )
        return ids

    async def append_l1_group(
        self,
        repo: str,
        branch: str,
        group_id: str,
        file_ids: Sequence[str],
        *,
        repository_id: str | None = None,
    ) -> Ref:
        """Append ``file_ids`` to the branch's L1, in order, as one unit: all or none.

        Ids already in L1 or consumed are skipped (as by ``append_l1``).  A group whose
        ``group_id`` the branch has seen (the last :data:`MAX_GROUP_IDS` groups) is not
        appended again: the call returns the current value.  A group that would take
        the ref over :data:`MAX_FILE_IDS` ids raises EntryTooLargeError and changes
        nothing.  Idempotent: retry it after an unknown outcome.
        """
        self._check_open()
        check_repository_name(repo)
        check_ref_name(branch)
        check_file_id(group_id)
        ids = self._check_id_list(repo, branch, f"group {group_id}", file_ids)
        return await self._append_l1_group(repo, branch, group_id, ids, _check_uid(repository_id))

    # --- workspaces --------------------------------------------------------------

    async def stash_workspace(self, repo: str, branch: str, name: str, *, expected: Ref) -> Ref:
        """Move the branch's L2 and L1 into a new workspace ``name``; empty its staging.

        One atomic step on two keys: the branch must hold exactly ``expected``
        (ConflictError with the value found otherwise -- re-read and try again) and no
        workspace ``name`` may exist (WorkspaceExistsError).  The moved L1 ids join the
        branch's consumed tail, so a retried append cannot stage them again.  Returns
        the branch's new value (its base, no staging).  Not retried by backends.
        """
        self._check_open()
        self._check_ref(repo, branch, expected)
        check_ref_name(name, "workspace")
        if not expected.is_branch:
            raise InvalidInputError(f"{repo}/{branch}: only a branch can be stashed")
        return await self._stash_workspace(repo, branch, name, expected, self._now())

    async def pop_workspace(self, repo: str, name: str, branch: str) -> Ref:
        """Put the workspace's files on top of the branch's L1 and delete the workspace.

        Atomic on both keys; the files become newer than everything the branch holds
        (the workspace's L2 files first, then its L1 files, in order).  Files already
        staged on the branch are not added twice.  WorkspaceNotFoundError,
        RefNotFoundError, ConflictError on a tag, EntryTooLargeError (nothing
        changed) if the branch would hold too many ids.  Returns the branch's value.
        """
        self._check_open()
        check_repository_name(repo)
        check_ref_name(name, "workspace")
        check_ref_name(branch)
        return await self._pop_workspace(repo, name, branch)

    async def get_workspace(self, repo: str, name: str) -> Workspace:
        self._check_open()
        check_repository_name(repo)
        return await self._get_workspace(repo, check_ref_name(name, "workspace"))

    async def list_workspaces(
        self, repo: str, *, after: str | None = None, limit: int = 1000
    ) -> list[Workspace]:
        """Workspaces in name order, strictly after ``after``, at most ``limit``."""
        self._check_open()
        check_repository_name(repo)
        _check_page(after, limit)
        return await self._list_workspaces(repo, after, limit)

    async def drop_workspace(self, repo: str, name: str) -> None:
        """Delete the workspace; its files become garbage.  WorkspaceNotFoundError."""
        self._check_open()
        check_repository_name(repo)
        await self._drop_workspace(repo, check_ref_name(name, "workspace"))

    async def move_count(self, repo: str) -> int:
        """How many stash and pop operations the repository has seen (never decreases,
        also across a delete and re-create).  A file changes the ref or workspace that
        holds it only in those: a reader that sees the same count before and after
        listing refs and workspaces has seen every live file in one of them."""
        self._check_open()
        return await self._move_count(check_repository_name(repo))

    # --- small records -------------------------------------------------------------

    async def put_record(
        self, kind: str, name: str, value: bytes, *, if_absent: bool = False
    ) -> None:
        """Store ``value`` under ``(kind, name)``, replacing it unless ``if_absent``
        (then RecordExistsError if present)."""
        self._check_open()
        _check_record_key(kind, name)
        if not isinstance(value, bytes):
            raise InvalidInputError(f"record {kind}/{name}: value must be bytes")
        if len(value) > MAX_RECORD_BYTES:
            raise EntryTooLargeError(
                f"record {kind}/{name}: {len(value)} bytes exceed {MAX_RECORD_BYTES}"
            )
        await self._put_record(kind, name, value, bool(if_absent))

    async def get_record(self, kind: str, name: str) -> bytes:
        """The value; RecordNotFoundError if absent."""
        self._check_open()
        _check_record_key(kind, name)
        return await self._get_record(kind, name)

    async def list_records(
        self, kind: str, *, after: str | None = None, limit: int = 1000
    ) -> list[tuple[str, bytes]]:
        """``(name, value)`` pairs of ``kind`` in name order, strictly after ``after``."""
        self._check_open()
        _check_record_key(kind, None)
        _check_page(after, limit)
        return await self._list_records(kind, after, limit)

    async def delete_record(self, kind: str, name: str) -> None:
        """Delete the record; RecordNotFoundError if absent."""
        self._check_open()
        _check_record_key(kind, name)
        await self._delete_record(kind, name)

    # --- window counters -------------------------------------------------------------

    async def count_in_window(self, name: str, window_s: float) -> WindowCount:
        """Add one to the counter ``name`` (see "Window counters" above); its new value."""
        self._check_open()
        check_lease_name(name, "counter name")
        if (
            isinstance(window_s, bool)
            or not isinstance(window_s, int | float)
            or not math.isfinite(window_s)
            or not 0 < window_s <= MAX_COUNTER_WINDOW_S
        ):
            raise InvalidInputError(
                f"counter window {window_s!r} must be in (0, {MAX_COUNTER_WINDOW_S:g}] seconds"
            )
        return await self._count_in_window(name, float(window_s), self._now())

    async def read_window_count(self, name: str) -> WindowCount:
        """The counter's value in its current window (0 when absent or ended)."""
        self._check_open()
        check_lease_name(name, "counter name")
        return await self._read_window_count(name, self._now())

    # --- members (advisory: who batches a branch's writes; safety is CAS) ----------

    async def announce_member(self, name: str, address: str, ttl_seconds: float) -> Member:
        """Record (or renew) member ``name`` at ``address``, live for ``ttl_seconds`` from
        now.  Idempotent: retry it after an unknown outcome.  Returns what was stored."""
        self._check_open()
        check_lease_name(name, "member name")
        validate.check_str(address, "member address", max_bytes=MAX_MEMBER_ADDRESS_BYTES)
        if any(ord(c) < 0x21 or ord(c) == 0x7F for c in address):
            raise InvalidInputError(f"member address {address!r}: no spaces or control characters")
        if (
            not isinstance(ttl_seconds, int | float)
            or not math.isfinite(ttl_seconds)
            or not 0 < ttl_seconds <= MAX_MEMBER_TTL
        ):
            raise InvalidInputError(
                f"member ttl {ttl_seconds!r} must be in (0, {MAX_MEMBER_TTL:g}] seconds"
            )
        member = Member(name, address, self._now() + float(ttl_seconds))
        value = json.dumps({"address": address, "expires_at": member.expires_at}).encode()
        await self._put_record(MEMBER_RECORD_KIND, name, value, False)
        return member

    async def list_members(self) -> list[Member]:
        """The live members in name order (at most :data:`MAX_MEMBERS`).  Members whose
        lifetime ended are left out, and their records deleted (best effort: a member
        renewing at the same moment re-announces itself with its next heartbeat)."""
        self._check_open()
        now = self._now()
        live: list[Member] = []
        for name, value in await self._list_records(MEMBER_RECORD_KIND, None, MAX_MEMBERS):
            member = _decode_member(name, value)
            if member is not None and member.expires_at > now:
                live.append(member)
                continue
            try:
                await self._delete_record(MEMBER_RECORD_KIND, name)
            except RecordNotFoundError:
                pass  # another process pruned it first
        return live

    async def withdraw_member(self, name: str) -> None:
        """Remove member ``name`` at once (a process shutting down); no-op if absent."""
        self._check_open()
        check_lease_name(name, "member name")
        try:
            await self._delete_record(MEMBER_RECORD_KIND, name)
        except RecordNotFoundError:
            pass

    # --- leases (advisory: keep workers from duplicating work; safety is CAS) ----

    async def acquire_lease(self, key: str, owner: str, ttl_seconds: float) -> bool:
        """Take or renew the lease ``key`` for ``owner``; False if another owner holds it."""
        self._check_open()
        check_lease_name(key)
        check_lease_name(owner, "lease owner")
        if (
            not isinstance(ttl_seconds, int | float)
            or not math.isfinite(ttl_seconds)
            or not 0 < ttl_seconds <= 86_400
        ):
            raise InvalidInputError(f"lease ttl {ttl_seconds!r} must be in (0, 86400] seconds")
        return await self._acquire_lease(key, owner, float(ttl_seconds))

    async def release_lease(self, key: str, owner: str) -> None:
        """Drop the lease if ``owner`` holds it; otherwise do nothing."""
        self._check_open()
        check_lease_name(key)
        check_lease_name(owner, "lease owner")
        await self._release_lease(key, owner)

    # --- life cycle ----------------------------------------------------------------

    async def aclose(self) -> None:
        self._closed = True

    def _now(self) -> float:
        """Seconds since the epoch (a backend's injectable ``_clock`` if it has one)."""
        clock: Callable[[], float] = getattr(self, "_clock", time.time)
        return float(clock())

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"refstore {self.url} is closed")

    @staticmethod
    def _check_ref(repo: str, name: str, ref: Ref) -> None:
        check_repository_name(repo)
        if not isinstance(ref, Ref) or ref.kind not in ("branch", "tag"):
            raise InvalidInputError(f"{repo}/{name}: not a branch or tag value: {ref!r}")
        check_ref_name(name, ref.kind)
        check_commit_id(ref.base)
        for f in ref.l2:
            check_file_id(f)
        for f in ref.l1:
            check_staged_entry(f)
        if ref.kind == "tag" and (ref.l1 or ref.l2):
            raise InvalidInputError(f"tag {repo}/{name} cannot hold staging files")
        if len(ref.l1) + len(ref.l2) > MAX_FILE_IDS:
            raise EntryTooLargeError(
                f"{repo}/{name}: {len(ref.l1) + len(ref.l2)} file ids exceed the limit "
                f"of {MAX_FILE_IDS}"
            )

    # --- backend hooks ---------------------------------------------------------------

    @abc.abstractmethod
    async def _create_repository(self, repo: Repository) -> None: ...
    @abc.abstractmethod
    async def _get_repository(self, name: str) -> Repository: ...
    @abc.abstractmethod
    async def _list_repositories(self, after: str | None, limit: int) -> list[Repository]: ...
    @abc.abstractmethod
    async def _delete_repository(self, name: str) -> None: ...
    @abc.abstractmethod
    async def _get_ref(self, repo: str, name: str) -> Ref: ...
    @abc.abstractmethod
    async def _get_refs(self, repo: str, names: list[str]) -> dict[str, Ref]: ...
    @abc.abstractmethod
    async def _list_refs(
        self, repo: str, prefix: str, after: str | None, limit: int, kind: RefKind | None
    ) -> list[tuple[str, Ref]]: ...
    @abc.abstractmethod
    async def _create_ref(self, repo: str, name: str, ref: Ref) -> None: ...
    @abc.abstractmethod
    async def _delete_ref(self, repo: str, name: str, expected: Ref) -> None: ...
    @abc.abstractmethod
    async def _append_l1(
        self, repo: str, branch: str, file_id: str, repository_id: str | None
    ) -> Ref: ...
    @abc.abstractmethod
    async def _swap_compacted(
        self,
        repo: str,
        branch: str,
        base: str,
        l2_old: tuple[str, ...],
        l1_prefix: tuple[str, ...],
        l2_new: tuple[str, ...],
    ) -> Ref: ...
    @abc.abstractmethod
    async def _swap_committed(
        self,
        repo: str,
        branch: str,
        base: str,
        l2_old: tuple[str, ...],
        l1_prefix: tuple[str, ...],
        new_base: str,
    ) -> Ref: ...
    @abc.abstractmethod
    async def _set_base(self, repo: str, branch: str, expected_base: str, new_base: str) -> Ref: ...
    @abc.abstractmethod
    async def _append_l1_many(
        self, repo: str, branch: str, file_ids: tuple[str, ...], repository_id: str | None
    ) -> Ref: ...

    @abc.abstractmethod
    async def _append_l1_group(
        self,
        repo: str,
        branch: str,
        group_id: str,
        file_ids: tuple[str, ...],
        repository_id: str | None,
    ) -> Ref: ...
    @abc.abstractmethod
    async def _stash_workspace(
        self, repo: str, branch: str, name: str, expected: Ref, created_at: float
    ) -> Ref: ...
    @abc.abstractmethod
    async def _pop_workspace(self, repo: str, name: str, branch: str) -> Ref: ...
    @abc.abstractmethod
    async def _get_workspace(self, repo: str, name: str) -> Workspace: ...
    @abc.abstractmethod
    async def _list_workspaces(
        self, repo: str, after: str | None, limit: int
    ) -> list[Workspace]: ...
    @abc.abstractmethod
    async def _drop_workspace(self, repo: str, name: str) -> None: ...
    @abc.abstractmethod
    async def _move_count(self, repo: str) -> int: ...
    @abc.abstractmethod
    async def _put_record(self, kind: str, name: str, value: bytes, if_absent: bool) -> None: ...
    @abc.abstractmethod
    async def _get_record(self, kind: str, name: str) -> bytes: ...
    @abc.abstractmethod
    async def _list_records(
        self, kind: str, after: str | None, limit: int
    ) -> list[tuple[str, bytes]]: ...
    @abc.abstractmethod
    async def _delete_record(self, kind: str, name: str) -> None: ...
    @abc.abstractmethod
    async def _count_in_window(self, name: str, window_s: float, now: float) -> WindowCount: ...
    @abc.abstractmethod
    async def _read_window_count(self, name: str, now: float) -> WindowCount: ...
    @abc.abstractmethod
    async def _acquire_lease(self, key: str, owner: str, ttl_seconds: float) -> bool: ...
    @abc.abstractmethod
    async def _release_lease(self, key: str, owner: str) -> None: ...


#: Longest listing prefix or page token (``after``), in UTF-8 bytes.
MAX_PAGE_TOKEN = 1024


def _check_page(after: str | None, limit: int) -> None:
    validate.check_optional_str(after, "listing 'after'", empty_ok=True, max_bytes=MAX_PAGE_TOKEN)
    validate.check_int(limit, "listing limit", min_value=0, max_value=MAX_PAGE)


#: A repository id: what :func:`lsmstore.namespace.new_uid` makes (or ``""``).
REPOSITORY_ID = re.compile(r"^[0-9a-z]{0,64}$")


def _check_uid(uid: str | None, what: str = "repository id") -> str | None:
    if uid is not None and (not isinstance(uid, str) or not REPOSITORY_ID.fullmatch(uid)):
        raise InvalidInputError(f"invalid {what} {uid!r}: up to 64 of [0-9a-z]")
    return uid


def replaced_message(repo: str) -> str:
    """The error of an append refused for its ``repository_id``."""
    return (
        f"repository {repo} was deleted or re-created since this writer was prepared "
        "for it: nothing was appended"
    )


def _decode_member(name: str, value: bytes) -> Member | None:
    """A member record's value, or None if it is not one (then it is pruned)."""
    try:
        fields = json.loads(value)
        address, expires_at = fields["address"], fields["expires_at"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(address, str) or not isinstance(expires_at, int | float):
        return None
    return Member(name, address, float(expires_at))


def _check_record_key(kind: str, name: str | None) -> None:
    if not isinstance(kind, str) or not RECORD_KIND.fullmatch(kind):
        raise InvalidNameError(f"invalid record kind {kind!r}: must match {RECORD_KIND.pattern}")
    if name is not None:
        check_lease_name(name, "record name")


def encode_metadata(metadata: dict[str, str]) -> str:
    """A repository's metadata as canonical JSON (how every backend stores it)."""
    return json.dumps(metadata, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _check_repository(repo: Repository) -> None:
    if not isinstance(repo, Repository):
        raise InvalidInputError(f"not a Repository: {repo!r}")
    check_repository_name(repo.name)
    check_ref_name(repo.default_branch)
    ns = repo.storage_namespace
    if (
        not isinstance(ns, str)
        or not ns
        or len(ns.encode("utf-8", "replace")) > MAX_STORAGE_NAMESPACE_BYTES
        or any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) < 0xE000 for c in ns)
    ):
        raise InvalidInputError(
            f"repository {repo.name}: storage namespace {ns!r} must be a non-empty string of "
            f"at most {MAX_STORAGE_NAMESPACE_BYTES} bytes without control characters"
        )
    _check_uid(repo.uid)
    loc = repo.location
    if (
        not isinstance(loc, str)
        or len(loc.encode("utf-8", "replace")) > (MAX_STORAGE_NAMESPACE_BYTES)
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in loc)
    ):
        raise InvalidInputError(f"repository {repo.name}: location {loc!r}")
    if not isinstance(repo.created_at, int | float) or not math.isfinite(repo.created_at):
        raise InvalidInputError(f"repository {repo.name}: created_at {repo.created_at!r}")
    md = repo.metadata
    if not isinstance(md, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in md.items()
    ):
        raise InvalidInputError(f"repository {repo.name}: metadata must map str to str")
    try:
        size = len(encode_metadata(md).encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidInputError(f"repository {repo.name}: metadata is not valid Unicode") from e
    if size > MAX_REPOSITORY_METADATA_BYTES:
        raise EntryTooLargeError(
            f"repository {repo.name}: metadata of {size} bytes exceeds "
            f"{MAX_REPOSITORY_METADATA_BYTES}"
        )
