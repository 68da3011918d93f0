"""GC records and the sweep: replaced files go after the grace period, crashes leave
nothing forever, referenced and young files are never touched."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lsmstore import layout
from lsmstore.compaction.job import CompactionJob
from lsmstore.errors import CorruptFileError
from lsmstore.gc import staging as garbage
from lsmstore.gc.staging import Sweeper
from lsmstore.refstore.base import Ref, RefStore
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.files import encode_staging_file, new_file_id
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.compaction import (
    BRANCH,
    REPO,
    append_l1_file,
    branch_state,
    gc_records,
    make_config,
    rec,
    referenced,
    setup_branch,
    staged_files,
)
from lsmstore.testing.faulty_store import FaultyStore

GRACE = 60.0


@pytest.fixture
async def refstore(tmp_path: Path) -> AsyncIterator[RefStore]:
    async with EmbeddedRefStore(tmp_path / "refs") as rs:
        yield await setup_branch(rs)


@pytest.fixture
def objects() -> FaultyStore:
    return FaultyStore(MemoryStore())


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


async def compact(refstore: RefStore, objects: FaultyStore) -> None:
    cfg = make_config(compaction_l2_file_bytes=512, compaction_grace_s=GRACE)
    result = await CompactionJob(refstore, objects, REPO, BRANCH, cfg).run()
    assert result.outcome == "compacted", result


async def some_writes(refstore: RefStore, objects: FaultyStore, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        recs = [rec(f"k{rng.randrange(100):03d}", rng.randbytes(20)) for _ in range(10)]
        await append_l1_file(refstore, objects, REPO, BRANCH, recs)


async def upload_unappended(objects: FaultyStore, *, level: str = "L1", age: float = 0) -> str:
    """An L1/L2 file uploaded but never referenced (a crash before its append/swap)."""
    sst, meta, _ = encode_staging_file([rec("orphan", "x")], 0.01)
    fid = new_file_id(lambda: time.time() - age)
    lvl: layout.Level = "L1" if level == "L1" else "L2"
    await objects.put(layout.staging_key(BRANCH, lvl, fid, ".meta"), meta)
    await objects.put(layout.staging_key(BRANCH, lvl, fid, ".sst"), sst)
    return fid


def test_records_round_trip_and_reject_garbage() -> None:
    intent = garbage.intent_record(
        REPO, BRANCH, base="", l1_prefix=["a1"], l2_old=["b1", "b2"], l2_new=["b2", "c1"], now=5
    )
    assert intent.files == (("L1", "a1"), ("L2", "b1"), ("L2", "b2"), ("L2", "c1"))
    assert garbage.decode_record(intent.encode(), "x") == intent
    g = garbage.garbage_record(REPO, BRANCH, [("L1", "a1")], now=1, due=2.5, reason="test")
    assert garbage.decode_record(g.encode(), "x") == g
    assert g.due_ms == 2500
    for bad in (
        b"not json",
        b"[]",
        json.dumps({"format": "other"}).encode(),
        g.encode().replace(b'"L1"', b'"L3"'),
        g.encode().replace(b'"a1"', b'"../x"'),
        g.encode().replace(b'"version":1', b'"version":9'),
        intent.encode().replace(b'"main"', b'"a/b"'),
    ):
        with pytest.raises(CorruptFileError, match="name-of-it"):
            garbage.decode_record(bad, "name-of-it")


async def test_replaced_files_go_after_the_grace_period(
    refstore: RefStore, objects: FaultyStore
) -> None:
    await some_writes(refstore, objects, 5)
    model = await branch_state(refstore, objects, REPO, BRANCH)
    before = await refstore.get_ref(REPO, BRANCH)
    await compact(refstore, objects)
    await some_writes(refstore, objects, 3, seed=1)
    await compact(refstore, objects)
    model = await branch_state(refstore, objects, REPO, BRANCH)
    ref = await refstore.get_ref(REPO, BRANCH)
    replaced = referenced(before) | await staged_files(objects) - referenced(ref)
    assert replaced - referenced(ref)
    clock = Clock()
    sweeper = Sweeper(GRACE, clock=clock)
    result = await sweeper.sweep(refstore, REPO, objects)
    assert result.deleted_files == 0 and result.marked == 0
    clock.offset = GRACE + 1
    result = await sweeper.sweep(refstore, REPO, objects)
    assert await staged_files(objects) == referenced(ref)  # exactly what the ref holds
    assert result.deleted_files == len(replaced - referenced(ref))
    assert result.deleted_bytes > 0
    assert await gc_records(objects) == []
    assert await branch_state(refstore, objects, REPO, BRANCH) == model
    # nothing more to do
    again = await sweeper.sweep(refstore, REPO, objects)
    assert (again.deleted_files, again.marked, again.records) == (0, 0, 0)


async def test_orphans_are_marked_then_deleted(refstore: RefStore, objects: FaultyStore) -> None:
    await some_writes(refstore, objects, 2)
    ref = await refstore.get_ref(REPO, BRANCH)
    young = await upload_unappended(objects)
    old = await upload_unappended(objects, age=GRACE + 5)
    old_l2 = await upload_unappended(objects, level="L2", age=GRACE + 5)
    clock = Clock()
    sweeper = Sweeper(GRACE, clock=clock)
    result = await sweeper.sweep(refstore, REPO, objects)
    # young: a writer may be about to append it; old: recorded, not yet deleted
    assert result.orphans == result.marked == 2 and result.deleted_files == 0
    assert ("L1", young) in await staged_files(objects)
    clock.offset = GRACE + 1
    result = await sweeper.sweep(refstore, REPO, objects)
    # the two marked go; young is now old enough to be marked
    assert (result.deleted_files, result.marked) == (2, 1)
    present = await staged_files(objects)
    assert ("L1", old) not in present and ("L2", old_l2) not in present
    assert ("L1", young) in present
    clock.offset = 2 * GRACE + 2
    await sweeper.sweep(refstore, REPO, objects)
    assert await staged_files(objects) == referenced(ref)
    assert await gc_records(objects) == []


async def test_a_half_written_file_is_collected(refstore: RefStore, objects: FaultyStore) -> None:
    fid = await upload_unappended(objects, age=GRACE + 5)
    await objects.delete(layout.staging_key(BRANCH, "L1", fid, ".sst"))  # only the sidecar
    clock = Clock()
    sweeper = Sweeper(GRACE, clock=clock)
    await sweeper.sweep(refstore, REPO, objects)
    clock.offset = GRACE + 1
    await sweeper.sweep(refstore, REPO, objects)
    assert [m.key async for m in objects.list("_lsm/")] == ["_lsm/owner.json"]


async def test_intents_wait_for_their_job_then_resolve(
    refstore: RefStore, objects: FaultyStore
) -> None:
    await some_writes(refstore, objects, 2)
    ref = await refstore.get_ref(REPO, BRANCH)
    out = await upload_unappended(objects, level="L2", age=5)
    intent = garbage.intent_record(
        REPO, BRANCH, base="", l1_prefix=ref.l1, l2_old=(), l2_new=[out], now=time.time()
    )
    await garbage.write_record(objects, intent)
    clock = Clock()
    sweeper = Sweeper(GRACE, clock=clock)
    clock.offset = GRACE / 2  # the job may still be running: not even an orphan
    r = await sweeper.sweep(refstore, REPO, objects)
    assert (r.intents_resolved, r.marked, r.orphans) == (0, 0, 0)
    clock.offset = GRACE + 1  # dead job: its unreferenced output becomes garbage
    r = await sweeper.sweep(refstore, REPO, objects)
    assert (r.intents_resolved, r.marked, r.orphans) == (1, 1, 0)
    clock.offset = 2 * GRACE + 2
    await sweeper.sweep(refstore, REPO, objects)
    assert await staged_files(objects) == referenced(ref)  # inputs still referenced: kept
    assert await gc_records(objects) == []


async def test_referenced_files_are_never_deleted(refstore: RefStore, objects: FaultyStore) -> None:
    await some_writes(refstore, objects, 3)
    ref = await refstore.get_ref(REPO, BRANCH)
    model = await branch_state(refstore, objects, REPO, BRANCH)
    # a bogus record naming the branch's live files, long due
    key = await garbage.record_garbage(
        objects, REPO, BRANCH, [("L1", f) for f in ref.l1], grace_s=-1000, reason="bogus"
    )
    assert key is not None
    clock = Clock()
    clock.offset = 10 * GRACE
    r = await Sweeper(GRACE, clock=clock).sweep(refstore, REPO, objects)
    assert r.deleted_files == 0 and r.deleted_records == 1
    assert await branch_state(refstore, objects, REPO, BRANCH) == model


async def test_files_of_a_deleted_branch_are_collected(
    refstore: RefStore, objects: FaultyStore
) -> None:
    await refstore.create_ref(REPO, "gone", Ref("branch", ""))
    sst, meta, _ = encode_staging_file([rec("a", "1")], 0.01)
    fid = new_file_id()
    await objects.put(layout.staging_key("gone", "L1", fid, ".sst"), sst)
    await objects.put(layout.staging_key("gone", "L1", fid, ".meta"), meta)
    await refstore.append_l1(REPO, "gone", fid)
    await refstore.delete_ref(REPO, "gone", await refstore.get_ref(REPO, "gone"))
    clock = Clock()
    sweeper = Sweeper(GRACE, clock=clock)
    clock.offset = GRACE + 1
    await sweeper.sweep(refstore, REPO, objects)
    clock.offset = 2 * GRACE + 2
    await sweeper.sweep(refstore, REPO, objects)
    assert await staged_files(objects, "gone") == set()


async def test_a_corrupt_record_is_skipped(refstore: RefStore, objects: FaultyStore) -> None:
    await objects.put("_lsm/gc/main/0000000000000aaaaaaaaaaaaaaaa.garbage", b"{broken")
    old = await upload_unappended(objects, age=GRACE + 5)
    r = await Sweeper(GRACE, clock=Clock()).sweep(refstore, REPO, objects)
    assert r.corrupt_records == 1 and r.orphans == 1
    assert ("L1", old) in await staged_files(objects)


async def test_one_branch_sweep_and_store_failures(
    refstore: RefStore, objects: FaultyStore
) -> None:
    await refstore.create_ref(REPO, "other", Ref("branch", ""))
    mine = await upload_unappended(objects, age=3 * GRACE)
    sst, _meta, _ = encode_staging_file([rec("a", "1")], 0.01)
    theirs = new_file_id(lambda: time.time() - 3 * GRACE)
    await objects.put(layout.staging_key("other", "L1", theirs, ".sst"), sst)
    clock = Clock()
    sweeper = Sweeper(GRACE, clock=clock)
    r = await sweeper.sweep(refstore, REPO, objects, branch=BRANCH)
    assert r.branches == 1 and r.marked == 1
    clock.offset = GRACE + 1
    objects.fail("delete", times=None, prefix="_lsm/staging/")
    r = await sweeper.sweep(refstore, REPO, objects, branch=BRANCH)
    assert r.errors and r.deleted_files == 0  # reported, record kept for the next sweep
    objects.clear()
    r = await sweeper.sweep(refstore, REPO, objects, branch=BRANCH)
    assert r.deleted_files == 1
    assert ("L1", mine) not in await staged_files(objects)
    assert ("L1", theirs) in await staged_files(objects, "other")


async def test_a_record_handled_during_the_sweep_is_skipped(
    refstore: RefStore, objects: FaultyStore
) -> None:
    key = await garbage.record_garbage(
        objects, REPO, BRANCH, [("L1", new_file_id())], grace_s=GRACE, reason="test"
    )
    assert key is not None
    gate = objects.hold("get", prefix="_lsm/gc/")
    sweep = asyncio.create_task(Sweeper(GRACE, clock=Clock()).sweep(refstore, REPO, objects))
    await asyncio.wait_for(gate.entered.wait(), 10)
    await objects.inner.delete(key)  # e.g. its job finished and removed it
    gate.release()
    result = await sweep
    assert result.records == 0 and not result.errors
