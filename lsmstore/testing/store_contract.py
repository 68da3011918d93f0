"""The conformance suite every :class:`ObjectStore` backend passes.

A backend's test module subclasses :class:`StoreContract` and supplies an async
``store`` fixture yielding a fresh, empty store (closed by the fixture afterwards)::

    class TestLocalStore(StoreContract):
        @pytest.fixture
        async def store(self, tmp_path: Path) -> AsyncIterator[ObjectStore]:
            async with LocalStore(tmp_path) as s:
                yield s

Keys used here never make one key a "directory" of another (``a`` and ``a/b``), which
a filesystem-backed store cannot represent.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from lsmstore.errors import (
    ClosedError,
    InvalidInputError,
    InvalidNameError,
    NotAvailableError,
    ObjectExistsError,
    ObjectNotFoundError,
)
from lsmstore.storage.base import ObjectMeta, ObjectStore, PutMode

BAD_KEYS = ["", "/a", "a/", "a//b", "..", "a/../b", "./a", "a/.", "a\x00b", "a\nb", "a\x7fb"]

# Lexicographic order is by code point: '-' < '.' < '/' < '0' < 'a' < 'é'.
ORDERED_KEYS = ["x/a-", "x/a.b", "x/a/b", "x/a0", "x/ab/c/d", "x/é", "y"]


async def put_many(store: ObjectStore, keys: list[str], data: bytes = b"", width: int = 32) -> None:
    """Put ``data`` under every key, ``width`` puts at a time."""
    limit = asyncio.Semaphore(width)

    async def one(key: str) -> None:
        async with limit:
            await store.put(key, data)

    await asyncio.gather(*(one(k) for k in keys))


async def collect(store: ObjectStore, prefix: str = "", after: str | None = None) -> list[str]:
    return [m.key async for m in store.list(prefix, after=after)]


async def aiter_of(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def collect_stream(store: ObjectStore, key: str) -> bytes:
    return b"".join([c async for c in store.get_stream(key)])


class StoreContract:
    """Async tests every backend must pass; subclasses provide the ``store`` fixture."""

    #: Keys for the pagination test: more than one internal page of the backend
    #: (1000 keys for S3, LocalStore and MemoryStore by default).
    MANY = 1100
    #: Whether the backend makes pre-signed URLs (S3); others raise NotAvailableError.
    PRESIGNS = False

    @pytest.fixture
    async def store(self) -> AsyncIterator[ObjectStore]:
        raise NotImplementedError("a backend's test class supplies the `store` fixture")
        yield  # pragma: no cover

    # --- put / get -------------------------------------------------------------------

    @pytest.mark.parametrize("size", [0, 1, 4096, 3 << 20 | 17])
    async def test_round_trip(self, store: ObjectStore, size: int) -> None:
        data = os.urandom(size)
        await store.put("dir/obj", data)
        assert await store.get("dir/obj") == data
        assert (await store.head("dir/obj")).size == size

    async def test_presigned_urls(self, store: ObjectStore) -> None:
        """A pre-signed GET reads the object and a pre-signed PUT writes one, with no
        other credentials; a backend without them says so, and makes nothing."""
        await store.put("signed/a", b"signed data")
        if not self.PRESIGNS:
            for method in ("GET", "PUT"):
                with pytest.raises(NotAvailableError):
                    await store.presigned_url("signed/a", method, 60)
            return
        with pytest.raises(InvalidInputError):
            await store.presigned_url("signed/a", "GET", 0)
        with pytest.raises(InvalidInputError):
            await store.presigned_url("../a", "GET", 60)
        get = await store.presigned_url("signed/a", "GET", 60)
        put = await store.presigned_url("signed/b", "PUT", 60)
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.get(get)
            assert r.status_code == 200 and r.content == b"signed data"
            # With a content type of the writer's choosing (which a SigV2 URL would sign).
            r = await client.put(
                put, content=b"written directly", headers={"Content-Type": "text/x-any"}
            )
            assert r.status_code == 200, r.text
        assert await store.get("signed/b") == b"written directly"

    async def test_url_is_a_string(self, store: ObjectStore) -> None:
        assert isinstance(store.url, str) and "://" in store.url

    async def test_missing_object(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFoundError) as e:
            await store.get("no/such")
        assert e.value.key == "no/such" and isinstance(e.value, FileNotFoundError)
        with pytest.raises(ObjectNotFoundError):
            await store.get_range("no/such", 0, 10)
        with pytest.raises(ObjectNotFoundError):
            await store.head("no/such")

    async def test_create_twice_keeps_the_original(self, store: ObjectStore) -> None:
        await store.put("k", b"first")
        with pytest.raises(ObjectExistsError) as e:
            await store.put("k", b"second")
        assert e.value.key == "k"
        with pytest.raises(ObjectExistsError):
            await store.put("k", b"second", PutMode.CREATE)
        assert await store.get("k") == b"first"

    async def test_overwrite(self, store: ObjectStore) -> None:
        await store.put("k", b"absent before", PutMode.OVERWRITE)
        assert await store.get("k") == b"absent before"
        await store.put("k", b"new", PutMode.OVERWRITE)
        assert await store.get("k") == b"new"
        assert (await store.head("k")).size == 3

    async def test_concurrent_create_has_one_winner(self, store: ObjectStore) -> None:
        payloads = [f"writer {i}".encode() * (i + 1) for i in range(20)]
        results = await asyncio.gather(
            *(store.put("race", p) for p in payloads), return_exceptions=True
        )
        winners = [i for i, r in enumerate(results) if r is None]
        assert len(winners) == 1, results
        losers = [r for r in results if r is not None]
        assert all(isinstance(r, ObjectExistsError) for r in losers), losers
        assert await store.get("race") == payloads[winners[0]]

    async def test_put_fresh(self, store: ObjectStore) -> None:
        durable = await store.put_fresh("fresh/a", b"fresh bytes")
        assert await store.get("fresh/a") == b"fresh bytes"  # readable once it returns
        await durable
        assert durable.done() and durable.exception() is None
        assert (await store.head("fresh/a")).size == 11
        empty = await store.put_fresh("fresh/empty", b"")
        await empty
        assert await store.get("fresh/empty") == b""
        with pytest.raises(ObjectExistsError):
            await store.put_fresh("fresh/a", b"other")
        assert await store.get("fresh/a") == b"fresh bytes"
        await asyncio.gather(*[await store.put_fresh(f"fresh/n{i}", b"%d" % i) for i in range(20)])
        assert [m.key async for m in store.list("fresh/n")] == sorted(
            f"fresh/n{i}" for i in range(20)
        )

    # --- ranges, head, delete ----------------------------------------------------------

    async def test_get_range(self, store: ObjectStore) -> None:
        data = bytes(range(256)) * 4
        await store.put("r", data)
        assert await store.get_range("r", 0, 10) == data[:10]
        assert await store.get_range("r", 100, 612) == data[100:612]
        assert await store.get_range("r", 1000, 5000) == data[1000:]  # past the end
        assert await store.get_range("r", 1024, 2000) == b""  # starts at the end
        assert await store.get_range("r", 5000, 6000) == b""  # starts past the end
        assert await store.get_range("r", 7, 7) == b""  # empty range

    async def test_get_range_of_empty_object(self, store: ObjectStore) -> None:
        await store.put("empty", b"")
        assert await store.get_range("empty", 0, 10) == b""
        assert await store.get("empty") == b""

    async def test_delete(self, store: ObjectStore) -> None:
        await store.put("d/k", b"v")
        await store.delete("d/k")
        with pytest.raises(ObjectNotFoundError):
            await store.get("d/k")
        await store.delete("d/k")  # missing_ok by default
        with pytest.raises(ObjectNotFoundError):
            await store.delete("d/k", missing_ok=False)
        await store.put("d/k", b"again")  # CREATE works after a delete
        assert await store.get("d/k") == b"again"
        assert await collect(store) == ["d/k"]

    # --- list ------------------------------------------------------------------------

    async def test_list_order_and_sizes(self, store: ObjectStore) -> None:
        for i, key in enumerate(reversed(ORDERED_KEYS)):
            await store.put(key, b"x" * i)
        listed = [m async for m in store.list()]
        assert [m.key for m in listed] == ORDERED_KEYS
        assert all(isinstance(m, ObjectMeta) for m in listed)
        sizes = {k: i for i, k in enumerate(reversed(ORDERED_KEYS))}
        assert [m.size for m in listed] == [sizes[k] for k in ORDERED_KEYS]

    async def test_list_prefix(self, store: ObjectStore) -> None:
        for key in ORDERED_KEYS:
            await store.put(key, b"")
        assert await collect(store, "x/") == ORDERED_KEYS[:-1]
        assert await collect(store, "x/a") == ORDERED_KEYS[:5]
        assert await collect(store, "x/a/") == ["x/a/b"]
        assert await collect(store, "x/ab/c") == ["x/ab/c/d"]
        assert await collect(store, "x/a.") == ["x/a.b"]
        assert await collect(store, "y") == ["y"]
        assert await collect(store, "z") == []
        assert await collect(store, "x/q/") == []
        assert await collect(store, "../") == []

    async def test_list_after(self, store: ObjectStore) -> None:
        for key in ORDERED_KEYS:
            await store.put(key, b"")
        assert await collect(store, after="x/a.b") == ORDERED_KEYS[2:]
        assert await collect(store, after="x/a") == ORDERED_KEYS  # "x/a" sorts first
        assert await collect(store, after="x/a/") == ORDERED_KEYS[2:]
        assert await collect(store, after="x/a/b") == ORDERED_KEYS[3:]
        assert await collect(store, after="x/ab/") == ORDERED_KEYS[4:]
        assert await collect(store, after="x/ab/c/d") == ORDERED_KEYS[5:]
        assert await collect(store, after="y") == []
        assert await collect(store, "x/", after="a") == ORDERED_KEYS[:-1]  # after < prefix
        assert await collect(store, "x/a", after="x/a/b") == ["x/a0", "x/ab/c/d"]

    async def test_list_pages_internally(self, store: ObjectStore) -> None:
        keys = [f"p/{i:05d}" for i in range(self.MANY)]
        await put_many(store, keys)
        await store.put("q", b"")
        assert await collect(store, "p/") == keys
        assert await collect(store, "p/", after=keys[-51]) == keys[-50:]
        assert await collect(store, "p/000") == keys[:100]
        assert await collect(store, after="p/") == [*keys, "q"]

    # --- streaming ---------------------------------------------------------------------

    #: Bytes of the large streamed object: more than one part of the backend (S3
    #: test classes set it past their ``part_size``).
    STREAM_SIZE = 3 << 20 | 17

    @pytest.mark.parametrize("chunking", ["empty", "one byte", "many chunks", "large"])
    async def test_put_stream_round_trip(self, store: ObjectStore, chunking: str) -> None:
        sizes = {
            "empty": [],
            "one byte": [1],
            "many chunks": [1000, 0, 1, 65536, 7],
            "large": [self.STREAM_SIZE // 3, 0, self.STREAM_SIZE - self.STREAM_SIZE // 3],
        }[chunking]
        chunks = [os.urandom(n) for n in sizes]
        meta = await store.put_stream("s/obj", aiter_of(chunks))
        data = b"".join(chunks)
        assert (meta.key, meta.size) == ("s/obj", len(data))
        assert await store.get("s/obj") == data
        assert (await store.head("s/obj")).size == len(data)
        assert b"".join([c async for c in store.get_stream("s/obj")]) == data

    async def test_put_stream_modes(self, store: ObjectStore) -> None:
        await store.put_stream("k", aiter_of([b"fir", b"st"]))
        with pytest.raises(ObjectExistsError):
            await store.put_stream("k", aiter_of([b"second"]))
        big = os.urandom(self.STREAM_SIZE)
        with pytest.raises(ObjectExistsError):
            await store.put_stream("k", aiter_of([big]))
        assert await store.get("k") == b"first"
        await store.put_stream("k", aiter_of([big[:10], big[10:]]), PutMode.OVERWRITE)
        assert await store.get("k") == big
        assert await collect(store) == ["k"]

    @pytest.mark.parametrize("sizes", [[3, 0, 1000], [(5 << 20) + 1, 7 << 20, 11]])
    async def test_compose(self, store: ObjectStore, sizes: list[int]) -> None:
        """Small sources, and sources fit for S3's server-side copy (all but the last at
        least 5 MiB); the sources stay, an existing key or a missing source is refused
        and creates nothing."""
        datas = [os.urandom(n) for n in sizes]
        names = [f"parts/{i}" for i in range(len(datas))]
        for name, data in zip(names, datas, strict=True):
            await store.put(name, data)
        meta = await store.compose("whole", names)
        assert (meta.key, meta.size) == ("whole", sum(sizes))
        assert await store.get("whole") == b"".join(datas)
        assert [await store.get(n) for n in names] == datas
        with pytest.raises(ObjectExistsError):
            await store.compose("whole", names[:1])
        assert await store.get("whole") == b"".join(datas)
        with pytest.raises(ObjectNotFoundError):
            await store.compose("other", [names[0], "parts/absent"])
        assert await collect(store) == sorted([*names, "whole"])

    @pytest.mark.parametrize("fail_after", [0, 1, 2])
    async def test_put_stream_failing_source_publishes_nothing(
        self, store: ObjectStore, fail_after: int
    ) -> None:
        part = os.urandom(self.STREAM_SIZE // 2 + 1)

        async def source() -> AsyncIterator[bytes]:
            for _ in range(fail_after):
                yield part
            raise OSError("source broke")

        with pytest.raises(OSError, match="source broke"):
            await store.put_stream("f/obj", source())
        with pytest.raises(ObjectNotFoundError):
            await store.head("f/obj")
        assert await collect(store) == []
        await store.put_stream("f/obj", aiter_of([b"later"]))  # the key is not blocked
        assert await store.get("f/obj") == b"later"

    async def test_put_stream_cancelled_publishes_nothing(self, store: ObjectStore) -> None:
        started = asyncio.Event()
        part = os.urandom(self.STREAM_SIZE // 2 + 1)

        async def source() -> AsyncIterator[bytes]:
            yield part
            yield part
            started.set()
            await asyncio.Event().wait()  # never ends
            yield b""  # pragma: no cover

        task = asyncio.create_task(store.put_stream("c/obj", source()))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await collect(store) == []

    async def test_get_stream_ranges_and_chunks(self, store: ObjectStore) -> None:
        data = os.urandom(10_000)
        await store.put("g", data)
        chunks = [c async for c in store.get_stream("g", chunk_size=3000)]
        assert b"".join(chunks) == data and all(0 < len(c) <= 3000 for c in chunks)
        assert b"".join([c async for c in store.get_stream("g", 100, 5100)]) == data[100:5100]
        assert b"".join([c async for c in store.get_stream("g", 9000)]) == data[9000:]
        assert b"".join([c async for c in store.get_stream("g", 9000, 20_000)]) == data[9000:]
        assert [c async for c in store.get_stream("g", 10_000)] == []
        assert [c async for c in store.get_stream("g", 20_000)] == []
        assert [c async for c in store.get_stream("g", 5, 5)] == []
        await store.put("empty", b"")
        assert [c async for c in store.get_stream("empty")] == []
        with pytest.raises(ObjectNotFoundError):
            _ = [c async for c in store.get_stream("no/such")]
        with pytest.raises(InvalidInputError):
            _ = [c async for c in store.get_stream("g", -1)]

    # --- bad input and life cycle ------------------------------------------------------

    @pytest.mark.parametrize("key", BAD_KEYS)
    async def test_invalid_keys_are_rejected_before_io(self, store: ObjectStore, key: str) -> None:
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: store.get(key),
            lambda: store.get_range(key, 0, 1),
            lambda: store.put(key, b"v"),
            lambda: store.put(key, b"v", PutMode.OVERWRITE),
            lambda: store.head(key),
            lambda: store.delete(key),
            lambda: store.put_stream(key, aiter_of([b"v"])),
            lambda: store.put_fresh(key, b"v"),
            lambda: collect_stream(store, key),
        ]
        for call in calls:
            with pytest.raises(InvalidNameError):
                await call()
        assert await collect(store) == []

    async def test_closed_store_refuses_calls(self, store: ObjectStore) -> None:
        await store.put("k", b"v")
        await store.aclose()
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: store.get("k"),
            lambda: store.get_range("k", 0, 1),
            lambda: store.put("k2", b"v"),
            lambda: store.head("k"),
            lambda: store.delete("k"),
            lambda: collect(store),
            lambda: store.put_stream("k3", aiter_of([b"v"])),
            lambda: store.put_fresh("k4", b"v"),
            lambda: collect_stream(store, "k"),
        ]
        for call in calls:
            with pytest.raises(ClosedError):
                await call()
        await store.aclose()  # idempotent
