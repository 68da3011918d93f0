"""The committer worker in process: which branches a pass commits (age, file count,
bytes, force), leases between workers, JSON log lines, stopping."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.versioning import REPO, close, make_repo, rec, stage, tree_of

from committer.worker import Worker
from lsmstore.config import Config, load_config
from lsmstore.refstore.base import Ref, Repository
from lsmstore.service import EventCapture, capture_events
from lsmstore.versioning.context import RepoContext
from lsmstore.versioning.refs import create_branch

T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[RepoContext]:
    clock = Clock()
    c = await make_repo(tmp_path)
    c.clock = clock
    yield c
    await close(c)


def config(tmp_path: Path, **settings: Any) -> Config:
    base: dict[str, Any] = {
        "home": str(tmp_path / "home"),
        "commit_interval_s": 60,
        "commit_max_staged_files": 3,
        "commit_max_staged_bytes": "1MiB",
        "commit_range_min_bytes": 200,
        "commit_range_max_bytes": 2000,
        "commit_range_raggedness": 8,
    }
    return load_config(environ={}, **(base | settings))


@pytest.fixture
def out() -> Iterator[EventCapture]:
    with capture_events("committer") as capture:
        yield capture


def worker(ctx: RepoContext, cfg: Config, clock: Clock, **kw: Any) -> Worker:
    return Worker(ctx.refstore, cfg, clock=clock, **kw)


def lines(out: EventCapture) -> list[dict[str, Any]]:
    return [d for d in out.docs if "event" in d]


def commits(out: EventCapture) -> dict[str, str]:
    return {d["branch"]: d["outcome"] for d in lines(out) if d["event"] == "commit"}


async def test_policy_triggers(ctx: RepoContext, tmp_path: Path, out: EventCapture) -> None:
    clock = Clock()
    cfg = config(tmp_path)
    initial = (await ctx.refstore.get_ref(REPO, "main")).base
    created = (await ctx.commit(initial)).created_at
    clock.now = created + 10  # the initial commit is 10 s old: not due by age
    for name in ("few", "many", "big", "idle"):
        await create_branch(ctx, name, "main")
    await stage(ctx, "few", [rec("a", "1")])
    for i in range(3):
        await stage(ctx, "many", [rec(f"m{i}", "1")])
    noise = [hashlib.sha256(str(i).encode()).hexdigest() * 2 for i in range(12_000)]
    await stage(ctx, "big", [rec(f"b{i:06d}", v) for i, v in enumerate(noise)])  # > 1 MiB
    w = worker(ctx, cfg, clock)
    assert await w.run_once() == 2
    assert commits(out) == {"many": "committed", "big": "committed"}
    reasons = {d["branch"]: d["reason"] for d in lines(out) if d["event"] == "commit"}
    assert reasons == {"many": "files", "big": "bytes"}

    clock.now = created + 60  # now the initial commit is old enough
    assert await w.run_once() == 1
    assert commits(out)["few"] == "committed"
    few = await ctx.refstore.get_ref(REPO, "few")
    assert few.l1 == () and (await tree_of(ctx, few.base)) == {b"a": b"1"}
    assert await w.run_once() == 0  # nothing staged anywhere now
    await w.aclose()


async def test_log_line_fields(ctx: RepoContext, tmp_path: Path, out: EventCapture) -> None:
    clock = Clock()
    await stage(ctx, "main", [rec(f"k{i}", "v") for i in range(100)])
    w = worker(ctx, config(tmp_path), clock, force=True)
    await w.run(once=True)
    events = lines(out)
    assert [d["event"] for d in events] == ["configured", "commit", "pass", "stopped"]
    line = events[1]
    assert len(line["request_id"]) == 16
    assert line["outcome"] == "committed" and line["reason"] == "force"
    assert (line["repo"], line["branch"], line["changes"]) == (REPO, "main", 100)
    for key in ("ranges_read", "ranges_written", "ranges_reused", "duration_s", "attempts"):
        assert isinstance(line[key], int | float), key
    assert (await ctx.refstore.get_ref(REPO, "main")).base == line["commit_id"]
    assert events[2]["committed"] == 1 and events[2]["errors"] == 0
    assert events[3] == {
        "level": "info",
        "msg": "stopped",
        "event": "stopped",
        "passes": 1,
        "committed": 1,
    }
    await w.aclose()


async def test_leased_branch_is_skipped(
    ctx: RepoContext, tmp_path: Path, out: EventCapture
) -> None:
    clock = Clock()
    await stage(ctx, "main", [rec("a", "1")])
    assert await ctx.refstore.acquire_lease(f"committer/{REPO}/main", "other", 60)
    w = worker(ctx, config(tmp_path), clock, force=True, owner="me")
    assert await w.run_once() == 0
    assert commits(out) == {"main": "leased"}
    await ctx.refstore.release_lease(f"committer/{REPO}/main", "other")
    assert await w.run_once() == 1
    # the worker released its lease: another owner can take it
    assert await ctx.refstore.acquire_lease(f"committer/{REPO}/main", "other", 60)
    await w.aclose()


async def test_repository_filter_and_errors_are_logged(
    ctx: RepoContext, tmp_path: Path, out: EventCapture
) -> None:
    clock = Clock()
    await stage(ctx, "main", [rec("a", "1")])
    # a second repository whose branch names a staged file that does not exist
    await ctx.refstore.create_repository(Repository("broken", ctx.objects.url, "main"))
    await ctx.refstore.create_ref("broken", "main", Ref("branch", "", (), ("0" * 29,)))
    w = worker(ctx, config(tmp_path), clock, force=True, repositories=["broken"])
    await w.run_once()
    [line] = [d for d in lines(out) if d["event"] == "commit"]
    assert (line["repo"], line["outcome"]) == ("broken", "error")
    assert "ObjectNotFoundError" in line["error"]
    assert (await ctx.refstore.get_ref(REPO, "main")).l1  # not in the filter: untouched
    await w.aclose()


async def test_stop_lets_a_running_commit_finish(
    ctx: RepoContext, tmp_path: Path, out: EventCapture
) -> None:
    clock = Clock()
    await stage(ctx, "main", [rec("a", "1")])
    entered = asyncio.Event()
    go = asyncio.Event()

    async def on_step(step: str) -> None:
        if step == "tree-written":
            entered.set()
            await go.wait()

    w = worker(ctx, config(tmp_path), clock, force=True, on_step=on_step)
    run = asyncio.create_task(w.run())
    await entered.wait()
    w.stop()
    go.set()
    await run
    assert commits(out) == {"main": "committed"}
    await w.aclose()


async def test_stop_abandons_a_stuck_commit(
    ctx: RepoContext, tmp_path: Path, out: EventCapture
) -> None:
    clock = Clock()
    await stage(ctx, "main", [rec("a", "1")])
    before = await ctx.refstore.get_ref(REPO, "main")
    entered = asyncio.Event()

    async def on_step(step: str) -> None:
        if step == "commit-written":
            entered.set()
            await asyncio.Event().wait()  # never returns

    w = worker(ctx, config(tmp_path), clock, force=True, on_step=on_step, shutdown_timeout_s=0.01)
    run = asyncio.create_task(w.run())
    await entered.wait()
    w.stop()
    await run
    await w.aclose()
    events = [d["event"] for d in lines(out)]
    assert "abandoned" in events and events[-1] == "stopped"
    assert await ctx.refstore.get_ref(REPO, "main") == before  # nothing half-done
