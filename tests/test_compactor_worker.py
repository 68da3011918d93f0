"""The worker process: ``--once`` on the embedded default and on Redis + S3 (moto),
SIGTERM, kill -9 at every step of a job, JSON log lines, bad configuration."""

from __future__ import annotations

import asyncio
import random
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from compactor import worker as worker_module
from compactor.worker import Worker
from lsmstore.compaction.job import STEPS
from lsmstore.gc.staging import Sweeper
from lsmstore.graveler.record import Record, default_identity
from lsmstore.refstore.base import Ref, RefStore, Repository
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.refstore.url import open_refstore
from lsmstore.service import ExitCode
from lsmstore.staging.writer import BranchWriter
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.local import LocalStore
from lsmstore.storage.s3 import S3Store
from lsmstore.testing.compaction import (
    WorkerProcess,
    append_l1_file,
    branch_state,
    gc_records,
    make_config,
    rec,
    referenced,
    staged_files,
)
from lsmstore.testing.pause import Pause
from lsmstore.testing.servers import MOTO_ENV, MotoServer

POLICY_ENV = {"LSMSTORE_COMPACTION_L1_FILES": "3", "LSMSTORE_COMPACTION_L2_FILE_BYTES": "2000"}
COMPACTION_FIELDS = {
    "repo",
    "branch",
    "outcome",
    "reason",
    "l1_in",
    "l2_in",
    "files_out",
    "records_in",
    "records_out",
    "bytes_in",
    "bytes_out",
    "duration_s",
}


@dataclass
class Setup:
    url: str  # RefStore URL for the worker
    refstore: RefStore
    stores: dict[str, ObjectStore]  # repo -> its object store
    env: dict[str, str]


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[Setup]:
    refs = tmp_path / "refs"
    env = {"LSMSTORE_HOME": str(tmp_path / "home"), **POLICY_ENV}
    async with EmbeddedRefStore(refs) as rs:
        stores: dict[str, ObjectStore] = {}
        for repo in ("alpha", "beta"):
            ns = tmp_path / repo
            await rs.create_repository(Repository(repo, ns.as_uri(), "main"))
            stores[repo] = LocalStore(ns)
        yield Setup(f"local://{refs}", rs, stores, env)


async def fill(setup: Setup, repo: str, branch: str, files: int, seed: int) -> None:
    rs = setup.refstore
    if branch not in {n for n, _ in await rs.list_refs(repo)}:
        await rs.create_ref(repo, branch, Ref("branch", ""))
    rng = random.Random(seed)
    for _ in range(files):
        recs = [rec(f"k{rng.randrange(200):04d}", rng.randbytes(30)) for _ in range(20)]
        recs.append(rec(f"k{rng.randrange(200):04d}", None))
        await append_l1_file(rs, setup.stores[repo], repo, branch, recs)


async def run_once(setup: Setup, *args: str, pause: str | None = None) -> WorkerProcess:
    w = WorkerProcess("--refstore", setup.url, "--once", *args, env=setup.env, pause=pause)
    await w.start()
    return w


async def check_once(setup: Setup, *, concurrency: str = "2") -> WorkerProcess:
    await fill(setup, "alpha", "main", 8, seed=1)
    await fill(setup, "alpha", "dev", 5, seed=2)
    await fill(setup, "alpha", "quiet", 2, seed=3)  # below the policy: left alone
    await fill(setup, "beta", "main", 4, seed=4)
    await setup.refstore.create_ref("alpha", "v1", Ref("tag", ""))
    before = {
        (r, b): await branch_state(setup.refstore, setup.stores[r], r, b)
        for r, b in [("alpha", "main"), ("alpha", "dev"), ("alpha", "quiet"), ("beta", "main")]
    }
    quiet = await setup.refstore.get_ref("alpha", "quiet")
    w = await run_once(setup, "--concurrency", concurrency)
    assert await w.wait() == 0, w.raw[-20:]
    for (r, b), state in before.items():
        ref = await setup.refstore.get_ref(r, b)
        assert await branch_state(setup.refstore, setup.stores[r], r, b, ref) == state
        if b == "quiet":
            assert ref == quiet
        else:
            assert len(ref.l1) <= 3 and ref.l2, (r, b, ref)
    done = {(d["repo"], d["branch"]) for d in w.events("compaction")}
    assert done == {("alpha", "main"), ("alpha", "dev"), ("beta", "main")}
    for d in w.events("compaction"):
        assert COMPACTION_FIELDS <= set(d) and d["outcome"] == "compacted"
        assert d["bytes_in"] > 0 and d["records_in"] > 0 and d["files_out"] >= 1
    assert {d["repo"] for d in w.events("sweep")} == {"alpha", "beta"}
    (summary,) = w.events("pass")
    assert summary["outcomes"] == {"compacted": 3} and summary["errors"] == 0
    assert w.events("started") and w.events("exited")
    return w


