"""Branch life cycle: create, delete, reset (drop the staged changes).

Deletion and reset hold the branch's exclusive lock
(:mod:`lsmstore.operations.exclusion`): this process's writes to the branch are flushed
and held off, so every write acknowledged before the call is dropped with the staged
files.  The ref changes in one RefStore compare-and-swap, retried (at most
``commit_max_attempts * 10`` times) while compaction or another process's appends move
the staging lists; a branch that keeps moving fails with ConflictError and nothing
changed.  Reset swaps the branch onto its own base with the whole L1/L2 as the consumed
prefix (``swap_committed``, the committer's swap): writes appended by other processes
meanwhile may be dropped too.

The dropped staging files are recorded as garbage (:func:`record_dropped`), swept after
the grace period so that readers holding the old ref keep working.  A crash between the
swap and the garbage record leaves orphans that the staging sweep finds.

Branch protection (:mod:`lsmstore.operations.protection`) is checked at the entry of
deletion and of both resets, once for every front end: a protected branch refuses them
with ProtectedBranchError and nothing changes.

Actions (:mod:`lsmstore.actions.runner`): creation runs ``pre-create-branch`` (action
files read from the source commit) and ``post-create-branch``; deletion runs
``pre-delete-branch`` (files read from the branch's commit) after the protection
check and ``post-delete-branch``.  A failing pre-hook raises HookFailedError and
nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsmstore import refexpr
from lsmstore.actions import runner as _actions
from lsmstore.errors import ConflictError, InvalidInputError, RefExistsError, RefNotFoundError
from lsmstore.operations import protection as _protection
from lsmstore.refstore.base import Ref
from lsmstore.refstore.names import check_ref_name
from lsmstore.versioning import refs as _refs

if TYPE_CHECKING:
    from lsmstore.client import Branch, Repository

#: What the staged files a reset drops are recorded as (the garbage record's reason).
RESET_REASON = "branch reset"
DELETE_REASON = "branch deleted"


def attempts(repo: Repository) -> int:
    """How often a branch operation's compare-and-swap is tried before ConflictError."""
    return repo.store.config.commit_max_attempts * 10


async def record_dropped(repo: Repository, branch: str, ref: Ref, reason: str) -> None:
    """Record the staging files of ``ref`` (which just left ``branch``) as garbage due
    after the grace period.  Best effort: when the record cannot be written the files are
    orphans the staging sweep finds, so the operation that dropped them still succeeds."""
    from lsmstore.gc.staging import StagedFile, record_garbage

    files: list[StagedFile] = [("L1", f) for f in ref.l1]
    files += [("L2", f) for f in ref.l2]
    if not files:
        return
    store = repo.store
    try:
        await record_garbage(
            repo.objects, repo.name, branch, files, grace_s=store.config.compaction_grace_s,
            reason=reason, clock=store.clock,
        )  # fmt: skip
    except Exception:  # the sweep finds them as orphans
        pass


async def require_absent(repo: Repository, name: str) -> None:
    """RefExistsError when a branch or tag is named ``name`` (checked before a
    creation's pre-hooks run, as lakeFS; the creation checks again)."""
    try:
        await repo.refstore.get_ref(repo.name, name)
    except RefNotFoundError:
        return
    raise RefExistsError(f"{repo.name}: a branch or tag named {name!r} exists")


async def create(repo: Repository, name: str, source: str) -> str:
    """Create branch ``name`` at the commit ``source`` names; the commit ID.
    RefExistsError if a branch or tag has the name."""
    if not _actions.enabled(repo):
        return (await _refs.create_branch(repo.context(), name, source)).commit_id
    check_ref_name(name)
    commit_id = (await refexpr.resolve(repo.context(), source)).commit_id
    await require_absent(repo, name)
    event = _actions.Event("pre-create-branch", source, branch_id=name, commit_id=commit_id)
    await _actions.pre(repo, event)
    # created at the commit the hooks saw
    created = (await _refs.create_branch(repo.context(), name, commit_id or source)).commit_id
    await _actions.post(repo, event.post(commit_id=created))
    return created


async def delete(repo: Repository, name: str) -> Ref:
    """Delete branch ``name`` and drop its staged writes; the value it had.
    RefNotFoundError; InvalidInputError for the default branch or a tag."""
    check_ref_name(name)
    await _protection.guard(repo, name, "delete")
    event = None
    if _actions.enabled(repo):
        found = await repo.refstore.get_ref(repo.name, name)
        if found.is_branch and name != repo.default_branch:
            event = _actions.Event(
                "pre-delete-branch", found.base, branch_id=name, commit_id=found.base
            )
            await _actions.pre(repo, event)
    store = repo.store
    async with store.exclusion.exclusive(repo.name, name):
        await repo.branch(name).flush()
        ref = await _refs.delete_branch(repo.context(), name)
    await record_dropped(repo, name, ref, DELETE_REASON)
    if event is not None:
        await _actions.post(repo, event.post())
    return ref


async def reset(branch: Branch) -> Ref:
    """Drop the branch's uncommitted changes; the branch's new value (module docstring).
    RefNotFoundError; InvalidInputError for a tag; ConflictError when it kept moving."""
    repo = branch.repository
    store = repo.store
    refstore, name = repo.refstore, branch.name
    await _protection.guard(repo, name, "reset")
    async with store.exclusion.exclusive(repo.name, name):
        await branch.flush()
        ref = await refstore.get_ref(repo.name, name)
        if not ref.is_branch:
            raise InvalidInputError(f"{repo.name}/{name} is a tag, not a branch")
        for _ in range(attempts(repo)):
            if not ref.l1 and not ref.l2:
                return ref
            try:
                new = await refstore.swap_committed(
                    repo.name, name, base=ref.base, l2_old=ref.l2, l1_prefix=ref.l1,
                    new_base=ref.base,
                )  # fmt: skip
            except ConflictError:
                ref = await refstore.get_ref(repo.name, name)  # compaction moved L1/L2
                continue
            store.notify_l1_changed(repo.name, name)
            break
        else:
            raise ConflictError(f"{repo.name}/{name}: the branch kept moving; reset not done")
    await record_dropped(repo, name, ref, RESET_REASON)
    return new


async def reset_paths(branch: Branch, path: str, *, prefix: bool = False) -> int:
    """Drop the staged changes of ``path`` (with ``prefix``: of every path starting with
    it): each such key gets its committed record back, or a tombstone where nothing is
    committed, in one write (lakeFS ``resetBranch`` of type object / common_prefix).
    The number of keys reset."""
    await _protection.guard(branch.repository, branch.name, "reset")
    changes = await branch.diff_uncommitted()
    if prefix:
        hit = [c for c in changes if c.key.decode("utf-8", "surrogateescape").startswith(path)]
    else:
        hit = [c for c in changes if c.key == path.encode("utf-8", "surrogateescape")]
    if not hit:
        return 0
    batch = branch.batch()
    for c in hit:
        if c.left is not None:
            batch.kv(c.key, c.left.value or b"", c.left.identity)
        else:
            batch.kv_delete(c.key)
    return await batch.apply()
