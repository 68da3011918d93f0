"""The committer worker's policy commits obey the rules of every commit: branch
protection and the repository's pre-/post-commit actions, against a real webhook
server on 127.0.0.1 (lsmstore.testing.webhook_server)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import lsmstore
from committer.worker import COMMITTER, Worker
from lsmstore.service import EventCapture, capture_events
from lsmstore.testing.webhook_server import WebhookServer


@pytest.fixture
def store(hooked_store: lsmstore.Store) -> lsmstore.Store:
    return hooked_store


@pytest.fixture
def out() -> Iterator[EventCapture]:
    with capture_events("committer") as capture:
        yield capture


def commits(out: EventCapture) -> list[dict[str, Any]]:
    return [d for d in out.docs if d.get("event") == "commit"]


def action(name: str, events: str, url: str, extra: str = "") -> bytes:
    return (
        f"name: {name}\non:\n{events}hooks:\n  - id: {name.replace(' ', '_')}\n"
        f"    type: webhook\n    properties:\n      url: {url}\n{extra}"
    ).encode()


async def repo_with(
    store: lsmstore.Store, tmp_path: Path, name: str, *files: tuple[str, bytes]
) -> lsmstore.Repository:
    repo = await store.create_repository(name, storage_namespace=(tmp_path / name).as_uri())
    main = repo.branch("main")
    for path, data in files:
        await main.upload(f"_lakefs_actions/{path}", data)
    if files:
        await main.commit("actions", metadata={"owner": "ops"})
    return repo


@contextlib.asynccontextmanager
async def worker(store: lsmstore.Store) -> AsyncIterator[Worker]:
    """A committer worker over the store's RefStore and settings, closed on exit."""
    w = Worker(store.refstore, store.config, force=True, clock=store.clock)
    try:
        yield w
    finally:
        await w.aclose()


async def test_a_failing_pre_commit_hook_refuses_the_policy_commit(
    store: lsmstore.Store, tmp_path: Path, hooks: WebhookServer, out: EventCapture
) -> None:
    repo = await repo_with(store, tmp_path, "hooked", ("require.yaml", action(
        "require owner", "  pre-commit:\n", hooks.url("/require"),
        "      query_params:\n        key: owner\n",
    )))  # fmt: skip
    main = repo.branch("main")
    head = (await main.head()).base
    await main.put("k", b"v")
    await main.flush()
    seen = len(hooks.calls_to("/require"))  # the commit of the action file's
    async with worker(store) as w:
        assert await w.run_once() == 0
        [line] = commits(out)
        assert line["outcome"] == "refused" and "pre-commit hook aborted" in line["error"]
        assert (await main.head()).base == head  # nothing committed; the write stays staged
        assert await main.get("k") == b"v"
        [call] = hooks.calls_to("/require")[seen:]
        body = call.body
        assert body["event_type"] == "pre-commit" and body["committer"] == COMMITTER
        assert body["branch_id"] == "main" and body["repository_id"] == "hooked"
        run = (await repo.action_runs(branch="main"))[0]  # the newest
        assert run.status == "failed" and run.event_type == "pre-commit"

        # The same staged files: not tried again (the hook is not called every pass).
        assert await w.run_once() == 0
        assert len(hooks.calls_to("/require")) == seen + 1
        # A new write: tried again, refused again.
        await main.put("k2", b"v")
        await main.flush()
        assert await w.run_once() == 0
        assert len(hooks.calls_to("/require")) == seen + 2
        assert [d["outcome"] for d in commits(out)] == ["refused", "refused"]


async def test_policy_commits_run_pre_and_post_commit_actions(
    store: lsmstore.Store, tmp_path: Path, hooks: WebhookServer, out: EventCapture
) -> None:
    repo = await repo_with(
        store, tmp_path, "notified",
        ("check.yaml", action("check", "  pre-commit:\n", hooks.url("/check"))),
        ("notify.yaml", action("notify", "  post-commit:\n", hooks.url("/notify"))),
    )  # fmt: skip
    main = repo.branch("main")
    await main.put("k", b"v")
    await main.flush()
    async with worker(store) as w:
        assert await w.run_once() == 1
    [line] = commits(out)
    head = (await main.head()).base
    assert line["outcome"] == "committed" and line["commit_id"] == head
    assert (await repo.ref(head).get("k")) == b"v"
    pre = hooks.calls_to("/check")[-1]
    post = hooks.calls_to("/notify")[-1]
    assert pre.body["event_type"] == "pre-commit" and pre.body["committer"] == COMMITTER
    assert post.body["event_type"] == "post-commit" and post.body["commit_id"] == head
    runs = {r.event_type: r for r in await repo.action_runs(commit=head)}
    assert runs["pre-commit"].status == "completed" == runs["post-commit"].status


async def test_a_protected_branch_gets_no_policy_commit(
    store: lsmstore.Store, tmp_path: Path, out: EventCapture
) -> None:
    repo = await repo_with(store, tmp_path, "guarded")
    for name in ("release", "dev"):
        b = await repo.create_branch(name, source="main")
        await b.put("k", name.encode())
        await b.flush()
    before = (await repo.branch("release").head()).base
    await repo.set_branch_protection(["rel*"])  # after the writes: they stay staged
    async with worker(store) as w:
        assert await w.run_once() == 1
        outcomes = {d["branch"]: d for d in commits(out)}
        assert outcomes["dev"]["outcome"] == "committed"
        assert outcomes["release"]["outcome"] == "protected"
        assert "protected branch" in outcomes["release"]["error"]
        release = repo.branch("release")
        assert (await release.head()).base == before
        assert await release.get("k") == b"release"  # still staged
        # Unprotected again: the next attempt commits it (the staged files are the same,
        # so only after commit_interval_s -- or for a new worker).
        await repo.set_branch_protection([])
    async with worker(store) as w:
        assert await w.run_once() == 1
    assert (await repo.branch("release").head()).base != before
