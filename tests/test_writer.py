"""The branch writer: batching by time and size, append order, acks, memory bound, close."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.counted_store import CountedPuts
from helpers.staging import BRANCH, REPO, embedded_refstore, l1_files, rec

from lsmstore.config import Config
from lsmstore.errors import ClosedError, EntryTooLargeError, UnavailableError
from lsmstore.refstore.base import Ref, Repository
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.writer import BranchWriter
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore


def cfg(tmp_path: Path, **kw: object) -> Config:
    return Config(home=tmp_path).replace(**kw)


async def test_concurrent_puts_share_one_batch(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, batch_interval_ms=20))
    await asyncio.gather(*(w.write(rec(f"k{i:03}", b"v%d" % i)) for i in range(200)))
    files = await l1_files(rs, objects)
    assert len(files) == 1
    assert [r.key for r in files[0]] == [b"k%03d" % i for i in range(200)]
    assert w.stats.batches == 1 and w.stats.records == 200 and w.stats.l1_length == 1
    await w.aclose()
    await rs.aclose()


async def test_batch_closes_by_time(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, batch_interval_ms=30))
    # nothing but the window closes the batch: one put is acknowledged on its own
    await asyncio.wait_for(w.write(rec("a", b"1")), 5)
    await asyncio.wait_for(w.write(rec("b", b"2")), 5)
    assert [[r.key for r in f] for f in await l1_files(rs, objects)] == [[b"a"], [b"b"]]
    await w.aclose()
    await rs.aclose()


async def test_window_stretches_while_many_writes_wait(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    c = cfg(tmp_path, batch_interval_ms=10, batch_interval_max_ms=40)
    w = BranchWriter(rs, objects, REPO, BRANCH, c)
    rs_off = await embedded_refstore(tmp_path / "off")
    # the default configuration never stretches
    off = BranchWriter(rs_off, MemoryStore(), REPO, BRANCH, cfg(tmp_path, batch_interval_ms=10))
    assert w._window() == pytest.approx(0.010)
    # staged without awaiting: all of them wait for acknowledgement at once
    futs = [w.try_stage(rec(f"k{i:03}", b"v")) for i in range(64)]
    assert w._window() == pytest.approx(0.010)  # up to 64 waiting: the short window
    futs += [w.try_stage(rec(f"l{i:03}", b"v")) for i in range(64)]
    assert w._window() == pytest.approx(0.020)  # 128 waiting: 10 ms x 128 / 64
    futs += [w.try_stage(rec(f"m{i:03}", b"v")) for i in range(400)]
    assert w._window() == pytest.approx(0.040)  # bounded by batch_interval_max_ms
    others = [off.try_stage(rec(f"k{i:03}", b"v")) for i in range(528)]
    assert off._window() == pytest.approx(0.010)  # max = interval: never stretched
    await asyncio.gather(*futs, *others)
    assert w._window() == pytest.approx(0.010)  # acknowledged: the short window again
    assert sum(len(f) for f in await l1_files(rs, objects)) == 528
    await w.aclose()
    await off.aclose()
    await rs.aclose()
    await rs_off.aclose()


async def test_batch_closes_by_size_not_before(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    # a window far longer than the test: only the record bound can close a batch
    w = BranchWriter(
        rs, objects, REPO, BRANCH, cfg(tmp_path, batch_interval_ms=600_000, batch_max_records=5)
    )
    first = [asyncio.create_task(w.write(rec(f"k{i}", b"x"))) for i in range(4)]
    await asyncio.sleep(0.05)  # give the writer every chance to (wrongly) flush
    assert not any(t.done() for t in first)
    assert await l1_files(rs, objects) == []
    await w.write(rec("k4", b"x"))  # the fifth record fills the batch
    await asyncio.gather(*first)
    assert [len(f) for f in await l1_files(rs, objects)] == [5]
    # and by bytes
    w2 = BranchWriter(
        rs, objects, REPO, BRANCH, cfg(tmp_path, batch_interval_ms=600_000, batch_max_bytes=1000)
    )
    await asyncio.gather(*(w2.write(rec(f"b{i}", b"x" * 300)) for i in range(3)))
    assert [len(f) for f in await l1_files(rs, objects)] == [5, 3]
    await w.aclose()
    await w2.aclose()
    await rs.aclose()


async def test_many_batches_in_flight_append_in_order(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = FaultyStore(MemoryStore())
    w = BranchWriter(
        rs,
        objects,
        REPO,
        BRANCH,
        cfg(tmp_path, batch_interval_ms=600_000, batch_max_records=1, max_inflight_batches=4),
    )
    # hold the first batch's SST upload: the second batch uploads, but must not append first
    gate = objects.hold("put", match=lambda k: k.endswith(".sst"))
    t1 = asyncio.create_task(w.write(rec("same", b"first")))
    await gate.entered.wait()
    t2 = asyncio.create_task(w.write(rec("same", b"second")))
    done, _ = await asyncio.wait({t2}, timeout=0.2)  # batch 2 uploads meanwhile...
    assert objects.count("put", prefix="_lsm/staging/") == 4
    assert not done, "batch 2 acknowledged before batch 1"  # ...but waits for its turn
    assert (await rs.get_ref(REPO, BRANCH)).l1 == ()
    gate.release()
    await asyncio.gather(t1, t2)
    files = await l1_files(rs, objects)
    assert [f[0].value for f in files] == [b"first", b"second"]  # newest last
    await w.aclose()
    await rs.aclose()


async def test_put_many_is_one_batch_and_latest_wins(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, batch_max_records=10))
    records = [rec(f"k{i:04}", b"v") for i in range(1000)] + [rec("k0000", b"last")]
    await w.write_many(records)
    files = await l1_files(rs, objects)
    assert len(files) == 1 and len(files[0]) == 1000
    assert files[0][0].value == b"last"
    with pytest.raises(EntryTooLargeError, match="max_pending_bytes"):
        small = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, max_pending_bytes="17MiB"))
        await small.write_many([rec(f"big{i}", b"x" * (1 << 20)) for i in range(20)])
    await small.aclose()
    assert len(await l1_files(rs, objects)) == 1
    await w.aclose()
    await rs.aclose()


async def test_memory_bound_makes_puts_wait_for_room(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = FaultyStore(MemoryStore())
    c = cfg(tmp_path, max_value_bytes=1000, max_pending_bytes=5000, batch_interval_ms=1)
    w = BranchWriter(rs, objects, REPO, BRANCH, c)
    gate = objects.hold("put", times=None)
    first = [asyncio.create_task(w.write(rec(f"a{i}", b"x" * 1000))) for i in range(4)]
    await gate.entered.wait()
    later = asyncio.create_task(w.write(rec("b", b"x" * 1000)))
    await asyncio.sleep(0.05)
    assert w._pending_bytes <= c.max_pending_bytes
    assert not later.done() and w._room, "the fifth put should wait for room"
    gate.release()
    objects.clear()
    await asyncio.gather(*first, later)
    assert sum(len(f) for f in await l1_files(rs, objects)) == 5
    assert w._pending_bytes == 0
    await w.aclose()
    await rs.aclose()


async def test_close_flushes_everything_then_refuses(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, batch_interval_ms=600_000))
    pending = [asyncio.create_task(w.write(rec(f"k{i}", b"v"))) for i in range(50)]
    await asyncio.sleep(0)
    await w.aclose()
    await asyncio.gather(*pending)  # all acknowledged by the close
    assert sum(len(f) for f in await l1_files(rs, objects)) == 50
    with pytest.raises(ClosedError):
        await w.write(rec("late", b"v"))
    with pytest.raises(ClosedError):
        await w.stage_sst(b"x")
    await w.aclose()  # idempotent
    await rs.aclose()


async def test_flush_waits_for_staged_writes(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, batch_interval_ms=600_000))
    t = asyncio.create_task(w.write(rec("k", b"v")))
    await asyncio.sleep(0)
    await w.flush()
    assert t.done() and t.exception() is None
    await w.flush()  # nothing pending
    await w.aclose()
    await rs.aclose()


async def test_cancelled_put_does_not_cancel_its_batch(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, batch_interval_ms=50))
    a = asyncio.create_task(w.write(rec("a", b"1")))
    b = asyncio.create_task(w.write(rec("b", b"2")))
    await asyncio.sleep(0.01)
    a.cancel()
    await b  # the other write of the batch is still acknowledged
    files = await l1_files(rs, objects)
    assert [r.key for r in files[0]] == [b"a", b"b"]  # a cancelled write may still land
    await w.aclose()
    await rs.aclose()


async def test_in_flight_depth_follows_the_flush_time(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = FaultyStore(MemoryStore())
    c = cfg(tmp_path, batch_interval_ms=10, batch_max_records=1)
    w = BranchWriter(rs, objects, REPO, BRANCH, c)
    assert c.max_inflight_batches == 0 and w.depth() == 4  # no flush seen yet: the floor
    w._flushed(0.1)  # a 100 ms flush (a slow store): 10 windows of 10 ms, plus one
    assert w.depth() == 11
    uploading = 0
    eleven = asyncio.Event()

    def sst(key: str) -> bool:  # one SST upload per batch in flight
        nonlocal uploading
        if not key.endswith(".sst"):
            return False
        uploading += 1
        if uploading == 11:
            eleven.set()
        return True

    gate = objects.hold("put", times=None, match=sst)
    writes = [asyncio.create_task(w.write(rec(f"k{i:02}", b"v"))) for i in range(20)]
    await asyncio.wait_for(eleven.wait(), 60)  # one-record batches: each full at once
    for _ in range(200):  # the runner has every chance to start a twelfth
        await asyncio.sleep(0)
    assert w._inflight == uploading == 11 and all(not t.done() for t in writes)
    gate.release()
    objects.clear()
    await asyncio.gather(*writes)
    assert [len(f) for f in await l1_files(rs, objects)] == [1] * 20
    assert [t.records for t in w.stats.flushes] == [1] * 20
    w._flushed(1000.0)
    assert w.depth() == 64  # bounded
    fixed = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, max_inflight_batches=2))
    fixed._flushed(1.0)
    assert fixed.depth() == 2  # a set value is kept
    await fixed.aclose()
    await w.aclose()
    await rs.aclose()


class GatedRefStore(EmbeddedRefStore):
    """Records each append call; holds the first ``append_l1`` until released; fails
    the next ``append_l1_many`` calls with ``fail_many`` when set."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.calls: list[tuple[str, ...]] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.fail_many: BaseException | None = None

    async def _append_l1(
        self, repo: str, branch: str, file_id: str, repository_id: str | None
    ) -> Ref:
        self.calls.append((file_id,))
        if not self.entered.is_set():
            self.entered.set()
            await self.release.wait()
        return await super()._append_l1(repo, branch, file_id, repository_id)

    async def _append_l1_many(
        self, repo: str, branch: str, file_ids: tuple[str, ...], repository_id: str | None
    ) -> Ref:
        self.calls.append(file_ids)
        if self.fail_many is not None:
            raise self.fail_many
        return await super()._append_l1_many(repo, branch, file_ids, repository_id)


