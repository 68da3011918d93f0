"""Three-way merge through the client on the embedded default: the merge table case by
case under each strategy, merge commit parents, staged changes on the destination,
the fast paths, concurrent moves of the destination, and revert."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lsmstore
from lsmstore.errors import (
    InvalidInputError,
    MergeConflictError,
    NotFoundError,
    NothingToCommitError,
)
from lsmstore.graveler.apply import write_tree
from lsmstore.graveler.commit import write_commit
from lsmstore.graveler.ranges import RangePolicy
from lsmstore.graveler.record import Record, default_identity
from lsmstore.types import Commit

MISSING = None
CONFLICT = "conflict"


@pytest.fixture
async def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[lsmstore.Store]:
    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path / "home"))
    async with lsmstore.connect(
        batch_interval_ms=1,
        commit_range_min_bytes=100,
        commit_range_max_bytes=1000,
        commit_range_raggedness=8,
    ) as s:
        yield s


@pytest.fixture
async def repo(store: lsmstore.Store, tmp_path: Path) -> lsmstore.Repository:
    return await store.create_repository("repo", storage_namespace=(tmp_path / "ns").as_uri())


async def write(branch: lsmstore.Branch, value: str | None, key: str = "k") -> None:
    if value is None:
        await branch.delete(key)
    else:
        await branch.put(key, value.encode())


async def read(ref: lsmstore.Branch | lsmstore.Ref, key: str = "k") -> str | None:
    try:
        return (await ref.get(key)).decode()
    except NotFoundError:
        return None


# (base, destination, source) -> result without a strategy / source-wins / dest-wins
TABLE = [
    ("1", "1", "1", "1", "1", "1"),  # unchanged
    ("1", "2", "1", "2", "2", "2"),  # only the destination changed
    ("1", "1", "2", "2", "2", "2"),  # only the source changed
    ("1", "2", "2", "2", "2", "2"),  # both changed the same way
    ("1", "2", "3", CONFLICT, "3", "2"),  # both changed differently
    ("1", MISSING, "1", MISSING, MISSING, MISSING),  # deleted on the destination
    ("1", "1", MISSING, MISSING, MISSING, MISSING),  # deleted on the source
    ("1", MISSING, MISSING, MISSING, MISSING, MISSING),  # deleted on both
    ("1", MISSING, "2", CONFLICT, "2", MISSING),  # deleted here, changed there
    ("1", "2", MISSING, CONFLICT, MISSING, "2"),  # changed here, deleted there
    (MISSING, MISSING, "1", "1", "1", "1"),  # added on the source
    (MISSING, "1", MISSING, "1", "1", "1"),  # added on the destination
    (MISSING, "1", "1", "1", "1", "1"),  # added the same on both
    (MISSING, "1", "2", CONFLICT, "2", "1"),  # added differently
]


@pytest.mark.parametrize(("b", "d", "s", "plain", "src_wins", "dst_wins"), TABLE)
@pytest.mark.parametrize("strategy", [None, "source-wins", "dest-wins"])
async def test_merge_table(
    repo: lsmstore.Repository,
    b: str | None,
    d: str | None,
    s: str | None,
    plain: str | None,
    src_wins: str | None,
    dst_wins: str | None,
    strategy: str | None,
) -> None:
    main = repo.branch("main")
    await main.put("other", b"o")  # the trees are never empty
    if b is not None:
        await write(main, b)
    await main.commit("base")
    dev = await repo.create_branch("dev", source="main")
    if d != b:
        await write(main, d)
        await main.put("dest-only", b"d")
    if s != b:
        await write(dev, s)
        await dev.put("source-only", b"s")
    await main.commit("destination", allow_empty=True)
    await dev.commit("source", allow_empty=True)
    dest_before = (await main.head()).base
    source_commit = (await dev.head()).base
    expected = {None: plain, "source-wins": src_wins, "dest-wins": dst_wins}[strategy]

    if expected == CONFLICT:
        with pytest.raises(MergeConflictError) as info:
            await repo.merge("dev", into="main", strategy=strategy)  # type: ignore[arg-type]
        assert info.value.keys == [b"k"]
        assert (await main.head()).base == dest_before  # nothing changed
        return
    result = await repo.merge("dev", into="main", strategy=strategy)  # type: ignore[arg-type]
    assert result.merged and result.commit is not None
    assert result.commit.parents == (dest_before, source_commit)
    assert (await main.head()).base == result.commit_id
    assert await read(main) == expected
    merged = repo.ref(result.commit_id)
    assert await read(merged) == expected
    assert await read(merged, "other") == "o"
    assert await read(merged, "dest-only") == ("d" if d != b else None)
    assert await read(merged, "source-only") == ("s" if s != b else None)


async def test_conflicts_list_every_key_in_order(repo: lsmstore.Repository) -> None:
    main = repo.branch("main")
    await main.put_many([(f"k{i:03d}", b"base") for i in range(200)])
    await main.commit("base")
    dev = await repo.create_branch("dev", source="main")
    await main.put_many([(f"k{i:03d}", b"main") for i in range(0, 200, 3)])
    await dev.put_many([(f"k{i:03d}", b"dev") for i in range(0, 200, 2)])
    await main.commit("m")
    await dev.commit("d")
    with pytest.raises(MergeConflictError) as info:
        await repo.merge("dev", into="main")
    assert info.value.keys == [f"k{i:03d}".encode() for i in range(0, 200, 6)]
    assert "k000" in str(info.value)


async def test_staged_changes_on_the_destination_survive(repo: lsmstore.Repository) -> None:
    main = repo.branch("main")
    await main.put("a", b"1")
    await main.commit("base")
    dev = await repo.create_branch("dev", source="main")
    await dev.put_many([("a", b"dev"), ("b", b"dev"), ("c", b"dev")])
    await dev.commit("dev work")
    await main.put("a", b"staged")  # staged on the destination, not committed
    await main.delete("c")
    staged_before = (await main.head()).l1
    result = await repo.merge("dev", into="main", message="bring dev in")
    head = await main.head()
    assert head.base == result.commit_id and head.l1 == staged_before  # still staged
    assert await read(main, "a") == "staged" and await read(main, "c") is None
    assert await read(main, "b") == "dev"
    committed = repo.ref(result.commit_id)
    assert await read(committed, "a") == "dev" and await read(committed, "c") == "dev"
    assert result.commit is not None and result.commit.message == "bring dev in"
    await main.commit("after merge")
    assert await read(repo.ref("main"), "a") == "staged"
    assert await read(repo.ref("main~1"), "a") == "dev"


async def test_already_merged_is_a_clear_no_op(repo: lsmstore.Repository) -> None:
    main = repo.branch("main")
    await main.put("a", b"1")
    await main.commit("one")
    dev = await repo.create_branch("dev", source="main")
    await main.put("b", b"2")
    await main.commit("two")
    before = (await main.head()).base
    result = await repo.merge("dev", into="main")  # dev's commit is main~1
    assert not result.merged and result.commit is None and result.commit_id == before
    assert (await main.head()).base == before
    again = await repo.merge("main", into="main")
    assert not again.merged
    await dev.put("c", b"3")
    await dev.commit("three")
    first = await repo.merge("dev", into="main")
    assert first.merged
    second = await repo.merge("dev", into="main")
    assert not second.merged and second.commit_id == first.commit_id


async def test_destination_behind_source_gets_a_merge_commit(repo: lsmstore.Repository) -> None:
    main = repo.branch("main")
    await main.put("a", b"1")
    await main.commit("one")
    dev = await repo.create_branch("dev", source="main")
    await dev.put("b", b"2")
    dev_commit = await dev.commit("two")
    before = (await main.head()).base
    result = await repo.merge("dev", into="main")
    assert result.merged and result.commit is not None
    assert result.commit.parents == (before, dev_commit.id)
    assert result.commit.metarange_id == dev_commit.metarange_id  # the source's tree
    assert [e.message async for e in repo.log("main", limit=2)] == [
        "Merge 'dev' into 'main'",
        "one",
    ]
    assert (await repo.ref("main^2").commit()).message == "two"


async def test_merge_of_unrelated_histories_uses_the_empty_base(
    repo: lsmstore.Repository,
) -> None:
    main = repo.branch("main")
    await main.put_many([("a", b"1"), ("z", b"main")])
    await main.commit("one")
    # a root commit of another history, written straight into the namespace
    tree = await write_tree(
        repo.objects,
        [Record(b"z", default_identity(b"9"), b"9"), Record(b"zz", default_identity(b"9"), b"9")],
        RangePolicy(),
    )
    foreign = await write_commit(repo.objects, Commit(tree, (), "x", "foreign root", 1))
    await repo.create_tag("foreign", foreign)
    with pytest.raises(MergeConflictError) as info:
        await repo.merge("foreign", into="main")  # z added differently on both sides
    assert info.value.keys == [b"z"]
    result = await repo.merge("foreign", into="main", strategy="dest-wins")
    assert result.merged and result.merge_base is None
    assert [await read(main, k) for k in ("a", "z", "zz")] == ["1", "main", "9"]


async def test_bad_merges(repo: lsmstore.Repository) -> None:
    with pytest.raises(InvalidInputError):
        await repo.merge("main", into="main", strategy="theirs")  # type: ignore[arg-type]
    with pytest.raises(lsmstore.RefNotFoundError):
        await repo.merge("nope", into="main")
    await repo.create_tag("t", "main")
    with pytest.raises(InvalidInputError):
        await repo.merge("main", into="t")


async def test_revert(repo: lsmstore.Repository) -> None:
    main = repo.branch("main")
    await main.put_many([("a", b"1"), ("b", b"1")])
    await main.commit("one")
    await main.put("a", b"2")
    await main.delete("b")
    await main.put("c", b"2")
    two = await main.commit("two")
    await main.put("d", b"3")
    await main.commit("three")
    result = await repo.revert(two.id, branch="main")
    assert result.commit is not None and result.commit.message.startswith("Revert ")
    assert [await read(main, k) for k in "abcd"] == ["1", "1", None, "3"]
    with pytest.raises(NothingToCommitError):
        await repo.revert(two.id, branch="main")  # already reverted
    await main.put("a", b"4")
    await main.commit("four")
    with pytest.raises(MergeConflictError):
        await repo.revert("main~1", branch="main")  # reverting 'revert' conflicts on a
