"""Running the actions of an event: the one entry the operations layer calls.

:func:`pre` runs before an operation writes anything: when a hook fails (or the action
files cannot be loaded) it raises :class:`~lsmstore.errors.HookFailedError` (412, as
lakeFS) and the operation is abandoned.  :func:`post` runs after the operation
succeeded, before it returns: a failure is recorded with the run, never raised (an
error recording it is dropped too: the operation is done).

A run loads the actions at the event's ``source_ref`` (:mod:`lsmstore.actions.files`),
keeps those whose ``on`` matches the event and branch, and runs them concurrently;
the hooks of one action run in order, and after a failure the rest of that action's
hooks are skipped (recorded as failed).  Only events with matching actions are
recorded (:mod:`lsmstore.actions.runs`).  ``actions_enabled = off`` skips it all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lsmstore.actions import runs
from lsmstore.actions.allow import AllowList
from lsmstore.errors import HookFailedError, InvalidActionError
from lsmstore.types import ActionRun, HookRun

if TYPE_CHECKING:
    from lsmstore.actions.files import Action
    from lsmstore.client import Repository

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    """What happened (lakeFS's hook record): ``source_ref`` is where the action files
    are read from; the other fields go into the webhook body when set."""

    event_type: str
    source_ref: str
    branch_id: str = ""
    commit_id: str = ""
    tag_id: str = ""
    commit_message: str = ""
    committer: str = ""
    commit_metadata: Mapping[str, str] = field(default_factory=dict)
    merge_source: str = ""

    def post(self, **changes: str) -> Event:
        """The matching post-event (``post-commit`` of ``pre-commit``) with ``changes``."""
        fields = {n: getattr(self, n) for n in self.__slots__}
        fields.update(changes, event_type="post-" + self.event_type.removeprefix("pre-"))
        return Event(**fields)


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _run_action(
    repo: Repository, run_id: str, index: int, action: Action, event: Event
) -> tuple[list[HookRun], str | None]:
    from lsmstore.actions import webhook  # the HTTP client, loaded when a hook runs

    store = repo.store
    allow = AllowList.parse(store.config.actions_webhook_allow)
    results: list[HookRun] = []
    failure: str | None = None
    for i, hook in enumerate(action.hooks):
        hrid = runs.hook_run_id(index, i)
        if failure is not None:
            results.append(HookRun(hrid, action.name, hook.id, 0.0, 0.0, False))
            continue
        start = store.clock()
        fields = {
            "event_type": event.event_type, "event_time": _rfc3339(start),
            "repository_id": repo.name, "branch_id": event.branch_id,
            "source_ref": event.source_ref, "tag_id": event.tag_id,
            "commit_id": event.commit_id, "commit_message": event.commit_message,
            "committer": event.committer, "commit_metadata": dict(event.commit_metadata),
            "merge_source": event.merge_source,
        }  # fmt: skip
        body = webhook.event_body(fields, action.name, hook.id)
        error, output = await webhook.call(hook, body, allow, store.clock)
        results.append(HookRun(hrid, action.name, hook.id, start, store.clock(), error is None))
        await runs.save_output(repo.objects, run_id, hrid, output)
        if error is not None:
            failure = (
                f"hook run id '{hrid}' failed on action '{action.name}' hook '{hook.id}': "
                f"action failed: {error}"
            )
    return results, failure


def enabled(repo: Repository) -> bool:
    """Whether the store runs actions (``actions_enabled``)."""
    return repo.store.config.actions_enabled == "on"


@dataclass(slots=True)
class Pending:
    """A pre-event's run whose hooks passed, recorded by :func:`finish` once the
    operation knows the commit it wrote (lakeFS fills a pre-commit run's commit ID in
    afterwards; ours are written once)."""

    repo: Repository
    record: ActionRun
    hooks: list[HookRun]


async def _execute(
    repo: Repository, event: Event
) -> tuple[ActionRun, list[HookRun], str | None] | None:
    """Run the event's actions (outputs saved, the run not yet): the run, its hooks
    and its first failure; None when no action matched.  InvalidActionError when the
    files do not load."""
    from lsmstore.actions import files

    store = repo.store
    if not enabled(repo):
        return None
    actions = [
        a for a in await files.load_actions(repo, event.source_ref)
        if a.matches(event.event_type, event.branch_id)
    ]  # fmt: skip
    if not actions:
        return None
    run_id = runs.new_run_id(store.clock(), store.token)
    done = await asyncio.gather(
        *(_run_action(repo, run_id, i, a, event) for i, a in enumerate(actions))
    )
    hooks = [h for results, _ in done for h in results]
    failure = next((f for _, f in done if f is not None), None)
    started = [h for h in hooks if h.start_time]
    record = ActionRun(
        run_id, event.event_type, event.branch_id, event.source_ref, event.commit_id,
        min((h.start_time for h in started), default=0.0),
        max((h.end_time for h in started), default=0.0),
        failure is None,
    )  # fmt: skip
    return record, hooks, failure


async def _save(repo: Repository, record: ActionRun, hooks: list[HookRun]) -> None:
    """Record a run, then delete what is past the retention."""
    store = repo.store
    await runs.save_run(repo.objects, record, hooks)
    try:
        await runs.prune(repo.objects, store.clock(), store.config.actions_runs_retention_s)
    except Exception as e:  # retention catches up on the next run
        log.warning("%s: pruning old action runs failed: %r", repo.name, e)


async def pre(repo: Repository, event: Event, *, defer: bool = False) -> Pending | None:
    """Run a pre-event's actions; HookFailedError when one fails (the run recorded,
    nothing else written).  With ``defer`` a passing run is returned for
    :func:`finish` to record with the operation's commit; else it is recorded now."""
    try:
        done = await _execute(repo, event)
    except InvalidActionError as e:
        raise HookFailedError(f"{event.event_type} hook aborted: {e}") from None
    if done is None:
        return None
    record, hooks, failure = done
    if failure is not None or not defer:
        await _save(repo, record, hooks)
    if failure is not None:
        raise HookFailedError(
            f"{event.event_type} hook aborted, run id '{record.run_id}': {failure}",
            record.run_id,
        )
    return Pending(repo, record, hooks) if defer else None


async def finish(pending: Pending | None, commit_id: str) -> None:
    """Record a deferred pre-event run with ``commit_id`` ("" when the operation wrote
    no commit).  Never raises: the operation is over (a failure is logged; the
    outputs stay for retention to delete)."""
    if pending is None:
        return
    try:
        await _save(pending.repo, replace(pending.record, commit_id=commit_id), pending.hooks)
    except Exception as e:
        log.warning("%s: recording run %s failed: %r", pending.repo.name,
                    pending.record.run_id, e)  # fmt: skip


async def post(repo: Repository, event: Event) -> None:
    """Run a post-event's actions; failures are recorded with the run, never raised."""
    try:
        done = await _execute(repo, event)
        if done is not None:
            await _save(repo, done[0], done[1])
    except Exception as e:
        log.warning("%s: %s actions not run: %r", repo.name, event.event_type, e)
