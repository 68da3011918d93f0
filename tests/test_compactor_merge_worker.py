"""A compaction job merged in the merge worker process: the same output files, byte for
byte, as merging on the event loop; nothing decoded in the job's own process; a corrupt
input, a dead worker and a worker that cannot start each cost one job at most."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lsmstore import layout
from lsmstore.compaction import job as job_module
from lsmstore.compaction.job import CompactionJob, JobResult
from lsmstore.compaction.merge_worker import MergeWorker
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.refstore.base import RefStore
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.compaction import (
    BRANCH,
    REPO,
    append_l1_file,
    branch_state,
    check_l2,
    gc_records,
    make_config,
    rec,
    setup_branch,
    staged_files,
)
from lsmstore.testing.faulty_store import FaultyStore


@pytest.fixture
async def refstore(tmp_path: Path) -> AsyncIterator[RefStore]:
    async with EmbeddedRefStore(tmp_path / "refs") as rs:
        yield await setup_branch(rs)


@pytest.fixture
def objects() -> FaultyStore:
    return FaultyStore(MemoryStore())


@pytest.fixture
async def merger() -> AsyncIterator[MergeWorker]:
    m = MergeWorker()
    try:
        yield m
    finally:
        await m.aclose()


CFG = make_config(compaction_l2_file_bytes=3000)


def job(
    refstore: RefStore, objects: FaultyStore, merger: MergeWorker | None, **kw: Any
) -> CompactionJob:
    return CompactionJob(refstore, objects, REPO, BRANCH, CFG, merger=merger, **kw)


async def staged_state(
    refstore: RefStore, objects: FaultyStore, rng: random.Random, model: dict[bytes, bytes]
) -> None:
    """An L2 of many files (a bulk load, compacted), then random L1 files over part of
    its key range: a job reads some L2 files, keeps others by id and writes several."""
    for i in range(12):
        recs = [rec(f"key{i:02d}{j:03d}", rng.randbytes(40)) for j in range(40)]
        await append_l1_file(refstore, objects, REPO, BRANCH, recs)
        model.update({r.key: r.value for r in recs if r.value is not None})
    assert (await job(refstore, objects, None).run()).outcome == "compacted"
    for _ in range(5):
        batch = {}
        for _ in range(30):
            k = f"key{rng.randrange(3, 7):02d}{rng.randrange(60):03d}".encode()
            batch[k] = rec(k, None) if rng.random() < 0.3 else rec(k, rng.randbytes(50))
        await append_l1_file(refstore, objects, REPO, BRANCH, list(batch.values()))
        for k, r in batch.items():
            if r.value is None:
                model.pop(k, None)
            else:
                model[k] = r.value


class Captured(Exception):
    pass


async def outputs_of(
    refstore: RefStore, objects: FaultyStore, merger: MergeWorker | None
) -> tuple[JobResult, dict[str, bytes]]:
    """Run a job with a fixed clock and fixed random bits; capture its output files'
    bytes once uploaded, then make it fail before its swap (nothing changes)."""
    seq = itertools.count(1)
    files: dict[str, bytes] = {}

    async def capture(step: str, j: CompactionJob) -> None:
        if step == "after_upload":
            for fid in j.result.new_files:
                for suffix in (".sst", ".meta"):
                    key = layout.staging_key(BRANCH, "L2", fid, suffix)
                    files[key] = await objects.get(key)
            raise Captured

    before = await refstore.get_ref(REPO, BRANCH)
    stored = await staged_files(objects, BRANCH)
    result = await job(
        refstore,
        objects,
        merger,
        clock=lambda: 1_700_000_000.0,
        randbits=lambda bits: next(seq),
        step=capture,
    ).run()
    assert result.outcome == "failed" and "Captured" in result.error
    assert await refstore.get_ref(REPO, BRANCH) == before
    assert await staged_files(objects, BRANCH) == stored  # its outputs were deleted
    return result, files


async def test_same_output_files_as_merging_on_the_loop(
    refstore: RefStore, objects: FaultyStore, merger: MergeWorker
) -> None:
    model: dict[bytes, bytes] = {}
    await staged_state(refstore, objects, random.Random(5), model)
    here, here_files = await outputs_of(refstore, objects, None)
    there, there_files = await outputs_of(refstore, objects, merger)
    assert merger.jobs == 1
    assert here.files_out > 2 and here.l2_reused > 0 and here.l2_read > 0
    for name in ("files_out", "l2_read", "l2_reused", "records_in", "records_out", "bytes_in"):
        assert getattr(there, name) == getattr(here, name), name
    assert there.new_files == here.new_files
    # SST bytes carry RocksDB's session id; their records and the sidecars are equal
    assert there_files.keys() == here_files.keys()
    for key, data in here_files.items():
        if key.endswith(".meta"):
            assert there_files[key] == data
        else:
            assert list(SSTReader(there_files[key], key)) == list(SSTReader(data, key))
    # and run for real, it compacts to the model
    assert (await job(refstore, objects, merger).run()).outcome == "compacted"
    ref = await refstore.get_ref(REPO, BRANCH)
    await check_l2(objects, BRANCH, ref)
    assert await branch_state(refstore, objects, REPO, BRANCH) == model


async def test_nothing_is_decoded_in_the_jobs_process(
    refstore: RefStore,
    objects: FaultyStore,
    merger: MergeWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model: dict[bytes, bytes] = {}
    await staged_state(refstore, objects, random.Random(6), model)

    def no_decoding(*args: object, **kw: object) -> None:
        raise AssertionError("an SST was decoded on the event loop")

    monkeypatch.setattr(job_module, "SSTReader", no_decoding)
    monkeypatch.setattr(job_module, "encode_staging_file", no_decoding)
    result = await job(refstore, objects, merger).run()
    assert result.outcome == "compacted", result.error
    assert result.l2_read > 0 and result.files_out > 1
    assert await branch_state(refstore, objects, REPO, BRANCH) == model


async def test_corrupt_input_fails_the_job_and_the_worker_serves_the_next(
    refstore: RefStore, objects: FaultyStore, merger: MergeWorker
) -> None:
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("a", "1")])
    good = await refstore.get_ref(REPO, BRANCH)
    key = layout.staging_key(BRANCH, "L1", good.l1[0], ".sst")
    data = await objects.get(key)
    await objects.delete(key)
    await objects.put(key, data[:-20] + bytes(20))  # a damaged footer
    result = await job(refstore, objects, merger).run()
    assert result.outcome == "failed" and "CorruptFileError" in result.error, result
    assert key in result.error
    assert await refstore.get_ref(REPO, BRANCH) == good
    assert await gc_records(objects) == []
    # the worker stayed in step: the next job (the file repaired) uses it
    await objects.delete(key)
    await objects.put(key, data)
    assert (await job(refstore, objects, merger).run()).outcome == "compacted"
    assert merger.restarts == 1 and merger.jobs == 2
    assert await branch_state(refstore, objects, REPO, BRANCH) == {b"a": b"1"}


async def test_a_worker_killed_mid_job_fails_only_that_job(
    refstore: RefStore, objects: FaultyStore, merger: MergeWorker
) -> None:
    model: dict[bytes, bytes] = {}
    await staged_state(refstore, objects, random.Random(7), model)
    before = await refstore.get_ref(REPO, BRANCH)
    stored = await staged_files(objects, BRANCH)
    records = await gc_records(objects)
    killed: list[int] = []

    def kill_worker(key: str) -> bool:  # the worker asked for an L2 file and waits
        if not killed and key.endswith(".sst") and merger.pid is not None:
            killed.append(merger.pid)
            os.kill(merger.pid, signal.SIGKILL)
        return False

    objects.fail("get", prefix=f"_lsm/staging/{BRANCH}/L2/", match=kill_worker, times=None)
    result = await job(refstore, objects, merger).run()
    assert killed
    assert result.outcome == "failed" and "merge worker died" in result.error, result
    assert await refstore.get_ref(REPO, BRANCH) == before
    assert await staged_files(objects, BRANCH) == stored
    assert await gc_records(objects) == records
    # the next job starts a new worker
    assert (await job(refstore, objects, merger).run()).outcome == "compacted"
    assert merger.restarts == 2 and merger.pid not in killed
    assert await branch_state(refstore, objects, REPO, BRANCH) == model


async def test_a_worker_that_cannot_start_leaves_the_merge_on_the_loop(
    refstore: RefStore,
    objects: FaultyStore,
    merger: MergeWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model: dict[bytes, bytes] = {}
    await staged_state(refstore, objects, random.Random(8), model)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    results = [await job(refstore, objects, merger).run()]
    assert results[0].outcome == "compacted", results[0].error
    assert merger.pid is None
    for i in range(4):  # it stops trying after MAX_RESTARTS
        await append_l1_file(refstore, objects, REPO, BRANCH, [rec(f"x{i}", "v")])
        model[f"x{i}".encode()] = b"v"
        results.append(await job(refstore, objects, merger).run())
    assert [r.outcome for r in results] == ["compacted"] * 5
    assert merger.restarts == 3 and not merger.available
    assert await branch_state(refstore, objects, REPO, BRANCH) == model


ROOT = str(Path(__file__).resolve().parent.parent)
CLIENT = r"""
import asyncio, sys
from lsmstore.compaction.merge_plan import L2Input
from lsmstore.compaction.merge_worker import MergeWorker
from lsmstore.testing.compaction import rec
from lsmstore.staging.files import encode_staging_file

async def main() -> None:
    sst, _, _ = encode_staging_file([rec("a", "1"), rec("c", "3")], 0.01)
    worker = MergeWorker()

    async def fetch(i: int) -> tuple[str, bytes]:
        print(worker.pid, flush=True)  # the worker waits for this L2 file...
        await asyncio.Event().wait()  # ...forever: the test kills this process now
        raise AssertionError

    async def ignore(*args: object) -> None:
        pass

    await worker.run(
        [("l1", sst)], [L2Input(b"b", b"b", 10_000)], 1 << 20, 0.01,
        fetch=fetch, on_file=ignore, on_reuse=ignore,
    )

asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:\tZ") for line in f)
    except FileNotFoundError:
        return False


async def test_the_worker_exits_with_a_client_killed_mid_job(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLIENT,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    worker_pid = int(line)
    assert _alive(worker_pid)
    proc.kill()  # kill -9 the client in the middle of a job
    await proc.wait()
    for _ in range(600):  # its stdin closed: the worker exits (within 30 s at most)
        if not _alive(worker_pid):
            break
        await asyncio.sleep(0.05)
    assert not _alive(worker_pid), "the merge worker outlived its client"
