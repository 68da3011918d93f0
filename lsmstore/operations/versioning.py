"""Commit, merge, revert and cherry-pick (docs/versioning.md), with the arguments
checked once for every front end.

A commit holds the branch's shared lock (:mod:`lsmstore.operations.exclusion`) and
first flushes this process's pending writes to the branch: every write acknowledged
before the call, from any process, is in the commit; writes acknowledged meanwhile stay
staged.  Merge and revert write a commit onto the destination's base with the RefStore's
compare-and-swap (retried with backoff, ``commit_max_attempts``); the destination's
staged writes stay staged on top.  Their :class:`MergeResult` is the answer every front
end reports (the server sends its fields; the remote client rebuilds it from them).

Branch protection (:mod:`lsmstore.operations.protection`) is checked at the entry
of commit, revert and cherry-pick, which write a commit onto the branch; a merge into
a protected branch is accepted, as lakeFS does.

Actions (:mod:`lsmstore.actions.runner`): each operation runs its pre-event
(``pre-commit``, ``pre-merge``, ``pre-revert``, ``pre-cherry-pick``) after the
protection check and before anything is written -- a failing hook raises
HookFailedError and nothing changes -- and its post-event after the commit is written.
A commit runs ``pre-commit`` under the branch's shared lock after the flush, with the
action files read from the branch (staged writes included); writes acknowledged while
the hooks run are committed too.

Every commit takes this path: the committer worker's policy commits too
(docs/decisions.md, "Policy commits obey protection and hooks").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from lsmstore import refexpr, validate
from lsmstore.actions import runner as _actions
from lsmstore.operations import protection as _protection
from lsmstore.types import Commit, MergeResult, Strategy
from lsmstore.versioning import merging as _merging

if TYPE_CHECKING:
    from lsmstore.client import Branch, Repository
    from lsmstore.commit.job import CommitResult


async def commit(
    branch: Branch,
    message: str,
    *,
    metadata: Mapping[str, str] | None = None,
    committer: str | None = None,
    allow_empty: bool = False,
) -> Commit:
    """Commit the branch's staged writes (module docstring).  NothingToCommitError when
    nothing is staged (or the staged writes change nothing) unless ``allow_empty``."""
    result = await commit_job(
        branch, message, metadata=metadata, committer=committer, allow_empty=allow_empty
    )
    return result.commit


async def commit_job(
    branch: Branch,
    message: str,
    *,
    metadata: Mapping[str, str] | None = None,
    committer: str | None = None,
    allow_empty: bool = False,
    on_step: Callable[[str], Awaitable[None]] | None = None,
) -> CommitResult:
    """:func:`commit`, answering what the commit job did (the committer worker logs
    it); ``on_step`` is the job's test hook (:data:`lsmstore.commit.job.STEPS`)."""
    from lsmstore.commit.job import commit_branch

    validate.check_str(message, "commit message", empty_ok=True)
    repo = branch.repository
    await _protection.guard(repo, branch.name, "commit to")
    store = repo.store
    cfg = store.config
    # the caller's name, else the configured user (LSMSTORE_USER, else the OS user)
    committer = validate.check_committer(committer) or cfg.user
    metadata = validate.check_metadata(metadata, "commit metadata")
    validate.check_bool(allow_empty, "allow_empty")
    event = _actions.Event(
        "pre-commit", branch.name, branch_id=branch.name, commit_message=message,
        committer=committer, commit_metadata=metadata,
    )  # fmt: skip
    commit_id = ""
    async with store.exclusion.shared(repo.name, branch.name):
        await branch.flush()
        pending = await _actions.pre(repo, event, defer=True)
        try:
            result = await commit_branch(
                repo.context(),
                branch.name,
                message,
                committer=committer,
                metadata=metadata,
                allow_empty=allow_empty,
                clock=store.clock,
                max_attempts=cfg.commit_max_attempts,
                backoff_s=cfg.commit_backoff_ms / 1000,
                backoff_max_s=cfg.commit_backoff_max_ms / 1000,
                grace_s=cfg.compaction_grace_s,
                on_step=on_step,
            )
            commit_id = result.commit_id
        finally:
            store.notify_l1_changed(repo.name, branch.name)
            await _actions.finish(pending, commit_id)
    await _actions.post(repo, event.post(source_ref=result.commit_id, commit_id=result.commit_id))
    return result