async def test_once_on_the_embedded_default(embedded: Setup) -> None:
    w = await check_once(embedded)
    # every line is a JSON object with the common fields
    assert all({"ts", "level", "logger", "msg"} <= set(d) for d in w.lines)
    # nothing left to do: a second run compacts nothing
    again = await run_once(embedded)
    assert await again.wait() == 0
    assert again.events("compaction") == []


async def test_once_on_redis_and_s3(
    redis_server_url: str, moto: MotoServer, tmp_path: Path
) -> None:
    from aiobotocore.session import get_session

    bucket = f"w-{uuid.uuid4().hex[:12]}"
    async with get_session().create_client(
        "s3", endpoint_url=moto.endpoint, region_name="us-east-1"
    ) as client:
        await client.create_bucket(Bucket=bucket)
    url = f"{redis_server_url}?prefix=w{uuid.uuid4().hex[:8]}:"
    refstore = open_refstore(url)
    stores: dict[str, ObjectStore] = {}
    try:
        for repo in ("alpha", "beta"):
            ns = f"s3://{bucket}/{repo}?endpoint_url={moto.endpoint}"
            await refstore.create_repository(Repository(repo, ns, "main"))
            stores[repo] = S3Store(bucket, repo, endpoint_url=moto.endpoint)
        env = {"LSMSTORE_HOME": str(tmp_path / "home"), **POLICY_ENV, **MOTO_ENV}
        await check_once(Setup(url, refstore, stores, env), concurrency="3")
    finally:
        for s in stores.values():
            await s.aclose()
        await refstore.aclose()


async def test_sigterm_abandons_a_job_cleanly(embedded: Setup) -> None:
    await fill(embedded, "alpha", "main", 6, seed=1)
    await fill(embedded, "alpha", "next", 6, seed=2)  # waits for the only slot
    objects = embedded.stores["alpha"]
    before = await embedded.refstore.get_ref("alpha", "main")
    waiting = await embedded.refstore.get_ref("alpha", "next")
    w = await run_once(
        embedded,
        "--shutdown-timeout",
        "0.5",
        "--concurrency",
        "1",
        pause="before_swap",
    )
    paused = await w.wait_for("paused")
    assert paused["step"] == "before_swap" and paused["branch"] == "main"
    assert await gc_records(objects)  # the intent is there
    assert w.proc is not None
    t0 = time.monotonic()
    w.proc.send_signal(signal.SIGTERM)
    assert await w.wait(30) == 0
    assert time.monotonic() - t0 < 10
    # abandoned before its swap: nothing changed, its outputs and intent are gone
    assert await embedded.refstore.get_ref("alpha", "main") == before
    assert await staged_files(objects, "main") == referenced(before)
    assert await embedded.refstore.get_ref("alpha", "next") == waiting  # never started
    assert await gc_records(objects) == []
    assert w.events("stopping") and w.events("exited")


async def test_sigterm_lets_a_running_job_finish(embedded: Setup) -> None:
    await fill(embedded, "alpha", "main", 6, seed=1)
    state = await branch_state(embedded.refstore, embedded.stores["alpha"], "alpha", "main")
    w = await run_once(embedded, pause="before_swap:1.0")
    await w.wait_for("paused")
    assert w.proc is not None
    w.proc.send_signal(signal.SIGTERM)
    assert await w.wait(30) == 0
    (job,) = w.events("compaction")
    assert job["outcome"] == "compacted"
    ref = await embedded.refstore.get_ref("alpha", "main")
    assert ref.l1 == () and ref.l2
    objects = embedded.stores["alpha"]
    assert await branch_state(embedded.refstore, objects, "alpha", "main") == state


async def acknowledged_writes(setup: Setup, repo: str, n_batches: int) -> dict[bytes, bytes]:
    """Writes through the real writer; the model holds only acknowledged ones."""
    rs = setup.refstore
    await rs.create_ref(repo, "main", Ref("branch", ""))
    cfg = make_config(batch_interval_ms=0, batch_max_records=10)
    writer = BranchWriter(rs, setup.stores[repo], repo, "main", cfg)
    model: dict[bytes, bytes] = {}
    rng = random.Random(9)
    try:
        for _ in range(n_batches):
            batch = []
            for _ in range(10):
                key = f"key{rng.randrange(150):04d}".encode()
                if rng.random() < 0.2:
                    batch.append((key, None))
                else:
                    batch.append((key, rng.randbytes(16)))
            await writer.write_many(
                [
                    Record(k, b"", None) if v is None else Record(k, default_identity(v), v)
                    for k, v in batch
                ]
            )
            for k, v in batch:
                if v is None:
                    model.pop(k, None)
                else:
                    model[k] = v
    finally:
        await writer.aclose()
    return model