async def until(cond: Callable[[], bool]) -> None:
    """Wait (up to a minute) for ``cond`` to hold."""
    for _ in range(60_000):
        if cond():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition not reached in 60 s")


@pytest.mark.parametrize("fail", [False, True])
async def test_batches_ready_behind_a_slow_append_go_in_one_call(
    tmp_path: Path, fail: bool
) -> None:
    rs = GatedRefStore(tmp_path / "refs")
    await rs.create_repository(Repository(REPO, "mem://x", BRANCH))
    await rs.create_ref(REPO, BRANCH, Ref("branch", ""))
    objects = MemoryStore()
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, batch_max_records=1))
    first = asyncio.create_task(w.write(rec("k1", b"1")))
    await asyncio.wait_for(rs.entered.wait(), 60)  # batch 1's append is held
    b1 = w._tail
    assert b1 is not None
    later = [asyncio.create_task(w.write(rec(f"k{i}", b"%d" % i))) for i in (2, 3)]
    # batches 2 and 3 upload and queue behind batch 1
    await until(lambda: b1.next is not None and b1.next.next is not None)
    b2, b3 = b1.next, b1.next.next  # type: ignore[union-attr]
    assert b2 is not None and b3 is not None
    await until(lambda: b2.file_id is not None and b3.file_id is not None)
    assert not any(t.done() for t in later)
    if fail:
        rs.fail_many = UnavailableError("RefStore down")
    rs.release.set()
    await first
    ids = (b2.file_id, b3.file_id)
    assert rs.calls == [(b1.file_id,), ids]  # batch 2's call took batch 3 along
    if fail:  # both fail with the call's error; nothing of them is staged
        for t in later:
            with pytest.raises(UnavailableError, match="RefStore down"):
                await t
        assert [len(f) for f in await l1_files(rs, objects)] == [1]
        rs.fail_many = None
        await w.write(rec("k4", b"4"))  # a fresh chain appends again
        assert [f[0].key for f in await l1_files(rs, objects)] == [b"k1", b"k4"]
    else:
        await asyncio.gather(*later)
        assert [f[0].key for f in await l1_files(rs, objects)] == [b"k1", b"k2", b"k3"]
        assert [t.group for t in w.stats.flushes] == [1, 2, 2]
        assert w.stats.batches == 3 and w.stats.l1_length == 3
    await w.aclose()
    await rs.aclose()


