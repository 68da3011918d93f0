"""The RefStore interface: the only mutable state of lsmstore.

One logical table ``refs`` keyed by ``(repository, name)`` plus a table of
repositories.  A branch is ``Ref(kind="branch", base, l2, l1)``; a tag is
``Ref(kind="tag", base=<commit id>)`` with empty ``l1``/``l2``.  ``base == ""``
means "no commit" (only before a repository's initial commit exists).

Every method is atomic on one key.  Conditions (DESIGN.md, "RefStore contract"):

=================  ======================================================  =====================
operation          effect                                                  condition
=================  ======================================================  =====================
append_l1          ``l1 += [id]`` (no-op if ``id`` already in ``l1``)     ref is a branch
swap_compacted     ``l2 = l2_new; l1 = l1[len(l1_prefix):]``               base, l2 equal; l1
                                                                           starts with prefix
swap_committed     ``base = new_base; l2 = []; l1 = l1[len(prefix):]``    same as above
set_base           ``base = new_base`` (l1, l2 kept)                       base == expected_base
create_ref         insert                                                  absent
delete_ref         remove                                                  value == expected
=================  ======================================================  =====================

A failed condition raises :class:`ConflictError` whose ``found`` is the current
:class:`Ref`.  Appends never make swaps fail: swaps look at a *prefix* of ``l1``.

Errors: :class:`RepositoryNotFoundError` / :class:`RefNotFoundError` (both
``KeyError``), :class:`RefExistsError`, :class:`ConflictError`,
:class:`EntryTooLargeError` (value over the backend's item limit),
:class:`InvalidNameError` (checked here, before the backend is called), and
:class:`UnavailableError` when the backend cannot be reached or times out -- with
``outcome_unknown=True`` for a mutation that may have been applied.  ``append_l1``
is idempotent, so callers retry it after an unknown outcome.

Concurrency: any number of processes may call any operation at once; the backend
serialises operations on one key.  Implementations are safe for concurrent tasks of
one event loop.  Names are validated by the public methods of this class, which
then call the ``_``-prefixed backend hooks.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Self

from lsmstore.errors import ClosedError
from lsmstore.refstore.names import check_file_id, check_ref_name, check_repository_name

RefKind = Literal["branch", "tag"]

#: Upper bound on the number of file ids a ref may hold (L1 + L2). Writers stall
#: far below it; it keeps every backend well inside its item-size limit.
MAX_FILE_IDS = 2000


@dataclass(frozen=True, slots=True)
class Ref:
    kind: RefKind
    base: str
    l2: tuple[str, ...] = ()
    l1: tuple[str, ...] = ()

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


class RefStore(abc.ABC):
    """Async RefStore. Use ``async with`` or call ``aclose()``."""

    url: str
    _closed: bool = False

    # --- repositories ----------------------------------------------------------

    async def create_repository(self, repo: Repository) -> None:
        """Insert if absent, else RefExistsError. Does not create any branch."""
        self._check_open()
        check_repository_name(repo.name)
        check_ref_name(repo.default_branch)
        await self._create_repository(repo)

    async def get_repository(self, name: str) -> Repository:
        self._check_open()
        return await self._get_repository(check_repository_name(name))

    async def list_repositories(
        self, *, after: str | None = None, limit: int = 1000
    ) -> list[Repository]:
        """Repositories in name order, strictly after ``after``, at most ``limit``."""
        self._check_open()
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
        for n in names:
            check_ref_name(n)
        return await self._get_refs(check_repository_name(repo), list(names))

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
        return await self._list_refs(repo, prefix, after, limit, kind)

    async def create_ref(self, repo: str, name: str, ref: Ref) -> None:
        self._check_open()
        self._check_ref(repo, name, ref)
        await self._create_ref(repo, name, ref)

    async def delete_ref(self, repo: str, name: str, expected: Ref) -> None:
        self._check_open()
        await self._delete_ref(check_repository_name(repo), check_ref_name(name), expected)

    # --- branch operations -------------------------------------------------------

    async def append_l1(self, repo: str, branch: str, file_id: str) -> Ref:
        """Append ``file_id`` to the branch's L1 (idempotent). Returns the new value."""
        self._check_open()
        check_repository_name(repo)
        check_ref_name(branch)
        check_file_id(file_id)
        return await self._append_l1(repo, branch, file_id)

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
        for f in (*l2_old, *l1_prefix, *l2_new):
            check_file_id(f)
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
        for f in (*l2_old, *l1_prefix):
            check_file_id(f)
        return await self._swap_committed(
            repo, branch, base, tuple(l2_old), tuple(l1_prefix), new_base
        )

    async def set_base(self, repo: str, branch: str, *, expected_base: str, new_base: str) -> Ref:
        self._check_open()
        check_repository_name(repo)
        check_ref_name(branch)
        return await self._set_base(repo, branch, expected_base, new_base)

    # --- leases (advisory: keep workers from duplicating work; safety is CAS) ----

    async def acquire_lease(self, key: str, owner: str, ttl_seconds: float) -> bool:
        """Take or renew the lease ``key`` for ``owner``; False if another owner holds it."""
        self._check_open()
        return await self._acquire_lease(key, owner, ttl_seconds)

    async def release_lease(self, key: str, owner: str) -> None:
        """Drop the lease if ``owner`` holds it; otherwise do nothing."""
        self._check_open()
        await self._release_lease(key, owner)

    # --- life cycle ----------------------------------------------------------------

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"refstore {self.url} is closed")

    @staticmethod
    def _check_ref(repo: str, name: str, ref: Ref) -> None:
        check_repository_name(repo)
        check_ref_name(name, ref.kind)
        for f in (*ref.l2, *ref.l1):
            check_file_id(f)

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
    async def _append_l1(self, repo: str, branch: str, file_id: str) -> Ref: ...
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
    async def _acquire_lease(self, key: str, owner: str, ttl_seconds: float) -> bool: ...
    @abc.abstractmethod
    async def _release_lease(self, key: str, owner: str) -> None: ...
