"""The compaction job: output equals the merged input, L2 invariants, reuse of untouched
L2 files, bounded prefixes, races with other compactors and commits, failures."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from lsmstore.compaction.job import CompactionJob, JobResult
from lsmstore.compaction.merge_worker import MergeWorker
from lsmstore.config import Config
from lsmstore.errors import ConflictError, UnavailableError
from lsmstore.gc import staging as garbage
from lsmstore.graveler.source import DirectSource
from lsmstore.refstore.base import Ref, RefStore
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.reader import Files, SidecarCache, Snapshot
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.compaction import (
    BRANCH,
    REPO,
    TINY_RANGES,
    PlainCache,
    append_l1_file,
    branch_state,
    check_l2,
    gc_records,
    make_commit,
    make_config,
    rec,
    referenced,
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


#: The merge worker of the running test, or None: every test runs both ways -- merging
#: on the event loop (the worker process's way) and in a merge process (the in-process
#: compactor's way).
MERGER: MergeWorker | None = None


@pytest.fixture(autouse=True, params=["loop", "process"])
async def merge_where(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    global MERGER
    MERGER = MergeWorker() if request.param == "process" else None
    try:
        yield request.param
        if MERGER is not None:  # the jobs really merged there, or none merged at all
            assert MERGER.restarts == (1 if MERGER.jobs else 0), "the merge worker restarted"
    finally:
        if MERGER is not None:
            await MERGER.aclose()
        MERGER = None


def cfg(**kw: Any) -> Config:
    return make_config(**({"compaction_l2_file_bytes": 2048} | kw))


def job(
    refstore: RefStore, objects: ObjectStore, config: Config | None = None, **kw: Any
) -> CompactionJob:
    kw.setdefault("merger", MERGER)
    return CompactionJob(refstore, objects, REPO, BRANCH, config or cfg(), **kw)


async def random_l1(
    refstore: RefStore,
    objects: ObjectStore,
    model: dict[bytes, bytes],
    rng: random.Random,
    files: int,
    keys: int = 300,
    per_file: int = 40,
) -> None:
    """Append ``files`` L1 files of random puts and deletes; keep ``model`` in step."""
    for _ in range(files):
        batch = {}
        for _ in range(rng.randint(1, per_file)):
            k = f"k{rng.randrange(keys):05d}".encode()
            if rng.random() < 0.25:
                batch[k] = rec(k, None)
            else:
                batch[k] = rec(k, rng.randbytes(rng.randint(0, 60)))
        await append_l1_file(refstore, objects, REPO, BRANCH, list(batch.values()))
        for k, r in batch.items():
            if r.value is None:
                model.pop(k, None)
            else:
                model[k] = r.value


@pytest.mark.parametrize("seed", range(6))
async def test_output_equals_the_dict_model(
    refstore: RefStore, objects: ObjectStore, seed: int
) -> None:
    rng = random.Random(seed)
    model: dict[bytes, bytes] = {}
    config = cfg(compaction_job_files=rng.choice([1, 3, 8, 64]))
    for _round in range(4):
        await random_l1(refstore, objects, model, rng, files=rng.randint(1, 10))
        while (await refstore.get_ref(REPO, BRANCH)).l1:
            before = await refstore.get_ref(REPO, BRANCH)
            result = await job(refstore, objects, config).run()
            assert result.outcome == "compacted", result
            after = await refstore.get_ref(REPO, BRANCH)
            assert result.l1_in == min(len(before.l1), config.compaction_job_files)
            assert after.l1 == before.l1[result.l1_in :]
            assert await branch_state(refstore, objects, REPO, BRANCH) == model
            # L2 alone equals the merge of old L2 and the prefix, newest wins
            await check_l2(objects, BRANCH, after)
    ref = await refstore.get_ref(REPO, BRANCH)
    assert ref.l1 == () and len(ref.l2) > 1
    # garbage: every replaced file recorded, no intent left
    keys = await gc_records(objects)
    assert keys and all(k.endswith(".garbage") for k in keys)


async def test_tombstones_are_kept_and_newest_wins(
    refstore: RefStore, objects: ObjectStore
) -> None:
    base = await make_commit(objects, {b"a": b"base-a", b"b": b"base-b", b"c": b"base-c"})
    await refstore.set_base(REPO, BRANCH, expected_base="", new_base=base)
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("a", None), rec("b", "old")])
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("b", "new"), rec("d", "d1")])
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("d", None), rec("e", "e1")])
    result = await job(refstore, objects).run()
    assert result.outcome == "compacted"
    ref = await refstore.get_ref(REPO, BRANCH)
    assert ref.l1 == () and ref.base == base
    l2 = [r for f in await check_l2(objects, BRANCH, ref) for r in f]
    assert {r.key: r.value for r in l2} == {
        b"a": None,  # the base holds "a": its tombstone must stay
        b"b": b"new",
        b"d": None,
        b"e": b"e1",
    }
    assert await branch_state(refstore, objects, REPO, BRANCH) == {
        b"b": b"new",
        b"c": b"base-c",
        b"e": b"e1",
    }


async def test_l2_files_have_the_target_size(refstore: RefStore, objects: ObjectStore) -> None:
    for i in range(10):
        recs = [rec(f"key{i:02d}{j:03d}", b"v" * 100) for j in range(100)]
        await append_l1_file(refstore, objects, REPO, BRANCH, recs)
    result = await job(refstore, objects, cfg(compaction_l2_file_bytes=20_000)).run()
    ref = await refstore.get_ref(REPO, BRANCH)
    files = await check_l2(objects, BRANCH, ref)
    # 1000 records of ~108 bytes: ~5 files of >= 20 kB each, the last one smaller
    assert [len(f) for f in files][:-1] == [186] * (len(files) - 1)
    assert result.files_out == len(files) == 6
    assert result.records_in == result.records_out == 1000
    sizes = [len(await objects.get(f"_lsm/staging/main/L2/{f}.sst")) for f in ref.l2]
    assert result.bytes_out == sum(sizes)


async def test_untouched_l2_files_are_kept_by_id(refstore: RefStore, objects: FaultyStore) -> None:
    config = cfg(compaction_l2_file_bytes=4000)
    model: dict[bytes, bytes] = {}
    for i in range(20):  # keys in increasing ranges: a bulk load
        recs = [rec(f"key{i:02d}{j:03d}", b"v" * 100) for j in range(50)]
        await append_l1_file(refstore, objects, REPO, BRANCH, recs)
        model.update({r.key: r.value for r in recs if r.value is not None})
    await job(refstore, objects, config).run()
    first = await refstore.get_ref(REPO, BRANCH)
    assert len(first.l2) > 20
    # new writes touch only the key range of the last few L2 files
    recs = [rec(f"key19{j:03d}", b"new") for j in range(0, 50, 7)] + [rec("zz", "tail")]
    await append_l1_file(refstore, objects, REPO, BRANCH, recs)
    model.update({r.key: r.value for r in recs if r.value is not None})
    objects.log.clear()
    result = await job(refstore, objects, config).run()
    second = await refstore.get_ref(REPO, BRANCH)
    assert result.outcome == "compacted"
    kept = [f for f in second.l2 if f in first.l2]
    assert result.l2_reused == len(kept) >= len(first.l2) - 3
    assert second.l2[: len(kept)] == tuple(kept)
    # only the touched files were fetched (their SSTs; sidecars are small)
    l2_gets = [k for op, k in objects.log if op == "get" and "/L2/" in k and k.endswith(".sst")]
    assert len(l2_gets) == result.l2_read <= 3
    assert await branch_state(refstore, objects, REPO, BRANCH) == model
    # reused files are not garbage
    records = [garbage.decode_record(await objects.get(k), k) for k in await gc_records(objects)]
    recorded = {f for r in records for f in r.files}
    assert not {("L2", f) for f in kept} & recorded


async def test_idle_when_there_is_nothing_to_compact(
    refstore: RefStore, objects: ObjectStore
) -> None:
    assert (await job(refstore, objects).run()).outcome == "idle"
    await refstore.create_ref(REPO, "v1", Ref("tag", ""))
    tag_job = CompactionJob(refstore, objects, REPO, "v1", cfg())
    assert (await tag_job.run()).outcome == "idle"


class Gate:
    """A step hook that holds jobs at one step until released."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.arrived = asyncio.Event()
        self.count = 0
        self.go = asyncio.Event()
        self.wanted = 1

    async def __call__(self, step: str, j: CompactionJob) -> None:
        if step == self.step:
            self.count += 1
            if self.count >= self.wanted:
                self.arrived.set()
            await self.go.wait()


