"""Backpressure from the branch's L1 length: slow down past the soft limit, stall at the
hard limit until compaction shortens the list, WriteStalledError after the timeout."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers.staging import BRANCH, REPO, embedded_refstore, l1_files, rec

from lsmstore import layout
from lsmstore.config import Config
from lsmstore.errors import RefNotFoundError, WriteStalledError
from lsmstore.refstore.base import RefStore
from lsmstore.staging.files import encode_staging_file, new_file_id
from lsmstore.staging.merge import merge_newest
from lsmstore.staging.writer import BranchWriter
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.storage.memory import MemoryStore


async def compact_all(rs: RefStore, objects: ObjectStore) -> str:
    """Merge every L1 file into one L2 file and swap it in (what the compactor does)."""
    ref = await rs.get_ref(REPO, BRANCH)
    files = await l1_files(rs, objects)
    merged = list(merge_newest(files[::-1]))  # newest first
    sst, meta, _ = encode_staging_file(merged, 0.01)
    fid = new_file_id()
    await objects.put(layout.staging_key(BRANCH, "L2", fid, ".meta"), meta)
    await objects.put(layout.staging_key(BRANCH, "L2", fid), sst)
    await rs.swap_compacted(
        REPO, BRANCH, base=ref.base, l2_old=ref.l2, l1_prefix=ref.l1, l2_new=[fid]
    )
    return fid


async def test_stall_at_hard_limit_then_resume_after_compaction(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    c = Config(home=tmp_path).replace(
        batch_interval_ms=1, l1_soft_limit=1, l1_hard_limit=2, l1_slowdown_ms=0, stall_timeout_s=1
    )
    w = BranchWriter(rs, objects, REPO, BRANCH, c)
    await w.write(rec("a", b"1"))
    await w.write(rec("b", b"2"))
    assert w.stats.l1_length == 2
    with pytest.raises(WriteStalledError, match="hard limit 2"):
        await w.write(rec("c", b"3"))
    assert len((await rs.get_ref(REPO, BRANCH)).l1) == 2  # the stalled write staged nothing

    # resumes by polling the ref once another process compacts
    d = asyncio.create_task(w.write(rec("d", b"4")))
    await w.stalled.wait()
    assert not d.done()
    await compact_all(rs, objects)
    await asyncio.wait_for(d, 5)
    ref = await rs.get_ref(REPO, BRANCH)
    assert len(ref.l2) == 1 and len(ref.l1) == 1

    # ...and at once when told (an in-process compaction calls l1_changed)
    await w.write(rec("e", b"5"))
    f = asyncio.create_task(w.write(rec("f", b"6")))
    await w.stalled.wait()
    await compact_all(rs, objects)
    w.l1_changed()
    await asyncio.wait_for(f, 5)
    await w.aclose()
    await rs.aclose()


async def test_soft_limit_stretches_the_batching_window(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    c = Config(home=tmp_path).replace(
        batch_interval_ms=1, l1_soft_limit=1, l1_hard_limit=100, l1_slowdown_ms=150
    )
    w = BranchWriter(rs, objects, REPO, BRANCH, c)
    for i in range(3):
        await w.write(rec(f"k{i}", b"v"))
    assert w._window() == pytest.approx((1 + 150 * 2) / 1000)
    previous_seal = w._last_seal
    await w.write(rec("slow", b"v"))
    assert w._last_seal - previous_seal >= 0.3  # the batch closed a stretched window later
    assert len(await l1_files(rs, objects)) == 4
    await w.aclose()
    await rs.aclose()


class _GatedStore(MemoryStore):
    """Holds every put until ``gate`` is set: uploads stay in flight as long as a test
    needs."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        await self.gate.wait()
        await super().put(key, data, mode)


