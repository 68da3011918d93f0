"""Failures seen through the public API: an object store that fails uploads, a RefStore
that becomes unreachable.  The batch's callers get the error; nothing is half-visible."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import lsmstore
from lsmstore.config import load_config
from lsmstore.storage.url import open_object_store
from lsmstore.testing.faulty_store import FaultyStore
from lsmstore.testing.servers import RedisServer


async def test_failed_upload_fails_every_write_of_the_batch(tmp_path: Path) -> None:
    stores: list[FaultyStore] = []

    def faulty(url: str) -> FaultyStore:
        stores.append(FaultyStore(open_object_store(url)))
        return stores[-1]

    cfg = load_config(home=str(tmp_path / "home"), batch_interval_ms=20)
    async with lsmstore.Store(cfg, open_objects=faulty) as store:
        repo = await store.create_repository("rep", storage_namespace="mem://failing-upload")
        main = repo.branch()
        await main.put("before", b"ok")
        head = await main.head()
        stores[0].fail("put", prefix="_lsm/staging/", match=lambda k: k.endswith(".sst"))
        results = await asyncio.gather(
            *(main.put(f"k{i}", b"v") for i in range(30)),
            main.put_many([("m1", b"v"), ("m2", b"v")]),
            main.delete("before"),
            return_exceptions=True,
        )
        assert all(isinstance(r, lsmstore.UnavailableError) for r in results), results
        assert await main.head() == head  # nothing appended
        assert [e.path async for e in main.list()] == ["before"]  # nothing visible
        await main.put("after", b"ok")  # the branch goes on
        assert await main.get("after") == b"ok"


async def test_unreachable_refstore_fails_writes_and_reads(tmp_path: Path) -> None:
    server = RedisServer()
    server.start()
    try:
        url = server.url + "?timeout=2"
        async with lsmstore.connect(
            url, home=str(tmp_path / "home"), append_attempts=2, batch_interval_ms=2
        ) as store:
            repo = await store.create_repository("rep", storage_namespace="mem://unreachable")
            main = repo.branch()
            await main.put("k", b"v")
            assert await main.get("k") == b"v"
            server.stop()
            results = await asyncio.gather(
                *(main.put(f"x{i}", b"v") for i in range(10)), return_exceptions=True
            )
            assert all(isinstance(r, lsmstore.UnavailableError) for r in results), results
            # each names the RefStore it could not reach (the append, or the branch
            # protection rules read before it)
            assert all(server.url in str(r) for r in results), results
            with pytest.raises(lsmstore.UnavailableError):
                await main.get("k")
            with pytest.raises(ConnectionError):  # UnavailableError is a ConnectionError
                await store.list_repositories()
    finally:
        server.stop()
