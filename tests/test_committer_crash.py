"""Kill -9 the committer (a real ``python -m committer --once`` process) at each named
step of a commit: every acknowledged write stays readable, the branch is either at the
old base with its staged files or at the new base, and a later run completes the work.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from helpers.versioning import REPO, TINY, branch_state, close, make_repo, rec, stage, tree_of

from lsmstore.commit.job import commit_branch
from lsmstore.refstore.base import Ref
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.storage.local import LocalStore
from lsmstore.testing.pause import STEPS
from lsmstore.versioning.context import RepoContext

ROOT = Path(__file__).resolve().parent.parent


def _env(tmp_path: Path, pause: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LSMSTORE_")}
    env["LSMSTORE_HOME"] = str(tmp_path / "home")
    env["LSMSTORE_COMMIT_RANGE_MIN_BYTES"] = "200"  # the tests' tiny ranges
    env["LSMSTORE_COMMIT_RANGE_MAX_BYTES"] = "2000"
    env["LSMSTORE_COMMIT_RANGE_RAGGEDNESS"] = "8"
    env["PYTHONPATH"] = str(ROOT)
    return env


async def _committer(tmp_path: Path, pause: str | None) -> asyncio.subprocess.Process:
    # a paused run goes through the pausing entry, which hands the worker its hooks
    entry = ("lsmstore.testing.pause", "committer", pause) if pause else ("committer",)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        *entry,
        "--once",
        "--force",
        "--owner",
        "committer-1",  # the restarted worker takes back the lease the killed one held
        "--refstore",
        f"local://{tmp_path / 'refs'}",
        cwd=ROOT,
        env=_env(tmp_path, pause),
        stderr=asyncio.subprocess.PIPE,
    )


async def _lines_until(proc: asyncio.subprocess.Process, event: str) -> list[dict[str, object]]:
    assert proc.stderr is not None
    seen: list[dict[str, object]] = []
    while True:
        line = await proc.stderr.readline()
        assert line, f"committer exited before {event!r}: {seen}"
        doc = json.loads(line)
        seen.append(doc)
        if doc["event"] == event:
            return seen


async def _open(tmp_path: Path) -> RepoContext:
    rs = EmbeddedRefStore(tmp_path / "refs")
    return RepoContext(REPO, rs, LocalStore(tmp_path / "data"), policy=TINY)


@pytest.mark.parametrize("step", STEPS["committer"])
async def test_kill_at_step(tmp_path: Path, step: str) -> None:
    ctx = await make_repo(tmp_path)
    await stage(ctx, "main", [rec(f"k{i:05d}", f"v{i}") for i in range(3000)])
    base = await commit_branch(ctx, "main", "base", committer="test")
    await stage(ctx, "main", [rec(f"k{i:05d}", f"w{i}") for i in range(0, 3000, 97)])
    await stage(ctx, "main", [rec("k00005", None), rec("new", "n")])
    before = await ctx.refstore.get_ref(REPO, "main")
    acked = await branch_state(ctx, "main")
    await close(ctx)

    proc = await _committer(tmp_path, step)
    try:
        await _lines_until(proc, "paused")
        # a write acknowledged while the commit is in flight
        ctx = await _open(tmp_path)
        late = await stage(ctx, "main", [rec("k00010", "late"), rec("late", "l")])
        acked[b"k00010"] = b"late"
        acked[b"late"] = b"l"
    finally:
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL

    after = await ctx.refstore.get_ref(REPO, "main")
    if step == "swapped":
        assert after.base != before.base and after.l2 == () and after.l1 == (late,)
        assert (await ctx.commit(after.base)).parents == (base.commit_id,)
    else:
        assert after == Ref("branch", before.base, before.l2, (*before.l1, late))
    assert await branch_state(ctx, "main") == acked
    await close(ctx)

    # A new run finishes the job.
    proc = await _committer(tmp_path, None)
    lines = await _lines_until(proc, "stopped")
    assert await proc.wait() == 0
    outcomes = [d["outcome"] for d in lines if d["event"] == "commit"]
    assert outcomes == ["committed"], lines
    ctx = await _open(tmp_path)
    final = await ctx.refstore.get_ref(REPO, "main")
    assert final.l1 == () and final.l2 == ()
    assert await tree_of(ctx, final.base) == acked
    await close(ctx)


async def test_sigterm_while_idle_exits_cleanly(tmp_path: Path) -> None:
    ctx = await make_repo(tmp_path)
    await close(ctx)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "committer",
        "--interval",
        "3600",
        "--refstore",
        f"local://{tmp_path / 'refs'}",
        cwd=ROOT,
        env=_env(tmp_path, None),
        stderr=asyncio.subprocess.PIPE,
    )
    await _lines_until(proc, "pass")
    proc.send_signal(signal.SIGTERM)
    lines = await _lines_until(proc, "stopped")
    assert await proc.wait() == 0
    assert lines[-1]["passes"] == 1