async def test_two_compactors_racing_one_wins(refstore: RefStore, objects: ObjectStore) -> None:
    rng = random.Random(1)
    model: dict[bytes, bytes] = {}
    await random_l1(refstore, objects, model, rng, files=6)
    await job(refstore, objects, cfg(compaction_job_files=2)).run()  # some L2 to merge with
    await random_l1(refstore, objects, model, rng, files=6)
    gate = Gate("before_swap")
    gate.wanted = 2
    # different prefix lengths: both are valid jobs on the same ref
    jobs = [job(refstore, objects, cfg(compaction_job_files=n), step=gate) for n in (3, 5)]
    runs = [asyncio.create_task(j.run()) for j in jobs]
    await asyncio.wait_for(gate.arrived.wait(), 10)
    await random_l1(refstore, objects, model, rng, files=2)  # appends meanwhile: harmless
    gate.go.set()
    results: list[JobResult] = await asyncio.gather(*runs)
    assert sorted(r.outcome for r in results) == ["compacted", "conflict"]
    ref = await refstore.get_ref(REPO, BRANCH)
    assert await branch_state(refstore, objects, REPO, BRANCH) == model
    # the loser's outputs are gone; no intent is left behind
    loser = next(r for r in results if r.outcome == "conflict")
    assert loser.new_files
    present = await staged_files(objects, BRANCH)
    assert not {("L2", f) for f in loser.new_files} & present
    assert all(k.endswith(".garbage") for k in await gc_records(objects))
    # what is present beyond the ref is exactly what the winner replaced (recorded)
    recorded = {
        f
        for k in await gc_records(objects)
        for f in garbage.decode_record(await objects.get(k), k).files
    }
    assert present - referenced(ref) <= recorded


