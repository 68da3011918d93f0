"""The Redis RefStore: the shared contract on a real redis-server, plus failure tests."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from lsmstore.errors import UnavailableError
from lsmstore.refstore.base import Ref, Repository
from lsmstore.refstore.redis import RedisRefStore
from lsmstore.refstore.url import open_refstore
from lsmstore.testing.refstore_contract import REPO, FakeClock, RefStoreContract, branch
from lsmstore.testing.servers import RedisServer


async def _keys(url: str, prefix: str) -> list[str]:
    client = Redis.from_url(url, decode_responses=True)
    try:
        return sorted([k async for k in client.scan_iter(match=f"{prefix}*", count=1000)])
    finally:
        await client.aclose()


async def _drop(url: str, prefix: str) -> None:
    client = Redis.from_url(url, decode_responses=True)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def prefix(redis_server_url: str) -> AsyncIterator[str]:
    p = f"test:{uuid.uuid4().hex}:"
    yield p
    await _drop(redis_server_url, p)


class TestRedisRefStore(RefStoreContract):
    lease_ttl = 0.5  # real time: Redis expires leases itself

    @pytest.fixture
    async def refstore(self, redis_server_url: str, prefix: str) -> AsyncIterator[RedisRefStore]:
        self.clock = FakeClock(time.time())  # counters and members follow this clock
        store = RedisRefStore(redis_server_url, key_prefix=prefix, clock=self.clock)
        yield store
        await store.aclose()

    async def pass_counter_time(self, seconds: float) -> None:
        self.clock.now += seconds


async def test_key_layout_and_cleanup(redis_server_url: str, prefix: str) -> None:
    async with RedisRefStore(redis_server_url, key_prefix=prefix) as store:
        await store.create_repository(Repository(REPO, "file:///d", "main"))
        await store.create_ref(REPO, "main", branch(l1=("f1", "f2")))
        await store.create_ref(REPO, "v1", Ref("tag", "c0"))
        await store.acquire_lease("compact/repo1/main", "w1", 60)
        assert await _keys(redis_server_url, prefix) == [
            f"{prefix}lease:compact/repo1/main",
            f"{prefix}ref:{REPO}:main",
            f"{prefix}ref:{REPO}:v1",
            f"{prefix}refs:{REPO}",
            f"{prefix}repo:{REPO}",
            f"{prefix}repos",
        ]
        await store.release_lease("compact/repo1/main", "w1")
        await store.delete_repository(REPO)
        assert await _keys(redis_server_url, prefix) == []


async def test_prefixes_isolate_deployments(redis_server_url: str, prefix: str) -> None:
    async with (
        RedisRefStore(redis_server_url, key_prefix=prefix + "a:") as a,
        RedisRefStore(redis_server_url, key_prefix=prefix + "b:") as b,
    ):
        await a.create_repository(Repository(REPO, "file:///a", "main"))
        assert await b.list_repositories() == []
        await b.create_repository(Repository(REPO, "file:///b", "main"))
        assert (await a.get_repository(REPO)).storage_namespace == "file:///a"


async def test_scripts_reload_after_flush(redis_server_url: str, prefix: str) -> None:
    async with RedisRefStore(redis_server_url, key_prefix=prefix) as store:
        await store.create_repository(Repository(REPO, "file:///d", "main"))
        await store.create_ref(REPO, "main", branch())
        await store.append_l1(REPO, "main", "f1")
        admin = Redis.from_url(redis_server_url)
        try:
            await admin.script_flush()
        finally:
            await admin.aclose()
        assert (await store.append_l1(REPO, "main", "f2")).l1 == ("f1", "f2")


async def test_open_by_url(redis_server_url: str, prefix: str) -> None:
    store = open_refstore(f"{redis_server_url}?prefix={prefix}&max_connections=4&timeout=2")
    assert isinstance(store, RedisRefStore) and store.key_prefix == prefix
    async with store:
        await store.create_repository(Repository(REPO, "file:///d", "main"))
    assert f"{prefix}repos" in await _keys(redis_server_url, prefix)


async def test_server_stopped_mid_test_is_unavailable(prefix: str) -> None:
    server = RedisServer()
    await asyncio.to_thread(server.start)
    try:
        async with RedisRefStore(server.url, key_prefix=prefix, timeout=2.0) as store:
            await store.create_repository(Repository(REPO, "file:///d", "main"))
            await store.create_ref(REPO, "main", branch())
            assert (await store.append_l1(REPO, "main", "f1")).l1 == ("f1",)
            await asyncio.to_thread(server.stop)
            async with asyncio.timeout(10):
                with pytest.raises(UnavailableError) as e:
                    await store.append_l1(REPO, "main", "f2")
                assert e.value.outcome_unknown
                with pytest.raises(UnavailableError):
                    await store.get_ref(REPO, "main")
                with pytest.raises(UnavailableError) as e:
                    await store.swap_compacted(
                        REPO, "main", base="c0", l2_old=(), l1_prefix=("f1",), l2_new=()
                    )
                assert e.value.outcome_unknown
    finally:
        await asyncio.to_thread(server.stop)


async def test_pool_waits_for_a_connection(redis_server_url: str, prefix: str) -> None:
    async with RedisRefStore(redis_server_url, key_prefix=prefix, max_connections=2) as store:
        await store.create_repository(Repository(REPO, "file:///d", "main"))
        await store.create_ref(REPO, "main", branch())
        await asyncio.gather(*(store.append_l1(REPO, "main", f"f{i}") for i in range(50)))
        assert len((await store.get_ref(REPO, "main")).l1) == 50
