"""Compaction under concurrent writes loses nothing (embedded default; Redis + S3 on moto),
and writers stalled by the L1 hard bound resume once compaction catches up (in-process
and with the worker process)."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from lsmstore.compaction.inprocess import BackgroundCompactor
from lsmstore.compaction.runner import Compactor
from lsmstore.config import Config
from lsmstore.errors import WriteStalledError
from lsmstore.graveler.record import Record, default_identity
from lsmstore.refstore.base import Ref, RefStore
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.refstore.url import open_refstore
from lsmstore.staging.writer import BranchWriter
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.local import LocalStore
from lsmstore.storage.s3 import S3Store
from lsmstore.testing.compaction import (
    BRANCH,
    REPO,
    WorkerProcess,
    branch_state,
    check_l2,
    make_config,
    setup_branch,
)
from lsmstore.testing.servers import MotoServer, new_bucket


async def writes_with_compaction(
    refstore: RefStore,
    objects: ObjectStore,
    config: Config,
    *,
    writers: int = 4,
    ops: int = 250,
) -> tuple[dict[bytes, bytes], int]:
    """Writers put and delete (each owns its keys, so the model is exact) while two
    compactors run back to back; returns the model and the number of swaps."""
    writer = BranchWriter(refstore, objects, REPO, BRANCH, config)
    model: dict[bytes, bytes] = {}
    done = asyncio.Event()
    swaps = 0

    async def write(i: int) -> None:
        rng = random.Random(i)
        for _ in range(ops):
            key = f"w{i}/k{rng.randrange(60):03d}".encode()
            if rng.random() < 0.3:
                await writer.write(Record(key, b"", None))
                model.pop(key, None)
            else:
                value = rng.randbytes(rng.randint(1, 80))
                await writer.write(Record(key, default_identity(value), value))
                model[key] = value

    async def compact(owner: str) -> None:
        nonlocal swaps
        comp = Compactor(refstore, config, owner=owner)
        while not done.is_set():
            for r in await comp.compact(REPO, BRANCH, objects, force=True):
                assert r.outcome in ("compacted", "conflict"), r
                swaps += r.outcome == "compacted"
            await asyncio.sleep(0.002)

    compactors = [asyncio.create_task(compact(f"c{i}")) for i in range(2)]
    try:
        await asyncio.gather(*(write(i) for i in range(writers)))
    finally:
        done.set()
        await asyncio.gather(*compactors)
        await writer.aclose()
    return model, swaps


def small_config(**kw: object) -> Config:
    return make_config(
        batch_interval_ms=1,
        compaction_l1_files=3,
        compaction_job_files=5,
        compaction_l2_file_bytes=1500,
        **kw,
    )


async def test_concurrent_writes_and_compactions_embedded(tmp_path: Path) -> None:
    async with EmbeddedRefStore(tmp_path / "refs") as refstore:
        await setup_branch(refstore, f"file://{tmp_path}/data")
        objects = LocalStore(tmp_path / "data")
        model, swaps = await writes_with_compaction(refstore, objects, small_config())
        assert swaps >= 3
        ref = await refstore.get_ref(REPO, BRANCH)
        assert ref.l2
        assert await branch_state(refstore, objects, REPO, BRANCH) == model
        # a final compaction leaves it all in L2, still equal
        await Compactor(refstore, small_config()).compact(REPO, BRANCH, objects, force=True)
        assert await branch_state(refstore, objects, REPO, BRANCH) == model
        await check_l2(objects, BRANCH, await refstore.get_ref(REPO, BRANCH))


async def test_concurrent_writes_and_compactions_redis_s3(
    redis_server_url: str, moto: MotoServer
) -> None:
    bucket = await new_bucket(moto.endpoint, "c")
    refstore = open_refstore(f"{redis_server_url}?prefix=t{uuid.uuid4().hex[:8]}:")
    objects = S3Store(bucket, "ns", endpoint_url=moto.endpoint)
    try:
        await setup_branch(refstore, f"s3://{bucket}/ns?endpoint_url={moto.endpoint}")
        model, swaps = await writes_with_compaction(
            refstore, objects, small_config(), writers=3, ops=120
        )
        assert swaps >= 2
        assert await branch_state(refstore, objects, REPO, BRANCH) == model
    finally:
        await objects.aclose()
        await refstore.aclose()


def stall_config(**kw: object) -> Config:
    settings: dict[str, object] = {
        "batch_interval_ms": 0,
        "batch_max_records": 8,
        "l1_soft_limit": 3,
        "l1_hard_limit": 6,
        "l1_slowdown_ms": 0,
        "stall_timeout_s": 60,
        "compaction_l1_files": 4,
        "compaction_job_files": 50,
        "compaction_l2_file_bytes": 4000,
    }
    return make_config(**(settings | kw))


async def write_through_stalls(writer: BranchWriter, n: int) -> dict[bytes, bytes]:
    model: dict[bytes, bytes] = {}

    async def one(i: int) -> None:
        key = f"key{i:05d}".encode()
        value = f"value-{i}".encode()
        await writer.write(Record(key, default_identity(value), value))
        model[key] = value

    sem = asyncio.Semaphore(64)

    async def bounded(i: int) -> None:
        async with sem:
            await one(i)

    await asyncio.gather(*(bounded(i) for i in range(n)))
    return model


async def test_stalled_writer_resumes_with_the_in_process_compactor(tmp_path: Path) -> None:
    # No timer: only the append notifications wake the compactor.
    config = stall_config(compaction_interval_s=3600)
    async with EmbeddedRefStore(tmp_path / "refs") as refstore:
        await setup_branch(refstore, f"file://{tmp_path}/data")
        objects = LocalStore(tmp_path / "data")
        bg = BackgroundCompactor(refstore, config)
        woken: list[Ref] = []
        writer = BranchWriter(
            refstore, objects, REPO, BRANCH, config, on_append=bg.notifier(REPO, BRANCH)
        )

        def compacted(ref: Ref) -> None:
            woken.append(ref)
            writer.l1_changed()

        bg.watch(REPO, BRANCH, objects, on_compacted=compacted)
        try:
            model = await asyncio.wait_for(write_through_stalls(writer, 1500), 60)
            await writer.flush()
        finally:
            await writer.aclose()
            await bg.aclose()
        assert writer.stats.stalls > 0  # it did hit the hard bound...
        assert writer.stats.failed_batches == 0  # ...and every write went through
        assert woken and all(len(r.l1) < config.l1_hard_limit for r in woken)
        assert await branch_state(refstore, objects, REPO, BRANCH) == model


async def test_stalled_writer_resumes_with_the_worker_process(tmp_path: Path) -> None:
    config = stall_config()
    refs = tmp_path / "refs"
    env = {
        **os.environ,
        "LSMSTORE_HOME": str(tmp_path / "home"),
        "LSMSTORE_COMPACTION_L1_FILES": "4",
        "LSMSTORE_COMPACTION_JOB_FILES": "50",
    }
    async with EmbeddedRefStore(refs) as refstore:
        await setup_branch(refstore, f"file://{tmp_path}/data")
        objects = LocalStore(tmp_path / "data")
        worker = await WorkerProcess(
            "--refstore", f"local://{refs}", "--interval", "0.05", env=env
        ).start()
        try:
            writer = BranchWriter(refstore, objects, REPO, BRANCH, config)
            try:
                model = await asyncio.wait_for(write_through_stalls(writer, 1000), 90)
            finally:
                await writer.aclose()
        finally:
            assert worker.proc is not None
            worker.proc.terminate()
            code = await worker.wait(30)
        assert code == 0, worker.raw[-20:]
        assert writer.stats.stalls > 0 and writer.stats.failed_batches == 0
        assert any(d["outcome"] == "compacted" for d in worker.events("compaction"))
        assert await branch_state(refstore, objects, REPO, BRANCH) == model


class DictCache:
    """A FileCacheLike that keeps every parsed file (the client's cache is not needed)."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], object] = {}

    async def get(self, store: ObjectStore, key: str, parse: Any, *, kind: str = "") -> Any:
        k = (store.url, key)
        if k not in self.items:
            self.items[k] = parse(await store.get(key), key)
        return self.items[k]


@pytest.mark.parametrize("mode", ["auto", "off"])
async def test_a_lone_script_through_the_store(tmp_path: Path, mode: str) -> None:
    """The embedded default compacts in the client process: a script writing far more
    batches than the L1 hard bound allows never stalls for good."""
    from lsmstore.client import Store

    config = stall_config(home=tmp_path / "home", compaction_in_process=mode, stall_timeout_s=3)
    store = Store(config, cache=DictCache())
    try:
        repo = await store.create_repository("demo", storage_namespace=(tmp_path / "ns").as_uri())
        main = repo.branch()
        model: dict[bytes, bytes] = {}

        async def put(i: int) -> None:
            key, value = f"key{i:05d}", f"value-{i}".encode()
            await main.put(key, value)
            model[key.encode()] = value

        if mode == "off":  # nobody compacts: the writer stalls, then gives up
            with pytest.raises(WriteStalledError):
                for start in range(0, 400, 8):
                    await asyncio.gather(*(put(i) for i in range(start, start + 8)))
            return
        for start in range(0, 1200, 40):
            await asyncio.gather(*(put(i) for i in range(start, start + 40)))
        head = await main.head()
        # Compaction ran, and L1 never grew past the hard bound (reaching it is allowed:
        # the batch admitted just below it is appended).
        assert head.l2 and len(head.l1) <= config.l1_hard_limit
        assert main.writer_stats.failed_batches == 0
        for key in (b"key00000", b"key00599", b"key01199"):
            assert await main.get(key) == model[key]
        objects = LocalStore(tmp_path / "ns")
        assert await branch_state(store.refstore, objects, "demo", "main") == model
    finally:
        await store.aclose()


async def test_watch_and_unwatch(tmp_path: Path) -> None:
    config = stall_config(compaction_interval_s=0.01, compaction_l1_files=2)
    async with EmbeddedRefStore(tmp_path / "refs") as refstore:
        await setup_branch(refstore, f"file://{tmp_path}/data")
        objects = LocalStore(tmp_path / "data")
        writer = BranchWriter(refstore, objects, REPO, BRANCH, config)
        bg = BackgroundCompactor(refstore, config)
        seen: list[Ref] = []
        model: dict[bytes, bytes] = {}

        async def batches(n: int, tag: str) -> None:  # n L1 files, one after the other
            for i in range(n):
                recs = [(f"{tag}{i}-{j}".encode(), b"v%d" % j) for j in range(5)]
                await writer.write_many([Record(k, default_identity(v), v) for k, v in recs])
                model.update(recs)

        bg.watch(REPO, BRANCH, objects, on_compacted=seen.append)
        bg.watch(REPO, BRANCH, objects)  # again: still one loop
        try:
            await batches(5, "a")
            # The timer alone (no notifier) gets it compacted; the bound is only there
            # to end the test on a machine where that never happens.
            async with asyncio.timeout(120):
                for _ in itertools.count():
                    if seen and len((await refstore.get_ref(REPO, BRANCH)).l1) <= 2:
                        break
                    await asyncio.sleep(0.01)
            bg.unwatch(REPO, BRANCH)
            bg.unwatch(REPO, BRANCH)  # harmless
            await asyncio.sleep(0.05)
            before = len(seen)
            await batches(3, "b")  # stays under the hard bound (6): nobody compacts now
            await asyncio.sleep(0.2)
            assert len(seen) == before
            assert len((await refstore.get_ref(REPO, BRANCH)).l1) >= 3
        finally:
            await writer.aclose()
            await bg.aclose()
        assert await branch_state(refstore, objects, REPO, BRANCH) == model