@pytest.mark.parametrize("order", ["commit_first", "compaction_first"])
async def test_compaction_racing_a_commit(
    refstore: RefStore, objects: ObjectStore, order: str
) -> None:
    """A compaction that read L1 before a commit consumed it must not re-stage old
    values on top of the new base."""
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("k", "v1"), rec("x", "x1")])
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("k", "v2")])
    gate = Gate("before_swap")
    run = asyncio.create_task(job(refstore, objects, step=gate).run())
    await asyncio.wait_for(gate.arrived.wait(), 10)
    ref = await refstore.get_ref(REPO, BRANCH)
    staged = await branch_state(refstore, objects, REPO, BRANCH, ref)
    assert staged == {b"k": b"v2", b"x": b"x1"}

    async def commit(ref: Ref) -> str:
        # A commit of everything staged, then (as a merge would) k changed in the base.
        state = await branch_state(refstore, objects, REPO, BRANCH, ref)
        c1 = await make_commit(objects, state)
        c2 = await make_commit(objects, state | {b"k": b"merged"}, parent=c1)
        await refstore.swap_committed(
            REPO, BRANCH, base=ref.base, l2_old=ref.l2, l1_prefix=ref.l1, new_base=c2
        )
        return c2

    if order == "commit_first":
        c2 = await commit(ref)
        gate.go.set()
        result = await run
        assert result.outcome == "conflict"
        assert isinstance(result.ref, Ref) and result.ref.base == c2
    else:
        gate.go.set()
        result = await run
        assert result.outcome == "compacted"
        with pytest.raises(ConflictError):  # the committer's stale view conflicts
            await commit(ref)
        c2 = await commit(await refstore.get_ref(REPO, BRANCH))  # it retries on the new state
    final = await refstore.get_ref(REPO, BRANCH)
    assert final.base == c2 and final.l2 == () and final.l1 == ()
    assert await branch_state(refstore, objects, REPO, BRANCH) == {
        b"k": b"merged",
        b"x": b"x1",
    }
    # a later write on top of the new base, compacted, still wins over the base
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("x", "x2")])
    assert (await job(refstore, objects).run()).outcome == "compacted"
    assert await branch_state(refstore, objects, REPO, BRANCH) == {
        b"k": b"merged",
        b"x": b"x2",
    }


