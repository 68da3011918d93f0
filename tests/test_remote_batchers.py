"""The remote client keeps a bounded number of per-branch write coalescers
(``remote_batchers_max``) against a real ``lsmstore serve`` process: idle ones are
dropped, and no pending write is lost or reordered by it."""

from __future__ import annotations

import asyncio

import lsmstore
from lsmstore.remote.client import RemoteStore
from lsmstore.testing.server_process import ServerProcess
from tests.helpers.remote import lsm_server  # noqa: F401 - the fixture

BRANCHES = [f"b{i}" for i in range(6)]


async def test_idle_coalescers_are_dropped_past_the_bound(
    lsm_server: ServerProcess,  # noqa: F811
) -> None:
    key_id, secret = lsm_server.admin
    async with lsmstore.connect(
        lsm_server.url, access_key_id=key_id, secret_access_key=secret, remote_batchers_max=2
    ) as store:
        assert isinstance(store, RemoteStore)
        repo = await store.create_repository("coalesce", storage_namespace="local://coalesce")
        for name in BRANCHES:
            await repo.create_branch(name, source="main")

        # one write per branch, one after the other: at most two coalescers are kept
        for name in BRANCHES:
            await repo.branch(name).put("first", name.encode())
            assert len(store._batchers) <= 2

        # every branch at once, each with many writes to one key issued in call order:
        # busy coalescers are never dropped, so each branch's last call wins
        async def burst(name: str) -> None:
            b = repo.branch(name)
            await asyncio.gather(*(b.put("k", f"{name}-{i}".encode()) for i in range(50)))
            await asyncio.gather(*(b.put(f"k{i:02d}", b"x") for i in range(50)))

        await asyncio.gather(*(burst(name) for name in BRANCHES))
        for name in BRANCHES:
            b = repo.branch(name)
            assert await b.get("k") == f"{name}-49".encode()
            assert await b.get("first") == name.encode()
            keys = [e.key async for e in b.list("k")]
            assert len(keys) == 51

        # idle again: the next new coalescer drops the others
        await repo.branch("main").put("last", b"1")
        assert len(store._batchers) <= 2