async def test_append_order_holds_when_uploads_finish_out_of_order(tmp_path: Path) -> None:
    """Uploads finishing in a shuffled order (each delayed by a seeded number of loop
    turns) still land in L1 in the order the batches were sealed, grouped or not."""
    rs = await embedded_refstore(tmp_path)

    async def turns(seconds: float) -> None:  # no wall time: a number of loop turns
        for _ in range(int(seconds * 1000)):
            await asyncio.sleep(0)

    objects = FaultyStore(MemoryStore(), rng=random.Random(7), sleep=turns)
    objects.delay("put", 0.0, jitter=0.05)
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, batch_max_records=1))
    writes = [asyncio.create_task(w.write(rec(f"k{i:02}", b"%d" % i))) for i in range(60)]
    await asyncio.gather(*writes)
    files = await l1_files(rs, objects)
    assert [f[0].key for f in files] == [b"k%02d" % i for i in range(60)]
    assert w.stats.batches == 60 and w.stats.failed_batches == 0
    assert sum(t.group for t in w.stats.flushes if t.append) == 60  # each in one call
    await w.aclose()
    await rs.aclose()


async def test_a_batch_appends_only_once_the_data_its_writes_name_is_durable(
    tmp_path: Path,
) -> None:
    """``write(record, durable)`` (an upload's data still being fsynced): the batch is
    encoded and uploaded, but neither appended nor taken along by an earlier batch's
    append before the future is done; a later batch waits behind it."""
    rs = await embedded_refstore(tmp_path)
    objects = CountedPuts(MemoryStore())
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, batch_interval_ms=1))
    data: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    first = asyncio.create_task(w.write(rec("a", b"1"), data))
    await objects.until(2)  # its L1 file (SST and sidecar) is uploaded
    second = asyncio.create_task(w.write(rec("b", b"2")))
    await objects.until(4)  # the next batch's too
    await asyncio.sleep(0.05)  # give the writer every chance to (wrongly) append
    assert await l1_files(rs, objects) == []
    assert not first.done() and not second.done()
    data.set_result(None)
    await asyncio.gather(first, second)
    assert [[r.key for r in f] for f in await l1_files(rs, objects)] == [[b"a"], [b"b"]]
    await w.aclose()
    await rs.aclose()


