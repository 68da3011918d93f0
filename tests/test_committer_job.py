"""The commit job against a real embedded RefStore and local object store: what a commit
contains, what stays staged, races with writers, compaction and other commits, unknown
outcomes, range reuse and garbage records."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers.versioning import (
    branch_state,
    close,
    compact,
    make_repo,
    rec,
    stage,
    tree_of,
)

from lsmstore import layout
from lsmstore.commit.job import STEPS, commit_branch
from lsmstore.errors import (
    ConflictError,
    InvalidInputError,
    NothingToCommitError,
    RefNotFoundError,
    UnavailableError,
)
from lsmstore.gc.staging import GC_PREFIX
from lsmstore.graveler.record import Record
from lsmstore.refstore.base import Ref
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.storage.base import PutMode
from lsmstore.storage.local import LocalStore
from lsmstore.versioning.context import RepoContext
from lsmstore.versioning.history import log
from lsmstore.versioning.refs import create_branch, delete_branch


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[RepoContext]:
    c = await make_repo(tmp_path)
    yield c
    await close(c)


def kv(i: int, tag: str = "v") -> Record:
    return rec(f"k{i:05d}", f"{tag}{i}")


async def head(ctx: RepoContext, branch: str = "main") -> Ref:
    return await ctx.refstore.get_ref(ctx.name, branch)


async def test_commit_applies_l1_newest_first_over_l2(ctx: RepoContext) -> None:
    await stage(ctx, "main", [kv(i) for i in range(100)])
    await stage(ctx, "main", [rec("k00001", "second"), rec("k00002", None)])
    await compact(ctx, "main", 2)  # those two now in L2
    await stage(ctx, "main", [rec("k00001", "third"), rec("k00003", None), rec("new", "n")])
    before = await head(ctx)
    expected = await branch_state(ctx, "main")

    result = await commit_branch(ctx, "main", "first", committer="alice", metadata={"a": "1"})

    after = await head(ctx)
    assert after == Ref("branch", result.commit_id)
    assert await tree_of(ctx, result.commit_id) == expected
    assert expected[b"k00001"] == b"third" and b"k00002" not in expected
    assert b"k00003" not in expected and expected[b"new"] == b"n"
    c = result.commit
    assert c.parents == (before.base,)
    assert (c.committer, c.message, dict(c.metadata)) == ("alice", "first", {"a": "1"})
    assert c.generation == (await ctx.commit(before.base)).generation + 1
    assert (result.l1_files, result.l2_files, result.attempts) == (1, 1, 1)
    assert result.changes == 101


async def test_nothing_staged(ctx: RepoContext) -> None:
    before = await head(ctx)
    with pytest.raises(NothingToCommitError, match="nothing staged"):
        await commit_branch(ctx, "main", "m", committer="c")
    assert await head(ctx) == before


async def test_allow_empty_commit(ctx: RepoContext) -> None:
    before = await head(ctx)
    result = await commit_branch(ctx, "main", "empty", committer="c", allow_empty=True)
    assert result.commit.parents == (before.base,)
    assert result.commit.metarange_id == (await ctx.commit(before.base)).metarange_id
    assert (await head(ctx)).base == result.commit_id


async def test_staged_no_ops_are_dropped_without_a_commit(ctx: RepoContext) -> None:
    await stage(ctx, "main", [kv(1)])
    first = await commit_branch(ctx, "main", "one", committer="c")
    await stage(ctx, "main", [kv(1), rec("absent", None)])  # same value; delete of nothing
    with pytest.raises(NothingToCommitError, match="unchanged"):
        await commit_branch(ctx, "main", "two", committer="c", grace_s=60)
    assert await head(ctx) == Ref("branch", first.commit_id)
    records = [m.key async for m in ctx.objects.list(GC_PREFIX + "main/")]
    assert len(records) == 1  # the dropped files are garbage


async def test_bad_input_changes_nothing(ctx: RepoContext) -> None:
    await stage(ctx, "main", [kv(1)])
    before = await head(ctx)
    with pytest.raises(InvalidInputError):
        await commit_branch(ctx, "main", "m", committer="c", metadata={"k": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError):
        await commit_branch(ctx, "main", "\ud800", committer="c")
    with pytest.raises(InvalidInputError):
        await commit_branch(ctx, "main", "m", committer="c", max_attempts=0)
    await ctx.refstore.create_ref(ctx.name, "v1", Ref("tag", before.base))
    with pytest.raises(InvalidInputError, match="tag"):
        await commit_branch(ctx, "v1", "m", committer="c")
    with pytest.raises(RefNotFoundError):
        await commit_branch(ctx, "nope", "m", committer="c")
    assert await head(ctx) == before


async def test_steps_in_order(ctx: RepoContext) -> None:
    await stage(ctx, "main", [kv(1)])
    seen: list[str] = []

    async def on_step(name: str) -> None:
        seen.append(name)

    await commit_branch(ctx, "main", "m", committer="c", on_step=on_step)
    assert tuple(seen) == STEPS


async def test_writes_after_the_snapshot_stay_staged(ctx: RepoContext) -> None:
    await stage(ctx, "main", [kv(i) for i in range(50)])
    late: list[str] = []

    async def on_step(name: str) -> None:
        # writes acknowledged while the commit runs, at every step before the swap
        if name != "swapped":
            late.append(
                await stage(ctx, "main", [rec("k00001", f"late-{name}"), kv(1000 + len(late))])
            )

    result = await commit_branch(ctx, "main", "m", committer="c", on_step=on_step)
    after = await head(ctx)
    assert after.base == result.commit_id
    assert after.l1 == tuple(late) and after.l2 == ()
    committed = await tree_of(ctx, result.commit_id)
    assert committed[b"k00001"] == b"v1" and b"k01000" not in committed
    state = await branch_state(ctx, "main")
    assert state[b"k00001"] == b"late-commit-written"
    assert {b"k01000", b"k01001", b"k01002"} <= set(state)
    # the next commit takes them, and no write was lost or taken twice
    second = await commit_branch(ctx, "main", "m2", committer="c")
    assert await tree_of(ctx, second.commit_id) == state
    assert second.commit.parents == (result.commit_id,)


async def test_compaction_of_part_of_the_prefix_reissues_the_swap(ctx: RepoContext) -> None:
    for n in range(4):
        await stage(ctx, "main", [kv(i, f"w{n}-") for i in range(n * 10, n * 10 + 20)])
    expected = await branch_state(ctx, "main")
    swaps: list[Ref] = []

    async def on_step(name: str) -> None:
        if name == "commit-written" and not swaps:
            swaps.append(await compact(ctx, "main", 2))  # 2 of our 4 files go to L2
            await stage(ctx, "main", [rec("after", "a")])

    result = await commit_branch(ctx, "main", "m", committer="c", on_step=on_step)
    assert result.attempts == 1  # the tree was still right: no recomputation
    after = await head(ctx)
    assert after.base == result.commit_id and after.l2 == () and len(after.l1) == 1
    assert await tree_of(ctx, result.commit_id) == expected
    assert {f for _, f in result.retired} == set(swaps[0].l1[:2]) | set(swaps[0].l2)


class CountingStore(LocalStore):
    """Counts encoded-and-uploaded committed files (ranges and metaranges)."""

    range_puts = 0

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        if key.startswith(layout.RANGES):
            self.range_puts += 1
        await super().put(key, data, mode)


async def test_compaction_of_the_whole_prefix_retries_reusing_ranges(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "data")
    ctx = await make_repo(tmp_path, objects=store)
    await stage(ctx, "main", [kv(i) for i in range(2000)])
    first = await commit_branch(ctx, "main", "base", committer="c")
    await stage(ctx, "main", [kv(i, "x") for i in range(0, 2000, 7)])
    puts: list[int] = []

    async def on_step(name: str) -> None:
        if name == "commit-written" and not puts:
            puts.append(store.range_puts)
            await stage(ctx, "main", [rec("k00003", "later")])
            await compact(ctx, "main", 2)  # our file and a later one, all into L2

    result = await commit_branch(ctx, "main", "m", committer="c", on_step=on_step)
    assert result.attempts == 2
    assert result.commit.parents == (first.commit_id,)
    tree = await tree_of(ctx, result.commit_id)
    assert tree[b"k00003"] == b"later" and tree[b"k00007"] == b"x7" and tree[b"k00008"] == b"v8"
    assert len(tree) == 2000
    assert await head(ctx) == Ref("branch", result.commit_id)
    # The first attempt rewrote every range a change touched (hundreds); the retry
    # re-encoded only the range of the one new key, plus the metarange.
    assert result.ranges_written > 100
    assert store.range_puts - puts[0] <= 3
    await close(ctx)


async def test_branch_recreated_at_the_same_base_during_a_commit(ctx: RepoContext) -> None:
    """Same base, different staged files: the retry commits only what is staged now."""
    await stage(ctx, "main", [kv(1)])
    await commit_branch(ctx, "main", "base", committer="c")
    await create_branch(ctx, "dev", "main")
    await stage(ctx, "dev", [rec("old", "gone with the branch")])
    once: list[bool] = []

    async def on_step(name: str) -> None:
        if name == "commit-written" and not once:
            once.append(True)
            await delete_branch(ctx, "dev")
            await create_branch(ctx, "dev", "main")
            await stage(ctx, "dev", [rec("new", "n")])

    result = await commit_branch(ctx, "dev", "m", committer="c", on_step=on_step)
    assert result.attempts == 2
    assert await tree_of(ctx, result.commit_id) == {b"k00001": b"v1", b"new": b"n"}


async def test_racing_commits_one_wins_the_other_retries(ctx: RepoContext) -> None:
    await stage(ctx, "main", [kv(i) for i in range(100)])
    inner: list[str] = []
    sleeps: list[float] = []

    async def on_step(name: str) -> None:
        if name == "commit-written" and not inner:
            await stage(ctx, "main", [rec("between", "b")])
            r = await commit_branch(ctx, "main", "inner", committer="other")
            inner.append(r.commit_id)
            await stage(ctx, "main", [rec("after", "a")])

    async def sleep(s: float) -> None:
        sleeps.append(s)

    result = await commit_branch(
        ctx, "main", "outer", committer="c", on_step=on_step, sleep=sleep, rng=lambda: 1.0
    )
    assert result.attempts == 2 and sleeps == [0.05]
    assert result.commit.parents == (inner[0],)
    final = await tree_of(ctx, result.commit_id)
    assert {b"between", b"after", b"k00000", b"k00099"} <= set(final)
    assert [e.message async for e in log(ctx, result.commit_id)] == [
        "outer",
        "inner",
        "Repository created",
    ]


async def test_racing_commit_that_took_everything_leaves_nothing(ctx: RepoContext) -> None:
    await stage(ctx, "main", [kv(1)])
    inner: list[str] = []

    async def on_step(name: str) -> None:
        if name == "commit-written" and not inner:
            inner.append((await commit_branch(ctx, "main", "inner", committer="o")).commit_id)

    async def sleep(s: float) -> None:
        pass

    with pytest.raises(NothingToCommitError):
        await commit_branch(ctx, "main", "outer", committer="c", on_step=on_step, sleep=sleep)
    assert await head(ctx) == Ref("branch", inner[0])


async def test_gives_up_after_max_attempts(ctx: RepoContext) -> None:
    await stage(ctx, "main", [kv(1)])
    n = 0

    async def on_step(name: str) -> None:
        nonlocal n
        if name == "commit-written":
            n += 1
            await stage(ctx, "main", [kv(100 + n)])
            await commit_branch(ctx, "main", f"intruder {n}", committer="o")
            await stage(ctx, "main", [kv(200 + n)])  # something left for our retry

    sleeps: list[float] = []

    async def sleep(s: float) -> None:
        sleeps.append(s)

    with pytest.raises(ConflictError, match="3 attempts"):
        await commit_branch(
            ctx, "main", "m", committer="c", on_step=on_step, sleep=sleep, rng=lambda: 0.0,
            max_attempts=3, backoff_s=0.1, backoff_max_s=0.15,
        )  # fmt: skip
    assert sleeps == [0.05, 0.075]  # jitter 0.5 at rng 0; doubling, capped
    state = await branch_state(ctx, "main")
    assert {b"k00001", b"k00101", b"k00102", b"k00103", b"k00203"} <= set(state)


class FlakySwapRefStore(EmbeddedRefStore):
    """Applies a swap, then reports that its outcome is unknown (a lost reply)."""

    lose_replies = 0

    async def _swap_committed(self, *args: object) -> Ref:
        ref = await super()._swap_committed(*args)  # type: ignore[arg-type]
        if self.lose_replies:
            self.lose_replies -= 1
            raise UnavailableError("reply lost", outcome_unknown=True)
        return ref


async def test_unknown_swap_outcome_is_settled_by_reading_the_ref(tmp_path: Path) -> None:
    rs = FlakySwapRefStore(tmp_path / "refs")
    ctx = await make_repo(tmp_path, refstore=rs)
    try:
        await stage(ctx, "main", [kv(1)])
        rs.lose_replies = 1
        result = await commit_branch(ctx, "main", "m", committer="c")
        assert await head(ctx) == Ref("branch", result.commit_id)
        assert result.attempts == 1
    finally:
        await close(ctx)


async def test_one_key_change_rewrites_at_most_two_ranges(ctx: RepoContext) -> None:
    await stage(ctx, "main", [kv(i) for i in range(5000)])
    base = await commit_branch(ctx, "main", "base", committer="c")
    old = await ctx.source.metarange(base.commit.metarange_id)
    assert len(old) > 100
    for change in (kv(2500, "changed"), rec("k02500a", "inserted"), rec("k03000", None)):
        await stage(ctx, "main", [change])
        prev = await ctx.source.metarange((await ctx.commit((await head(ctx)).base)).metarange_id)
        result = await commit_branch(ctx, "main", "one key", committer="c")
        new = await ctx.source.metarange(result.commit.metarange_id)
        fresh = {r.id for r in new} - {r.id for r in prev}
        assert len(fresh) <= 2, change
        assert result.ranges_written <= 2 and result.ranges_read <= 2
        assert result.ranges_reused >= len(new) - 2


async def test_retired_files_are_recorded_as_garbage(ctx: RepoContext) -> None:
    f1 = await stage(ctx, "main", [kv(1)])
    f2 = await stage(ctx, "main", [kv(2)])
    result = await commit_branch(ctx, "main", "m", committer="c", grace_s=60, clock=lambda: 1e9)
    assert result.garbage_record is not None
    assert result.garbage_record.startswith(GC_PREFIX + "main/")
    doc = json.loads(await ctx.objects.get(result.garbage_record))
    assert doc["kind"] == "garbage" and doc["reason"] == "commit"
    assert sorted(map(tuple, doc["files"])) == [("L1", f1), ("L1", f2)]
    assert doc["due_ms"] == int((1e9 + 60) * 1000)
