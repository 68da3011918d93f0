"""A representative subset of version control on Redis (a real redis-server) and S3
(moto's server over real HTTP): commits, log, ref expressions including commit-ID
prefixes found by S3 listings, tags, merge with staged changes, racing commits, and
the committer worker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lsmstore
from committer.worker import Worker
from lsmstore.errors import ConflictError, MergeConflictError, NothingToCommitError
from lsmstore.service import capture_events
from lsmstore.testing.servers import MotoServer, new_bucket


@pytest.fixture
async def store(
    redis_server_url: str, moto: MotoServer, tmp_path: Path
) -> AsyncIterator[lsmstore.Store]:
    url = f"{redis_server_url}?prefix=v{uuid.uuid4().hex[:8]}:"
    async with lsmstore.connect(
        url,
        home=str(tmp_path / "home"),
        batch_interval_ms=1,
        commit_range_min_bytes=200,
        commit_range_max_bytes=2000,
        commit_range_raggedness=8,
    ) as s:
        yield s


@pytest.fixture
async def repo(store: lsmstore.Store, moto: MotoServer) -> lsmstore.Repository:
    bucket = await new_bucket(moto.endpoint, "v")
    namespace = f"s3://{bucket}/repo?endpoint_url={moto.endpoint}"
    return await store.create_repository("repo", storage_namespace=namespace)


async def test_commits_log_and_refs(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    await main.put_many([(f"k{i:03d}", b"v1") for i in range(300)])
    one = await main.commit("one", metadata={"run": "1"})
    await main.put("k007", b"v2")
    await main.delete("k008")
    two = await main.commit("two")
    assert two.parents == (one.id,)
    assert [e.message async for e in repo.log()] == ["two", "one", "Repository created"]
    assert await repo.ref("main~1").get("k007") == b"v1"
    assert await repo.ref(one.id[:7]).exists("k008")  # prefix found by an S3 listing
    assert not await repo.ref(two.id[:7]).exists("k008")
    assert await repo.create_tag("v1", "main~1") == one.id
    assert (await repo.ref("v1").commit()).metadata == {"run": "1"}
    assert [(c.key, c.kind) async for c in repo.diff("v1", "main")] == [
        (b"k007", "changed"),
        (b"k008", "removed"),
    ]


async def test_merge_keeps_staged_changes(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    await main.put_many([("a", b"1"), ("b", b"1")])
    await main.commit("base")
    dev = await repo.create_branch("dev")
    await dev.put_many([("a", b"dev"), ("c", b"dev")])
    await dev.commit("dev")
    await main.put("a", b"staged")
    result = await repo.merge("dev", into="main")
    assert result.merged and result.commit is not None
    assert (await main.head()).base == result.commit_id
    assert await main.get("a") == b"staged" and await main.get("c") == b"dev"
    assert await repo.ref(result.commit_id).get("a") == b"dev"
    await main.commit("after")
    await dev.put("b", b"dev")
    await dev.commit("dev 2")
    await main.put("b", b"main")
    await main.commit("main 2")
    with pytest.raises(MergeConflictError) as info:
        await repo.merge("dev", into="main")
    assert info.value.keys == [b"b"]


async def test_racing_commits_on_redis(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    await main.put_many([(f"k{i:03d}", b"v") for i in range(200)])

    async def commit(i: int) -> str:
        try:
            return (await main.commit(f"racer {i}")).id
        except (NothingToCommitError, ConflictError) as e:
            return type(e).__name__

    outcomes = await asyncio.gather(*(commit(i) for i in range(4)))
    made = [o for o in outcomes if len(o) == 64]
    assert len(made) >= 1
    assert set(outcomes) - set(made) <= {"NothingToCommitError"}
    head = await main.head()
    assert head.l1 == () and head.base in made
    assert len([e async for e in repo.ref("main").list()]) == 200


async def test_worker_commits_on_redis_and_s3(
    store: lsmstore.Store, repo: lsmstore.Repository
) -> None:
    main = repo.branch()
    await main.put("a", b"1")
    await main.flush()
    with capture_events("committer") as out:
        worker = Worker(store.refstore, store.config, force=True)
        assert await worker.run_once() == 1
        await worker.aclose()
    [line] = out.events("commit")
    assert line["outcome"] == "committed" and line["repo"] == "repo"
    assert (await main.head()).base == line["commit_id"]
    assert await repo.ref("main").get("a") == b"1"
    assert (await repo.ref("main").commit()).message == "Automatic commit"