@pytest.mark.parametrize("step", STEPS)
async def test_kill_9_at_every_step(embedded: Setup, step: str) -> None:
    model = await acknowledged_writes(embedded, "alpha", 12)
    rs, objects = embedded.refstore, embedded.stores["alpha"]
    before = await rs.get_ref("alpha", "main")
    assert len(before.l1) == 12
    w = await run_once(embedded, pause=step)
    await w.wait_for("paused")
    assert w.proc is not None
    w.proc.kill()  # SIGKILL: no cleanup whatsoever
    assert await w.wait(30) == -signal.SIGKILL
    after = await rs.get_ref("alpha", "main")
    assert (after == before) is (step != "after_swap")
    # every acknowledged write is still readable
    assert await branch_state(rs, objects, "alpha", "main") == model
    # leftovers are collected once the grace period has passed (a dead job's intent
    # waits one grace period, then its files are marked and go one period later)
    grace = make_config().compaction_grace_s
    clock = [time.time() + grace + 1]
    sweeper = Sweeper(grace, clock=lambda: clock[0])
    await sweeper.sweep(rs, "alpha", objects)
    clock[0] += grace + 1
    await sweeper.sweep(rs, "alpha", objects)
    assert await staged_files(objects) == referenced(after)
    assert await gc_records(objects) == []
    assert await branch_state(rs, objects, "alpha", "main") == model
    # and the next run compacts normally
    w2 = await run_once(embedded)
    assert await w2.wait() == 0
    assert await branch_state(rs, objects, "alpha", "main") == model


async def test_bad_configuration_exits_2(tmp_path: Path) -> None:
    w = WorkerProcess("--refstore", "nosuch://x", "--once", env={"LSMSTORE_HOME": str(tmp_path)})
    await w.start()
    assert await w.wait() == 2
    (err,) = w.events("config_error")
    assert "nosuch" in err["error"]
    w = WorkerProcess("--once", env={"LSMSTORE_HOME": str(tmp_path), "LSMSTORE_NO_SUCH": "1"})
    await w.start()
    assert await w.wait() == 2
    assert "no_such" in w.events("config_error")[0]["error"]


async def test_unreachable_refstore_fails_the_pass(tmp_path: Path) -> None:
    from lsmstore.testing.servers import free_port

    url = f"redis://127.0.0.1:{free_port()}/0?timeout=0.5"
    w = WorkerProcess("--refstore", url, "--once", env={"LSMSTORE_HOME": str(tmp_path)})
    await w.start()
    assert await w.wait() == ExitCode.UNAVAILABLE
    assert w.events("error") and w.events("pass")[0]["errors"] == 1
    (down,) = w.events("dependency_down")
    assert down["dependency"] == "refstore"


async def test_listing_pages_through_every_branch(
    embedded: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "PAGE", 3)
    rs = embedded.refstore
    for i in range(10):
        await fill(embedded, "alpha", f"b{i:02d}", 4, seed=i)
        await rs.create_ref("alpha", f"t{i:02d}", Ref("tag", ""))  # tags between branches
    for i in range(4):
        ns = f"{embedded.stores['beta'].url}-more{i}"  # a namespace of its own
        await rs.create_repository(Repository(f"more{i}", ns, "main"))
    cfg = make_config(refstore=embedded.url, compaction_l1_files=3)
    w = Worker(rs, cfg, concurrency=3)
    repos = [r.name async for r in w.repositories()]
    assert repos == ["alpha", "beta", "more0", "more1", "more2", "more3"]
    result = await w.run_pass()
    assert result.outcomes["compacted"] == 10 and result.errors == 0
    for i in range(10):
        assert (await rs.get_ref("alpha", f"b{i:02d}")).l1 == ()
    await w.compactor.aclose()


def test_pause_steps_are_checked() -> None:
    assert Pause.parse("compactor", "after_swap:0.1").seconds == 0.1
    assert Pause.parse("compactor", "before_swap").seconds is None
    with pytest.raises(ValueError, match="no_such_step"):
        Pause.parse("compactor", "no_such_step")
    with pytest.raises(ValueError, match="writer"):
        Pause.parse("writer", "before_swap")


async def test_sigterm_during_interval_wait(embedded: Setup) -> None:
    w = WorkerProcess("--refstore", embedded.url, "--interval", "30", env=embedded.env)
    await w.start()
    await w.wait_for("pass")
    assert w.proc is not None
    w.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(w.wait(), 10) == 0
