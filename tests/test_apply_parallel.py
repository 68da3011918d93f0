"""A change set split by range across worker processes gives the sequential tree: the
same range and metarange IDs and counts, whatever the chunks and their boundaries."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmstore import layout
from lsmstore.errors import ObjectNotFoundError
from lsmstore.graveler.apply import ApplyResult, apply_changes, write_tree
from lsmstore.graveler.apply_parallel import _prefetch_order, plan_chunks
from lsmstore.graveler.range_encoder import RangeEncoder
from lsmstore.graveler.ranges import RangeInfo, RangePolicy
from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.tree import TreeReader
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore
from tests.helpers.range_pool import running_pool

#: ~130-byte records: ranges of 16-60 records, cut by hash or by size in about equal parts
#: (a cut by size rarely falls where the base cut: chunk boundaries need resyncs).
POLICY = RangePolicy(min_bytes=2 << 10, max_bytes=8 << 10, raggedness=40)


def rec(i: int, salt: bytes = b"") -> Record:
    v = b"v%d" % i + salt + bytes(90 + i % 7)
    return Record(b"k%07d" % i, b"i" + v[:12] + salt, v)


@pytest.fixture(scope="module")
def pool() -> Iterator[RangeEncoder]:
    yield from running_pool(2)


def without_split(result: ApplyResult) -> ApplyResult:
    """The result less what depends on the split (a resync may read a range twice)."""
    return dataclasses.replace(result, ranges_read=0, chunks=0, resyncs=0)


async def both_ways(
    pool: RangeEncoder, base: list[Record], changes: list[Record]
) -> tuple[ApplyResult, ApplyResult]:
    """(sequential, split) results of ``changes`` onto a tree of ``base``; checks that
    they name the same tree, which holds what a from-scratch build holds."""
    store = MemoryStore()
    src = DirectSource(store)
    base_id = await write_tree(store, base, POLICY)
    seq = await apply_changes(src, store, base_id, changes, POLICY)
    split = await apply_changes(src, store, base_id, changes, POLICY, encoder=pool)
    assert split.metarange_id == seq.metarange_id
    assert without_split(split) == without_split(seq)
    model = {r.key: r for r in base}
    for c in changes:
        if c.value is None:
            model.pop(c.key, None)
        else:
            model[c.key] = c
    expected = [model[k] for k in sorted(model)]
    assert [r async for r in TreeReader(src, split.metarange_id)] == expected
    assert split.metarange_id == await write_tree(MemoryStore(), expected, POLICY)
    return seq, split


def random_changes(rng: random.Random, n: int, count: int) -> list[Record]:
    out: dict[bytes, Record] = {}
    for i in rng.sample(range(n + n // 10 + 1), min(count, n)):
        kind = rng.random()
        if kind < 0.2:
            out[rec(i).key] = tombstone(rec(i).key)
        elif kind < 0.3:
            r = rec(i, b"ins")
            out[r.key + b"+"] = Record(r.key + b"+", r.identity, r.value)
        else:
            r = rec(i, b"upd" * rng.randint(0, 3))  # the size changes: cuts move
            out[r.key] = r
    return [out[k] for k in sorted(out)]


async def test_random_change_sets_across_seeds(pool: RangeEncoder) -> None:
    chunks = resyncs = 0
    for seed in range(16):
        rng = random.Random(seed)
        n = rng.choice([300, 1500, 4000])
        base = [rec(i) for i in range(n)]
        changes = random_changes(rng, n, rng.choice([20, 200, n // 3]))
        _, split = await both_ways(pool, base, changes)
        chunks += split.chunks
        resyncs += split.resyncs
    assert chunks > 16  # the workers' results were used ...
    assert resyncs > 0  # ... also after re-synchronising at a chunk boundary


async def test_boundary_keys_deleted_and_changed(pool: RangeEncoder) -> None:
    base = [rec(i) for i in range(3000)]
    store = MemoryStore()
    base_id = await write_tree(store, base, POLICY)
    infos = (await DirectSource(store).metarange(base_id)).ranges
    for variant in range(4):
        changes: dict[bytes, Record] = {}
        for info in infos[::2]:
            for key in (info.min_key, info.max_key):
                if variant == 0:
                    changes[key] = tombstone(key)
                elif variant == 1:
                    changes[key] = Record(key, b"x", b"y" * 200)  # the range overflows
                elif variant == 2:
                    changes[key + b"\x00"] = Record(key + b"\x00", b"n", b"new")
                else:
                    changes[key] = Record(key, b"same-size", bytes(len(key)))
        await both_ways(pool, base, [changes[k] for k in sorted(changes)])


async def test_edges_of_the_tree(pool: RangeEncoder) -> None:
    base = [rec(i) for i in range(10, 2000)]
    before = [Record(b"a%03d" % i, b"i", b"v" * 50) for i in range(200)]
    after = [Record(b"z%03d" % i, b"i", b"v" * 50) for i in range(200)]
    spread = random_changes(random.Random(3), 2000, 300)
    await both_ways(pool, base, before + spread)
    await both_ways(pool, base, spread + after)
    await both_ways(pool, base, before + after)  # two touched ranges: not split
    await both_ways(pool, base, [tombstone(r.key) for r in base])  # everything deleted
    # chunks without a change between touched ones: a few clustered edits
    clustered = [rec(i, b"c") for i in (20, 21, 900, 901, 1700, 1990, 1995)]
    await both_ways(pool, base, clustered)
    # tiny bases: two or three ranges
    small = [rec(i) for i in range(80)]
    await both_ways(pool, small, random_changes(random.Random(5), 80, 40))


async def test_a_missing_base_range_raises_as_sequentially(pool: RangeEncoder) -> None:
    store = MemoryStore()
    src = DirectSource(store)
    base_id = await write_tree(store, [rec(i) for i in range(3000)], POLICY)
    infos = (await src.metarange(base_id)).ranges
    await store.delete(layout.range_key(infos[len(infos) // 2].id))
    changes = random_changes(random.Random(9), 3000, 600)
    for encoder in (None, pool):
        with pytest.raises(ObjectNotFoundError):
            await apply_changes(src, store, base_id, changes, POLICY, encoder=encoder)
    # the workers are fine afterwards
    assert (await both_ways(pool, [rec(i) for i in range(500)], changes[:50]))[1].chunks


def test_plan_chunks_shares_touched_ranges() -> None:
    ranges = [RangeInfo(str(i), b"k%03d0" % i, b"k%03d9" % i, 10, 100) for i in range(20)]
    # fewer than MIN_TOUCHED touched ranges: no split
    assert plan_chunks(ranges, [b"k0005", b"k0195"], 4) == []
    keys = [b"a"] + [b"k%03d5" % i for i in range(0, 20, 2)]  # before the tree: range 0
    assert plan_chunks(ranges, keys, 1) == []
    starts = plan_chunks(ranges, keys, 4)
    assert starts[0] == 0 and len(starts) == 4 and starts == sorted(set(starts))


def test_prefetch_order_names_only_ranges_holding_a_change() -> None:
    ranges = [RangeInfo(str(i), b"k%03d0" % i, b"k%03d5" % i, 10, 100) for i in range(6)]
    keys = [layout.range_key(r.id) for r in ranges]
    # before the tree, in a gap (k0017: after range 1's last key), in ranges 2 and 4
    changes = [Record(k, b"i", b"v") for k in (b"a", b"k0017", b"k0021", b"k0043")]
    first, order = _prefetch_order(ranges, changes)
    assert first == keys[2]
    assert order == {keys[0]: keys[2], keys[1]: keys[2], keys[2]: keys[4], keys[3]: keys[4]}
    assert _prefetch_order(ranges, [Record(b"z", b"i", b"v")]) == (None, {})


async def test_ranges_fetched_ahead_are_ranges_read(pool: RangeEncoder) -> None:
    """Fetching ahead costs no GET the walk would not make: sparse edits far apart
    (most ranges passed whole), then dense ones."""
    base = [rec(i) for i in range(4000)]
    for changes in (
        [rec(i, b"c") for i in (20, 21, 900, 901, 1700, 2600, 2601, 3500, 3990)],
        random_changes(random.Random(11), 4000, 800),
    ):
        store = FaultyStore(MemoryStore())
        src = DirectSource(store)
        base_id = await write_tree(store, base, POLICY)
        ranges = {layout.range_key(r.id) for r in (await src.metarange(base_id)).ranges}
        store.log.clear()
        split = await apply_changes(src, store, base_id, changes, POLICY, encoder=pool)
        assert split.chunks
        assert sum(op == "get" and key in ranges for op, key in store.log) == split.ranges_read


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(0, 2500),
    ops=st.lists(
        st.tuples(st.integers(0, 3000), st.sampled_from(["delete", "update", "grow", "insert"])),
        max_size=300,
    ),
)
async def test_hypothesis_change_sets(
    pool: RangeEncoder, n: int, ops: list[tuple[int, str]]
) -> None:
    changes: dict[bytes, Record] = {}
    for i, op in ops:
        key = rec(i).key
        if op == "delete":
            changes[key] = tombstone(key)
        elif op == "update":
            changes[key] = rec(i, b"u")
        elif op == "grow":
            changes[key] = rec(i, b"g" * 300)
        else:
            changes[key + b"+"] = Record(key + b"+", b"n", b"new" * 20)
    await both_ways(pool, [rec(i) for i in range(n)], [changes[k] for k in sorted(changes)])


async def test_a_worker_killed_costs_its_chunk_a_walk_in_the_parent() -> None:
    base = [rec(i) for i in range(3000)]
    changes = random_changes(random.Random(13), 3000, 800)
    workers = running_pool(2)
    enc = next(workers)
    try:
        victim = enc.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        _, split = await both_ways(enc, base, changes)
        assert split.chunks < 4  # the dead worker's chunk was walked by the parent
        assert victim not in enc.worker_pids()
        # and a new worker took its place: the next split uses both again
        for _ in range(1200):
            if enc.started == 2:
                break
            await asyncio.sleep(0.05)
        _, again = await both_ways(enc, base, changes)
        assert again.chunks == 4
    finally:
        workers.close()


class _StallingStore(MemoryStore):
    """A store whose reads asked for by the split commit's pool threads (on behalf of
    the workers) stall -- never answer -- once ``stall`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.stall = False
        self.stalled = 0
        self.more = asyncio.Event()

    def get(self, key: str, *args: Any, **kwargs: Any) -> Any:
        if self.stall and threading.current_thread() is not threading.main_thread():
            return self._never()  # called in a pool thread, run on the event loop
        return super().get(key, *args, **kwargs)

    async def _never(self) -> bytes:
        self.stalled += 1
        self.more.set()
        await asyncio.Event().wait()  # forever (until cancelled)
        raise AssertionError("unreachable")


@pytest.mark.parametrize("cancels", [1, 2])
async def test_a_cancelled_split_commit_leaves_no_thread_waiting(
    pool: RangeEncoder, cancels: int
) -> None:
    """A commit cancelled (once, or again while it waits for its chunks) while the workers
    wait for base ranges the store never delivers ends, and its threads let go of the
    workers: the next split commit uses them all."""
    base = [rec(i) for i in range(3000)]
    changes = random_changes(random.Random(5), 3000, 800)
    store = _StallingStore()
    base_id = await write_tree(store, base, POLICY)
    store.stall = True
    task = asyncio.ensure_future(
        apply_changes(DirectSource(store), store, base_id, changes, POLICY, encoder=pool)
    )
    while store.stalled < 2:  # both workers' threads wait for a range
        store.more.clear()
        await store.more.wait()
    for _ in range(cancels):
        task.cancel()
        await asyncio.sleep(0)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 120)
    _, split = await both_ways(pool, base, changes)
    assert split.chunks == 4