@pytest.mark.parametrize("outcome", ["error", "cancelled"])
async def test_data_that_fails_to_become_durable_fails_its_batch_unappended(
    tmp_path: Path, outcome: str
) -> None:
    """A durability future that fails, or is cancelled (its maker gave up): every write
    of the batch fails with UnavailableError, nothing is appended, the writer goes on."""
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, batch_interval_ms=20))
    loop = asyncio.get_running_loop()
    bad: asyncio.Future[None] = loop.create_future()
    good: asyncio.Future[None] = loop.create_future()
    good.set_result(None)
    writes = [
        asyncio.create_task(w.write(rec("a", b"1"), good)),
        asyncio.create_task(w.write(rec("b", b"2"), bad)),
        asyncio.create_task(w.write(rec("c", b"3"))),
    ]
    if outcome == "error":
        bad.set_exception(UnavailableError("fsync failed"))
    else:
        bad.cancel()
    for task in writes:  # one batch: every write of it fails
        why = "fsync failed" if outcome == "error" else "not made durable"
        with pytest.raises(UnavailableError, match=why):
            await task
    await w.write(rec("d", b"4"))
    assert [[r.key for r in f] for f in await l1_files(rs, objects)] == [[b"d"]]
    assert w.stats.failed_batches == 1
    await w.aclose()
    await rs.aclose()