async def test_batches_in_flight_count_toward_the_hard_limit(tmp_path: Path) -> None:
    """With several batches in flight, each admitted batch is one more L1 file: the
    writer admits no more than the hard limit allows, even before any append returns."""
    rs = await embedded_refstore(tmp_path)
    objects = _GatedStore()
    c = Config(home=tmp_path).replace(
        batch_interval_ms=1,
        batch_max_records=1,  # one write, one batch
        max_inflight_batches=8,
        l1_soft_limit=1,
        l1_hard_limit=3,
        l1_slowdown_ms=0,
        stall_timeout_s=1,
    )
    w = BranchWriter(rs, objects, REPO, BRANCH, c)
    writes = [asyncio.create_task(w.write(rec(k, b"v"))) for k in "abcd"]
    # The fourth batch stalls: three are in flight, none appended yet.  (Without the
    # in-flight count all four would be admitted and nothing would ever stall: the
    # bound turns that regression into a failure instead of a hang.)
    await asyncio.wait_for(w.stalled.wait(), 30)
    objects.gate.set()
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert [r for r in results if r is not None and not isinstance(r, WriteStalledError)] == []
    assert sum(r is None for r in results) == 3
    assert len((await rs.get_ref(REPO, BRANCH)).l1) == 3
    await w.aclose()


async def test_branch_deleted_while_stalled_fails_the_stalled_writes(tmp_path: Path) -> None:
    """The branch goes away (another process deletes it) while the writer waits at the
    hard limit: the stalled writes fail with RefNotFoundError, the owner hears of it,
    and the writer keeps answering (it does not die with the error)."""
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    c = Config(home=tmp_path).replace(
        batch_interval_ms=1, l1_soft_limit=1, l1_hard_limit=2, l1_slowdown_ms=0,
        stall_timeout_s=3600,  # only the deletion can end the stall
    )  # fmt: skip
    gone: list[BranchWriter] = []
    w = BranchWriter(rs, objects, REPO, BRANCH, c, on_gone=gone.append)
    await w.write(rec("a", b"1"))
    await w.write(rec("b", b"2"))
    stalled = asyncio.create_task(w.write(rec("c", b"3")))
    await asyncio.wait_for(w.stalled.wait(), 60)
    await rs.delete_ref(REPO, BRANCH, await rs.get_ref(REPO, BRANCH))
    w.l1_changed()  # (also found by the next poll of the ref)
    with pytest.raises(RefNotFoundError):
        await asyncio.wait_for(stalled, 60)
    assert gone == [w]
    assert not w._runner.done()  # the flusher lives on
    # a later write gets the same typed answer, and closing settles everything
    with pytest.raises(RefNotFoundError):
        await asyncio.wait_for(w.write(rec("d", b"4")), 60)
    await asyncio.wait_for(w.aclose(), 60)
    await rs.aclose()


async def test_store_stays_usable_after_a_stalled_branch_is_deleted(tmp_path: Path) -> None:
    import lsmstore

    async with lsmstore.connect(
        home=str(tmp_path / "home"), batch_interval_ms=1, l1_soft_limit=1, l1_hard_limit=2,
        l1_slowdown_ms=0, stall_timeout_s=3600, compaction_in_process="off",
    ) as store:  # fmt: skip
        assert isinstance(store, lsmstore.Store)
        repo = await store.create_repository("stall", storage_namespace=(tmp_path / "ns").as_uri())
        dev = await repo.create_branch("dev", source="main")
        await dev.put("a", b"1")
        await dev.put("b", b"2")
        pending = asyncio.create_task(dev.put("c", b"3"))
        await asyncio.wait_for(dev.writer().stalled.wait(), 60)
        # deleted by another process: straight in the RefStore
        rs = store.refstore
        await rs.delete_ref("stall", "dev", await rs.get_ref("stall", "dev"))
        store.notify_l1_changed("stall", "dev")
        with pytest.raises(RefNotFoundError):
            await asyncio.wait_for(pending, 60)
        # the store carries on: other branches, and the branch made again
        await repo.branch("main").put("m", b"1")
        dev = await repo.create_branch("dev", source="main")
        await asyncio.wait_for(dev.put("x", b"1"), 60)
        assert await dev.get("x") == b"1" and await repo.branch("main").get("m") == b"1"
        assert not await dev.exists("a")
