"""The version-control API of the client on every transport -- the embedded default
(with an injected clock), Redis + S3 (a real redis-server, moto's server) and a real
``lsmstore serve`` reached by the remote client: commits and their metadata, log, ref
views of old commits, branches and tags, diffs, garbage of deleted branches, and bad
input."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.local import LocalStore
from lsmstore.testing.servers import new_bucket
from tests.helpers.remote import lsm_server  # noqa: F401 - the fixture

T0 = 1_800_000_000.0


class Clock:
    now = T0

    def __call__(self) -> float:
        return self.now


@dataclass
class Target:
    store: Any
    namespace: Callable[[str], str]
    objects: Callable[[Any], ObjectStore]
    clocked: bool  # the store's clock is :class:`Clock`
    suffix: str = ""

    def time_of(self, created_at: int, before: float) -> bool:
        """Whether ``created_at`` is the store's now: T0 on a clocked store, else a
        second between ``before`` and now (the server's wall clock)."""
        if self.clocked:
            return created_at == int(T0)
        return int(before) <= created_at <= int(time.time())


@pytest.fixture(params=["embedded", "redis_s3", "server"])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    settings: dict[str, Any] = {
        "home": str(tmp_path / "home"),
        "batch_interval_ms": 1,
        "commit_range_min_bytes": 200,
        "commit_range_max_bytes": 2000,
        "commit_range_raggedness": 8,
    }
    if request.param == "embedded":
        config = lsmstore.load_config(**settings)
        async with lsmstore.Store(config, clock=Clock()) as s:
            yield Target(s, lambda n: (tmp_path / "ns" / n).as_uri(), lambda r: r.objects, True)
    elif request.param == "redis_s3":
        redis_url = request.getfixturevalue("redis_server_url")
        moto = request.getfixturevalue("moto")
        bucket = await new_bucket(moto.endpoint, "v")
        url = f"{redis_url}?prefix=v{uuid.uuid4().hex[:8]}:"
        async with lsmstore.connect(url, **settings) as s:
            yield Target(
                s, lambda n: f"s3://{bucket}/{n}?endpoint_url={moto.endpoint}",
                lambda r: r.objects, False,
            )  # fmt: skip
    else:
        server = request.getfixturevalue("lsm_server")
        key_id, secret = server.admin
        run = f"v{uuid.uuid4().hex[:8]}"
        opened: list[ObjectStore] = []

        def objects(repo: Any) -> ObjectStore:
            opened.append(LocalStore(server.home / "data" / run / repo.name))
            return opened[-1]

        async with lsmstore.connect(
            server.url, access_key_id=key_id, secret_access_key=secret
        ) as s:
            yield Target(s, lambda n: f"local://{run}/{n}", objects, False, "-" + run)
        for o in opened:
            await o.aclose()


@pytest.fixture
async def repo(target: Target) -> Any:
    name = "repo" + target.suffix
    return await target.store.create_repository(name, storage_namespace=target.namespace(name))


async def test_repository_starts_with_an_empty_commit(target: Target) -> None:
    before = time.time()
    name = "empty" + target.suffix
    repo = await target.store.create_repository(name, storage_namespace=target.namespace(name))
    [first] = [e async for e in repo.log()]
    assert first.parents == () and first.generation == 1
    assert (first.committer, first.message) == ("lsmstore", "Repository created")
    assert target.time_of(first.created_at, before)
    assert [e async for e in repo.ref("main").list()] == []
    assert (await repo.ref("main").commit()).id == first.id


async def test_commit_and_its_fields(repo: Any, target: Target) -> None:
    main = repo.branch()
    await main.put_many([("a", b"1"), ("b", b"2")])
    before = time.time()
    c = await main.commit("first", metadata={"job": "etl-7"}, committer="alice")
    assert (c.message, c.committer, dict(c.metadata)) == ("first", "alice", {"job": "etl-7"})
    assert target.time_of(c.created_at, before) and c.generation == 2
    head = await main.head()
    assert head.base == c.id and head.l1 == () and head.l2 == ()
    with pytest.raises(NothingToCommitError):
        await main.commit("again")
    empty = await main.commit("marker", allow_empty=True)
    assert empty.parents == (c.id,) and empty.metarange_id == c.metarange_id
    with pytest.raises(InvalidInputError):
        await main.commit("bad", metadata={"k": 3})  # type: ignore[dict-item]


async def test_log_and_ref_views(repo: Any) -> None:
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


async def test_bad_and_unknown_ref_expressions(repo: Any) -> None:
    with pytest.raises(InvalidRefExpressionError):
        await repo.ref("main~x").get("k")
    with pytest.raises(RefNotFoundError):
        await repo.ref("main~1").get("k")  # the first commit has no parent
    with pytest.raises(RefNotFoundError):
        await repo.ref("nope").get("k")
    with pytest.raises(InvalidRefExpressionError):
        [e async for e in repo.log("a..b")]


async def test_commit_prefixes(repo: Any) -> None:
    main = repo.branch()
    await main.put("k", b"1")
    cid = (await main.commit("c")).id
    assert await repo.ref(cid[:6]).get("k") == b"1"  # six digits are enough
    with pytest.raises(RefNotFoundError):
        await repo.ref(cid[:5]).get("k")  # five are a (missing) branch name


async def test_branches_and_tags(repo: Any) -> None:
    main = repo.branch()
    await main.put("a", b"1")
    c1 = await main.commit("one")
    await main.put("staged", b"s")
    dev = await repo.create_branch("dev")
    assert dev.name == "dev"
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
    repo: Any, target: Target
) -> None:
    dev = await repo.create_branch("dev")
    await dev.put("a", b"1")
    await dev.put("b", b"2")
    staged = (await dev.head()).l1
    await repo.delete_branch("dev")
    objects = target.objects(repo)
    records = [m.key async for m in objects.list(GC_PREFIX + "dev/")]
    [key] = records
    doc = json.loads(await objects.get(key))
    assert doc["reason"] == "branch deleted"
    assert sorted(f for _, f in doc["files"]) == sorted(staged)
    with pytest.raises(RefNotFoundError):
        await dev.head()


async def test_diffs(repo: Any) -> None:
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