async def test_failed_upload_leaves_the_ref_and_no_files(
    refstore: RefStore, objects: FaultyStore
) -> None:
    model: dict[bytes, bytes] = {}
    await random_l1(refstore, objects, model, random.Random(3), files=5)
    before = await refstore.get_ref(REPO, BRANCH)
    objects.fail("put", prefix="_lsm/staging/main/L2/", times=1)
    result = await job(refstore, objects, cfg(compaction_l2_file_bytes=256)).run()
    assert result.outcome == "failed" and "injected failure" in result.error
    assert await refstore.get_ref(REPO, BRANCH) == before
    assert await staged_files(objects, BRANCH) == referenced(before)
    assert await gc_records(objects) == []
    assert await branch_state(refstore, objects, REPO, BRANCH) == model


async def test_failed_input_read_fails_the_job(refstore: RefStore, objects: FaultyStore) -> None:
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("a", "1")])
    before = await refstore.get_ref(REPO, BRANCH)
    objects.fail("get", prefix="_lsm/staging/main/L1/", match=lambda k: k.endswith(".sst"))
    result = await job(refstore, objects).run()
    assert result.outcome == "failed" and "UnavailableError" in result.error
    assert await refstore.get_ref(REPO, BRANCH) == before
    assert await gc_records(objects) == []


def patch_swap(
    refstore: RefStore, apply: bool
) -> Callable[..., Any]:  # a swap that times out with an unknown outcome
    real = refstore.swap_compacted

    async def swap(*args: Any, **kw: Any) -> Ref:
        if apply:
            await real(*args, **kw)
        raise UnavailableError("injected: swap timed out", outcome_unknown=True)

    refstore.swap_compacted = swap  # type: ignore[method-assign]
    return real


async def test_swap_with_unknown_outcome_that_landed(
    refstore: RefStore, objects: ObjectStore
) -> None:
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("a", "1")])
    patch_swap(refstore, apply=True)
    result = await job(refstore, objects).run()
    assert result.outcome == "compacted"  # the job looked and found its outputs
    assert all(k.endswith(".garbage") for k in await gc_records(objects))
    assert await branch_state(refstore, objects, REPO, BRANCH) == {b"a": b"1"}


async def test_swap_with_unknown_outcome_that_did_not_land(
    refstore: RefStore, objects: ObjectStore
) -> None:
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("a", "1")])
    before = await refstore.get_ref(REPO, BRANCH)
    patch_swap(refstore, apply=False)
    result = await job(refstore, objects).run()
    assert result.outcome == "failed"
    assert await refstore.get_ref(REPO, BRANCH) == before
    # the outputs stay (the swap might still land); the intent names them for the sweep
    (key,) = await gc_records(objects)
    intent = garbage.decode_record(await objects.get(key), key)
    assert intent.kind == "intent" and intent.l2_new and intent.l1_prefix == before.l1


async def test_cancelled_job_cleans_up(refstore: RefStore, objects: ObjectStore) -> None:
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("a", "1"), rec("b", "2")])
    before = await refstore.get_ref(REPO, BRANCH)
    for step in ("after_upload", "before_swap"):
        gate = Gate(step)
        task = asyncio.create_task(job(refstore, objects, step=gate).run())
        await asyncio.wait_for(gate.arrived.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await refstore.get_ref(REPO, BRANCH) == before
        assert await staged_files(objects, BRANCH) == referenced(before)
        assert await gc_records(objects) == []


async def test_slow_job_gives_up_before_the_grace_period(
    refstore: RefStore, objects: ObjectStore
) -> None:
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec("a", "1")])
    before = await refstore.get_ref(REPO, BRANCH)
    now = [1_000.0]

    async def slow(step: str, j: CompactionJob) -> None:
        if step == "after_upload":
            now[0] += 400  # the job took 400 s: more than half of a 600 s grace period

    result = await job(refstore, objects, clock=lambda: now[0], step=slow).run()
    assert result.outcome == "aborted"
    assert await refstore.get_ref(REPO, BRANCH) == before
    assert await staged_files(objects, BRANCH) == referenced(before)


