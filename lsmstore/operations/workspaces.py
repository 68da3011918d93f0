"""Workspaces (docs/client.md, "Workspaces"): stash a branch's staged changes under a
name, pop them onto a branch.

Both hold the branch's exclusive lock (:mod:`lsmstore.operations.exclusion`): this
process's writes to the branch are flushed and held off, so a write acknowledged before
the call is in the workspace (stash) or under it (pop).  The move itself is one RefStore
operation (``stash_workspace`` / ``pop_workspace``, atomic across both records): a crash
leaves either the old state or the new one, never half of it.  Only file ids move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsmstore.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    NothingToCommitError,
    UnavailableError,
)
from lsmstore.operations.branches import attempts
from lsmstore.refstore.base import Ref, Workspace
from lsmstore.refstore.names import check_ref_name

if TYPE_CHECKING:
    from lsmstore.client import Branch


async def stash(branch: Branch, name: str) -> Workspace:
    """Move the branch's uncommitted changes into a new workspace ``name``; the branch
    reads as its last commit afterwards.  Retried (compare-and-swap on the branch) when
    a write, compaction or commit moved it meanwhile.

    NothingToCommitError when nothing is staged; WorkspaceExistsError when the name is
    taken; ConflictError when the branch kept moving.  A lost answer is resolved by
    reading the workspace back."""
    check_ref_name(name, "workspace")
    repo = branch.repository
    refstore, rname, bname = repo.refstore, repo.name, branch.name
    async with repo.store.exclusion.exclusive(rname, bname):
        await branch.flush()
        for _ in range(attempts(repo)):
            ref = await refstore.get_ref(rname, bname)
            if not ref.is_branch:
                raise InvalidInputError(f"{rname}/{bname} is a tag, not a branch")
            if not ref.l1 and not ref.l2:
                raise NothingToCommitError(f"{rname}/{bname}: no uncommitted changes to stash")
            try:
                await refstore.stash_workspace(rname, bname, name, expected=ref)
            except ConflictError:
                continue  # the branch moved (an append, a compaction): read again
            except UnavailableError as e:
                if not e.outcome_unknown:
                    raise
                try:  # did it happen?  then the workspace holds exactly our lists
                    w = await refstore.get_workspace(rname, name)
                except NotFoundError:
                    raise e from None
                if (w.branch, w.l1, w.l2) != (bname, ref.l1, ref.l2):
                    raise
                return w
            repo.store.notify_l1_changed(rname, bname)
            return await refstore.get_workspace(rname, name)
    raise ConflictError(f"{rname}/{bname}: the branch kept moving; stash not done")


async def pop(branch: Branch, name: str) -> Ref:
    """Put workspace ``name`` on top of the branch's uncommitted changes (newer than what
    is staged there) and delete the workspace, in one atomic step; the branch's new
    value.  WorkspaceNotFoundError, EntryTooLargeError when the branch would hold too
    many files (nothing changes)."""
    check_ref_name(name, "workspace")
    repo = branch.repository
    async with repo.store.exclusion.exclusive(repo.name, branch.name):
        await branch.flush()
        ref = await repo.refstore.pop_workspace(repo.name, name, branch.name)
    repo.store.notify_l1_changed(repo.name, branch.name)
    return ref