async def merge(
    repo: Repository,
    source: str,
    into: str,
    *,
    strategy: Strategy | None = None,
    message: str | None = None,
    committer: str | None = None,
    metadata: Mapping[str, str] | None = None,
    squash: bool = False,
) -> MergeResult:
    """Three-way merge of the commit ``source`` names into branch ``into``
    (``Repository.merge``)."""
    cfg = repo.store.config
    into = repo.branch(into).name
    message = validate.check_message(message)
    committer = validate.check_committer(committer) or cfg.user
    metadata = validate.check_metadata(metadata)
    event = pending = None
    if _actions.enabled(repo):
        source_commit = (await refexpr.resolve(repo.context(), source)).commit_id
        event = _actions.Event(
            "pre-merge", source_commit, branch_id=into, merge_source=source,
            commit_message=message or f"Merge '{source}' into '{into}'",
            committer=committer, commit_metadata=metadata,
        )  # fmt: skip
        pending = await _actions.pre(repo, event, defer=True)
    result = None
    try:
        result = await _merging.merge(
            repo.context(),
            source,
            into,
            strategy=strategy,
            message=message,
            committer=committer,
            metadata=metadata,
            squash=validate.check_bool(squash, "merge squash"),
            max_attempts=cfg.commit_max_attempts,
            backoff_s=cfg.commit_backoff_ms / 1000,
            backoff_max_s=cfg.commit_backoff_max_ms / 1000,
        )
    finally:
        await _actions.finish(pending, result.commit_id if result and result.merged else "")
    if event is not None and result.merged:
        await _actions.post(
            repo, event.post(source_ref=result.commit_id, commit_id=result.commit_id)
        )
    return result


async def revert(
    repo: Repository,
    commit_ref: str,
    branch: str,
    *,
    parent: int = 1,
    strategy: Strategy | None = None,
    message: str | None = None,
    committer: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> MergeResult:
    """Undo the changes of the commit ``commit_ref`` names on ``branch`` with a new
    commit (``Repository.revert``)."""
    return await _reapply(
        _merging.revert, "revert", "revert on", repo, commit_ref, branch, parent=parent,
        strategy=strategy, message=message, committer=committer,
        metadata=validate.check_metadata(metadata),
    )  # fmt: skip


async def cherry_pick(
    repo: Repository,
    commit_ref: str,
    branch: str,
    *,
    parent: int = 1,
    strategy: Strategy | None = None,
    message: str | None = None,
    committer: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> MergeResult:
    """Apply the changes of the commit ``commit_ref`` names onto ``branch`` as a new
    commit (``Branch.cherry_pick``); without ``metadata``, the picked commit's."""
    return await _reapply(
        _merging.cherry_pick, "cherry-pick", "cherry-pick onto", repo, commit_ref, branch,
        parent=parent, strategy=strategy, message=message, committer=committer,
        metadata=None if metadata is None else validate.check_metadata(metadata),
    )  # fmt: skip


async def _reapply(
    apply: Callable[..., Awaitable[MergeResult]],
    what: str,
    guarded: str,
    repo: Repository,
    commit_ref: str,
    branch: str,
    *,
    parent: int,
    strategy: Strategy | None,
    message: str | None,
    committer: str | None,
    metadata: Mapping[str, str] | None,
) -> MergeResult:
    """Revert and cherry-pick: one commit's changes applied (undone or redone) onto
    ``branch`` as a new commit, after the branch's protection is checked."""
    name = repo.branch(branch).name
    await _protection.guard(repo, name, guarded)
    cfg = repo.store.config
    parent = validate.check_int(parent, f"{what} parent", min_value=1, max_value=2)
    message = validate.check_message(message)
    committer = validate.check_committer(committer) or cfg.user
    event = _actions.Event(
        f"pre-{what}", name, branch_id=name, commit_message=message or "",
        committer=committer, commit_metadata=metadata or {},
    )  # fmt: skip
    pending = await _actions.pre(repo, event, defer=True)
    result = None
    try:
        result = await apply(
            repo.context(),
            name,
            commit_ref,
            parent=parent,
            strategy=strategy,
            message=message,
            committer=committer,
            metadata=metadata,
            max_attempts=cfg.commit_max_attempts,
            backoff_s=cfg.commit_backoff_ms / 1000,
            backoff_max_s=cfg.commit_backoff_max_ms / 1000,
        )
    finally:
        await _actions.finish(pending, result.commit_id if result and result.merged else "")
    if result.merged:
        await _actions.post(
            repo, event.post(source_ref=result.commit_id, commit_id=result.commit_id)
        )
    return result
