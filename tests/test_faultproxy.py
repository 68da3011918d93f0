"""The fault-injecting proxy in front of moto's S3 server: transparent without faults
(the object-store contract's basics through it), and each fault does what it says --
an injected error or an early reset changes nothing, a reset after forwarding loses
only the answer."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from lsmstore.errors import ObjectExistsError, ObjectNotFoundError, UnavailableError
from lsmstore.storage.base import PutMode
from lsmstore.storage.s3 import S3Store
from lsmstore.testing.faultproxy import FaultPlan, FaultProxy, fault_proxy
from lsmstore.testing.servers import MotoServer


@pytest.fixture
async def proxy(moto: MotoServer) -> AsyncIterator[FaultProxy]:
    async with fault_proxy(moto.endpoint, seed=1) as p:
        yield p


@pytest.fixture
async def bucket(moto: MotoServer) -> str:
    from aiobotocore.session import get_session

    name = f"fp-{uuid.uuid4().hex[:12]}"
    async with get_session().create_client(
        "s3", endpoint_url=moto.endpoint, region_name="us-east-1"
    ) as client:
        await client.create_bucket(Bucket=name)
    return name


async def test_transparent_without_faults(proxy: FaultProxy, bucket: str) -> None:
    store = S3Store(bucket, "t", endpoint_url=proxy.endpoint)
    try:
        await store.put("a/1", b"x" * 100_000)
        await store.put("a/2", b"")
        assert await store.get("a/1") == b"x" * 100_000
        assert await store.get_range("a/1", 10, 20) == b"x" * 10
        assert (await store.head("a/1")).size == 100_000
        assert [m.key async for m in store.list("a/")] == ["a/1", "a/2"]
        with pytest.raises(ObjectExistsError):
            await store.put("a/2", b"again")
        await store.delete("a/1")
        with pytest.raises(ObjectNotFoundError):
            await store.head("a/1")
    finally:
        await store.aclose()
    assert set(proxy.counts) == {"forward"} and proxy.counts["forward"] >= 8


async def test_errors_and_early_resets_change_nothing(
    proxy: FaultProxy, bucket: str, moto: MotoServer
) -> None:
    store = S3Store(bucket, "t", endpoint_url=proxy.endpoint, max_attempts=2)
    direct = S3Store(bucket, "t", endpoint_url=moto.endpoint)
    try:
        for plan in (FaultPlan(error=1.0), FaultPlan(reset_before=1.0)):
            proxy.plan = plan
            with pytest.raises(UnavailableError):
                await store.put("k", b"v")
            with pytest.raises(ObjectNotFoundError):
                await direct.head("k")  # never reached the server
        # (the client retries: max_attempts, plus a retry of a reset pooled connection)
        assert proxy.counts["error"] == 2 and proxy.counts["reset_before"] >= 2
        proxy.plan = FaultPlan(delay=1.0, max_delay_s=0.01)
        await store.put("k", b"v")  # slow, but through
        assert await direct.get("k") == b"v"
    finally:
        await store.aclose()
        await direct.aclose()


async def test_reset_after_forwarding_loses_only_the_answer(
    proxy: FaultProxy, bucket: str, moto: MotoServer
) -> None:
    store = S3Store(bucket, "t", endpoint_url=proxy.endpoint, max_attempts=1)
    direct = S3Store(bucket, "t", endpoint_url=moto.endpoint)
    try:
        proxy.plan = FaultPlan(reset_after=1.0)
        with pytest.raises(UnavailableError):
            await store.put("landed", b"v", PutMode.CREATE)
        assert await direct.get("landed") == b"v"  # it happened
        proxy.plan = FaultPlan()
        with pytest.raises(ObjectExistsError):  # it is there
            await store.put("landed", b"other", PutMode.CREATE)
    finally:
        await store.aclose()
        await direct.aclose()