async def test_read_amplification_after_compaction(
    refstore: RefStore, objects: FaultyStore
) -> None:
    base_state = {f"b{i:04d}".encode(): b"base" for i in range(300)}
    base = await make_commit(objects, base_state)
    await refstore.set_base(REPO, BRANCH, expected_base="", new_base=base)
    rng = random.Random(5)
    model = dict(base_state)
    await random_l1(refstore, objects, model, rng, files=30, keys=2000, per_file=60)
    config = cfg(compaction_l2_file_bytes=3000, compaction_job_files=1000)
    assert (await job(refstore, objects, config).run()).outcome == "compacted"
    recent = [rec("k00007", "fresh")]  # one L1 file on top
    await append_l1_file(refstore, objects, REPO, BRANCH, recent)
    model[b"k00007"] = b"fresh"
    ref = await refstore.get_ref(REPO, BRANCH)
    assert len(ref.l2) > 5 and len(ref.l1) == 1
    files = Files(objects, PlainCache(), DirectSource(objects), SidecarCache(10_000))
    snap = await Snapshot.load(ref, files, BRANCH)  # sidecars are fetched once, then cached
    probes = [k for k in model if k != b"k00007"]
    rng.shuffle(probes)
    for key in [*probes[:60], b"absent-key", b"k00007"]:
        objects.log.clear()
        found, _ = await snap.lookup(key)
        assert (found.value if found else None) == model.get(key)
        ssts = [k for op, k in objects.log if op == "get" and "/L2/" in k]
        l1 = [k for op, k in objects.log if op == "get" and "/L1/" in k]
        base_gets = [k for op, k in objects.log if op == "get" and "_lsm/staging/" not in k]
        assert len(ssts) <= 1, ssts  # at most the one L2 file holding the key
        assert not l1 or key == b"k00007" or len(l1) <= 1  # a bloom false positive at worst
        assert len(base_gets) <= 3  # commit + metarange + one range (uncached)


@pytest.mark.parametrize("first", ["committer", "compactor"])
async def test_compaction_racing_the_committer(
    refstore: RefStore, objects: ObjectStore, first: str
) -> None:
    """The real committer against a real compaction job, both paused just before their
    swaps, with appends in between: either order ends valid and complete."""
    from lsmstore.commit.job import commit_branch
    from lsmstore.versioning.context import RepoContext

    rng = random.Random(11)
    model: dict[bytes, bytes] = {}
    await random_l1(refstore, objects, model, rng, files=4)
    await job(refstore, objects, cfg(compaction_job_files=2)).run()  # some L2 too
    await random_l1(refstore, objects, model, rng, files=4)
    ctx = RepoContext(REPO, refstore, objects, policy=TINY_RANGES)
    compaction_gate = Gate("before_swap")
    commit_at = asyncio.Event()
    commit_go = asyncio.Event()

    async def commit_step(step: str) -> None:
        if step == "commit-written" and not commit_go.is_set():
            commit_at.set()
            await commit_go.wait()

    compaction = asyncio.create_task(job(refstore, objects, step=compaction_gate).run())
    commit = asyncio.create_task(
        commit_branch(ctx, BRANCH, "race", committer="test", on_step=commit_step, grace_s=60)
    )
    await asyncio.wait_for(compaction_gate.arrived.wait(), 10)
    await asyncio.wait_for(commit_at.wait(), 10)
    late = dict(model)
    await random_l1(refstore, objects, model, rng, files=2)  # appended meanwhile
    if first == "committer":
        commit_go.set()
        done = await commit
        compaction_gate.go.set()
        result = await compaction
        assert result.outcome == "conflict"  # the base moved under it
    else:
        compaction_gate.go.set()
        result = await compaction
        assert result.outcome == "compacted"
        commit_go.set()
        done = await commit  # its swap conflicts; it retries from the new state
    ref = await refstore.get_ref(REPO, BRANCH)
    assert ref.base == done.commit_id
    committed = await branch_state(refstore, objects, REPO, BRANCH, Ref("branch", ref.base))
    # what was staged when the commit (last) read the branch: before the late appends if
    # it went first, all of it if it had to retry after the compaction's swap
    assert committed == (late if first == "committer" else model)
    assert await branch_state(refstore, objects, REPO, BRANCH) == model
    assert not ref.l2 and len(ref.l1) == (2 if first == "committer" else 0)
