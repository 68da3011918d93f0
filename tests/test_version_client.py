"""The version-control API of the client on the embedded default: commits and their
metadata, log, ref views of old commits, branches and tags, diffs, garbage of deleted
branches, and bad input."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lsmstore
from lsmstore.errors import (
    InvalidInputError,
    InvalidRefExpressionError,
    NotFoundError,
    NothingToCommitError,
    RefExistsError,
    RefNotFoundError,
)
from lsmstore.gc.staging import GC_PREFIX

T0 = 1_800_000_000.0


class Clock:
    now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[lsmstore.Store]:
    config = lsmstore.load_config(
        home=str(tmp_path / "home"),
        batch_interval_ms=1,
        commit_range_min_bytes=200,
        commit_range_max_bytes=2000,
        commit_range_raggedness=8,
    )
    async with lsmstore.Store(config, clock=Clock()) as s:
        yield s


@pytest.fixture
async def repo(store: lsmstore.Store, tmp_path: Path) -> lsmstore.Repository:
    return await store.create_repository("repo", storage_namespace=(tmp_path / "ns").as_uri())


async def test_repository_starts_with_an_empty_commit(repo: lsmstore.Repository) -> None:
    [first] = [e async for e in repo.log()]
    assert first.parents == () and first.generation == 1
    assert (first.committer, first.message) == ("lsmstore", "Repository created")
    assert first.created_at == int(T0)
    assert [e async for e in repo.ref("main").list()] == []
    assert (await repo.ref("main").commit()).id == first.id


async def test_commit_and_its_fields(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    await main.put_many([("a", b"1"), ("b", b"2")])
    c = await main.commit("first", metadata={"job": "etl-7"}, committer="alice")
    assert (c.message, c.committer, dict(c.metadata)) == ("first", "alice", {"job": "etl-7"})
    assert c.created_at == int(T0) and c.generation == 2
    head = await main.head()
    assert head.base == c.id and head.l1 == () and head.l2 == ()
    with pytest.raises(NothingToCommitError):
        await main.commit("again")
    empty = await main.commit("marker", allow_empty=True)
    assert empty.parents == (c.id,) and empty.metarange_id == c.metarange_id
    with pytest.raises(InvalidInputError):
        await main.commit("bad", metadata={"k": 3})  # type: ignore[dict-item]


async def test_log_and_ref_views(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    ids = []
    for i in range(4):
        await main.put("k", f"v{i}".encode())
        await main.put(f"only{i}", b"x")
        ids.append((await main.commit(f"c{i}")).id)
    await main.put("k", b"staged")
    log = [e async for e in repo.log("main")]
    assert [e.message for e in log] == ["c3", "c2", "c1", "c0", "Repository created"]
    assert [e.id for e in log[:4]] == ids[::-1]
    page = [e.message async for e in repo.log("main", after=ids[2], limit=2)]
    assert page == ["c1", "c0"]
    assert [e.message async for e in repo.log("main~2", limit=1)] == ["c1"]

    live = repo.ref("main")
    assert await live.get("k") == b"staged" and live.id is None
    old = repo.ref("main~2")
    assert await old.get("k") == b"v1"
    assert old.id == ids[1]
    assert await old.exists("only1") and not await old.exists("only2")
    assert [e.path async for e in old.list(prefix="only")] == ["only0", "only1"]
    assert (await old.commit()).message == "c1"
    short = repo.ref(ids[0][:8])
    assert await short.get("k") == b"v0" and (await short.commit()).id == ids[0]
    with pytest.raises(NotFoundError):
        await old.get("only3")


async def test_bad_and_unknown_ref_expressions(repo: lsmstore.Repository) -> None:
    with pytest.raises(InvalidRefExpressionError):
        await repo.ref("main~x").get("k")
    with pytest.raises(RefNotFoundError):
        await repo.ref("main~1").get("k")  # the first commit has no parent
    with pytest.raises(RefNotFoundError):
        await repo.ref("nope").get("k")
    with pytest.raises(InvalidRefExpressionError):
        [e async for e in repo.log("a..b")]


async def test_commit_prefixes(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    await main.put("k", b"1")
    cid = (await main.commit("c")).id
    assert await repo.ref(cid[:6]).get("k") == b"1"  # six digits are enough
    with pytest.raises(RefNotFoundError):
        await repo.ref(cid[:5]).get("k")  # five are a (missing) branch name


async def test_branches_and_tags(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    await main.put("a", b"1")
    c1 = await main.commit("one")
    await main.put("staged", b"s")
    dev = await repo.create_branch("dev")
    assert isinstance(dev, lsmstore.Branch) and dev.name == "dev"
    assert (await dev.head()).base == c1.id
    assert not await dev.exists("staged")  # committed state only
    await repo.create_branch("old", source="main~1")
    assert not await repo.branch("old").exists("a")
    assert await repo.list_branches() == ["dev", "main", "old"]
    with pytest.raises(RefExistsError):
        await repo.create_branch("dev")

    assert await repo.create_tag("v1", "main") == c1.id
    with pytest.raises(RefExistsError):
        await repo.create_tag("v1", "dev")
    assert await repo.list_tags() == ["v1"]
    assert await repo.ref("v1").get("a") == b"1"
    await repo.delete_tag("v1")
    assert await repo.list_tags() == []
    with pytest.raises(RefNotFoundError):
        await repo.delete_tag("v1")

    with pytest.raises(InvalidInputError):
        await repo.delete_branch("main")
    await repo.delete_branch("old")
    assert await repo.list_branches() == ["dev", "main"]


async def test_deleting_a_branch_records_its_staged_files_as_garbage(
    repo: lsmstore.Repository,
) -> None:
    dev = await repo.create_branch("dev")
    await dev.put("a", b"1")
    await dev.put("b", b"2")
    staged = (await dev.head()).l1
    await repo.delete_branch("dev")
    records = [m.key async for m in repo.objects.list(GC_PREFIX + "dev/")]
    [key] = records
    doc = json.loads(await repo.objects.get(key))
    assert doc["reason"] == "branch deleted"
    assert sorted(f for _, f in doc["files"]) == sorted(staged)
    with pytest.raises(RefNotFoundError):
        await dev.head()


async def test_diffs(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    await main.put_many([("a", b"1"), ("b", b"1"), ("c", b"1")])
    await main.commit("base")
    dev = await repo.create_branch("dev")
    await dev.put("a", b"2")
    await dev.delete("b")
    await dev.put("d", b"1")
    assert [(c.key, c.kind) for c in await dev.diff_uncommitted()] == [
        (b"a", "changed"),
        (b"b", "removed"),
        (b"d", "added"),
    ]
    assert await repo.diff_uncommitted("main") == []
    assert [c async for c in repo.diff("main", "dev")] == []  # nothing committed yet
    await dev.commit("dev")
    assert [(c.key, c.kind) async for c in repo.diff("main", "dev")] == [
        (b"a", "changed"),
        (b"b", "removed"),
        (b"d", "added"),
    ]
    assert [(c.key, c.kind) async for c in repo.diff("dev", "main")] == [
        (b"a", "changed"),
        (b"b", "added"),
        (b"d", "removed"),
    ]
