"""MemoryStore: the shared contract plus the process-wide registry and copy semantics."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator

import pytest

from lsmstore.errors import (
    ClosedError,
    InvalidInputError,
    InvalidNameError,
    ObjectExistsError,
    ObjectNotFoundError,
    UnavailableError,
)
from lsmstore.storage.base import ForwardingStore, ObjectStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore
from lsmstore.testing.store_contract import StoreContract

_names = itertools.count()


class TestMemoryStore(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[ObjectStore]:
        name = f"contract-{next(_names)}"
        async with MemoryStore(name) as s:
            yield s
        MemoryStore.forget(name)


async def test_named_stores_are_shared() -> None:
    a, b = MemoryStore("shared-test"), MemoryStore("shared-test")
    try:
        assert a.url == b.url == "mem://shared-test"
        await a.put("k", b"v")
        assert await b.get("k") == b"v"
        await a.aclose()
        assert await b.get("k") == b"v"  # closing one handle leaves the others working
    finally:
        MemoryStore.forget("shared-test")
    assert [m async for m in MemoryStore("shared-test").list()] == []
    MemoryStore.forget("shared-test")


async def test_anonymous_stores_are_private() -> None:
    a, b = MemoryStore(), MemoryStore()
    assert a.url != b.url
    await a.put("k", b"v")
    assert [m async for m in b.list()] == []


async def test_data_is_copied_in() -> None:
    store = MemoryStore()
    buf = bytearray(b"abc")
    await store.put("k", buf)  # type: ignore[arg-type]  # a caller passing a mutable buffer
    buf[0] = ord("z")
    data = await store.get("k")
    assert data == b"abc" and type(data) is bytes


@pytest.mark.parametrize("name", ["", "a/b", "a\nb"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(InvalidInputError):
        MemoryStore(name)


# --- ForwardingStore (the base of pass-through wrappers) -------------------------------


class TestForwardingStoreContract(StoreContract):
    """A wrapper that overrides nothing is the store it wraps."""

    @pytest.fixture
    async def store(self) -> AsyncIterator[ObjectStore]:
        async with ForwardingStore(MemoryStore()) as s:
            yield s


# --- FaultyStore (wrapping a MemoryStore) ------------------------------------------


class TestFaultyStoreContract(StoreContract):
    """With no fault configured, the wrapper behaves exactly like its inner store."""

    @pytest.fixture
    async def store(self) -> AsyncIterator[ObjectStore]:
        async with FaultyStore(MemoryStore()) as s:
            yield s


async def test_fail_next_calls_then_recover() -> None:
    store = FaultyStore(MemoryStore())
    store.fail("put", times=2)
    for _ in range(2):
        with pytest.raises(UnavailableError) as e:
            await store.put("k", b"v")
        assert not e.value.outcome_unknown
    assert [m async for m in store.inner.list()] == []  # nothing reached the inner store
    await store.put("k", b"v")
    assert await store.get("k") == b"v"
    assert store.calls == {"put": 3, "get": 1}


async def test_fail_matching_keys_until_removed() -> None:
    store = FaultyStore(MemoryStore())
    await store.put("a/1", b"1")
    await store.put("b/1", b"2")
    fault = store.fail(("get", "get_range"), times=None, prefix="a/")
    for _ in range(3):
        with pytest.raises(UnavailableError):
            await store.get("a/1")
        with pytest.raises(UnavailableError):
            await store.get_range("a/1", 0, 1)
    assert await store.get("b/1") == b"2"
    assert fault.hits == 6
    store.remove(fault)
    assert await store.get("a/1") == b"1"
    assert store.count("get", prefix="a/") == 4


async def test_custom_error_and_predicate() -> None:
    store = FaultyStore(MemoryStore())
    await store.put("x.sst", b"v")
    store.fail(
        "get", match=lambda k: k.endswith(".sst"), error=lambda op, k: ObjectNotFoundError(k)
    )
    with pytest.raises(ObjectNotFoundError):
        await store.get("x.sst")
    assert await store.get("x.sst") == b"v"


async def test_land_then_fail() -> None:
    store = FaultyStore(MemoryStore())
    store.land_then_fail("put")
    with pytest.raises(UnavailableError) as e:
        await store.put("k", b"v")
    assert e.value.outcome_unknown
    assert await store.get("k") == b"v"  # it landed
    with pytest.raises(ObjectExistsError):
        await store.put("k", b"v")  # a blind retry of a CREATE now sees the object


async def test_probability_uses_the_injected_rng() -> None:
    async def run(seed: int) -> list[bool]:
        store = FaultyStore(MemoryStore(), rng=random.Random(seed))
        await store.put("k", b"")
        store.fail("head", times=None, probability=0.5)
        out = []
        for _ in range(40):
            try:
                await store.head("k")
                out.append(False)
            except UnavailableError:
                out.append(True)
        return out

    first, again = await run(7), await run(7)
    assert first == again and 5 < sum(first) < 35


async def test_delay_uses_the_injected_sleep() -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    store = FaultyStore(MemoryStore(), sleep=fake_sleep)
    store.delay("put", 0.25, times=2)
    for i in range(3):
        await store.put(f"k{i}", b"")
    assert slept == [0.25, 0.25]


async def test_hold_pauses_calls_until_released() -> None:
    store = FaultyStore(MemoryStore())
    await store.put("k", b"v")
    gate = store.hold("get", times=None)
    tasks = [asyncio.create_task(store.get("k")) for _ in range(3)]
    await gate.entered.wait()
    await asyncio.sleep(0)
    assert not any(t.done() for t in tasks)
    gate.release()
    assert await asyncio.gather(*tasks) == [b"v"] * 3


async def test_invalid_keys_and_closing_are_not_counted() -> None:
    inner = MemoryStore()
    store = FaultyStore(inner)
    store.fail("get", times=None)
    with pytest.raises(InvalidNameError):
        await store.get("../x")
    await store.aclose()
    with pytest.raises(ClosedError):
        await store.get("k")
    with pytest.raises(ClosedError):
        await inner.get("k")  # closing the wrapper closes the inner store
    assert store.calls == {}


def test_unknown_operation() -> None:
    with pytest.raises(InvalidInputError):
        FaultyStore(MemoryStore()).fail("getx")
