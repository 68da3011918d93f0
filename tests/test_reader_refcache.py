"""Coalesced ref reads: one RefStore call per flight, and a read never reuses a fetch
that began before it (read-your-writes without a time window)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers.staging import BRANCH, REPO, embedded_refstore

from lsmstore.errors import ClosedError, RefNotFoundError
from lsmstore.refstore.base import Ref
from lsmstore.staging.refcache import RefCache


class Gated:
    """A fetch function that holds every call until released and counts them."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.calls = 0
        self.called = asyncio.Event()
        self.gates = [asyncio.Event() for _ in range(10)]

    async def __call__(self, repo: str, name: str) -> Ref:
        gate = self.gates[self.calls]
        self.calls += 1
        self.called.set()
        await gate.wait()
        return await self.inner(repo, name)

    async def wait_calls(self, n: int) -> None:
        while self.calls < n:
            self.called.clear()
            await self.called.wait()


async def test_reads_during_a_flight_share_the_next_one(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    fetch = Gated(rs.get_ref)
    cache = RefCache(rs, fetch)
    first = cache.get(REPO, BRANCH)
    await fetch.wait_calls(1)
    # a write is acknowledged while the first fetch is in flight...
    await rs.append_l1(REPO, BRANCH, "f1")
    # ...so reads that begin now must not be answered by that fetch
    later = [cache.get(REPO, BRANCH) for _ in range(50)]
    fetch.gates[0].set()
    assert (await first).l1 in ((), ("f1",))
    await fetch.wait_calls(2)  # one more flight, shared by all fifty
    fetch.gates[1].set()
    results = await asyncio.gather(*later)
    assert all(r.l1 == ("f1",) for r in results)
    assert cache.fetches == 2
    await cache.aclose()
    await rs.aclose()


async def test_errors_reach_every_waiter_and_cancel_is_private(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    cache = RefCache(rs)
    futs = [cache.get(REPO, "nosuch") for _ in range(3)]
    for f in futs:
        with pytest.raises(RefNotFoundError):
            await f
    fetch = Gated(rs.get_ref)
    cache = RefCache(rs, fetch)
    a, b, c = (cache.get(REPO, BRANCH) for _ in range(3))  # b and c share the 2nd flight
    await fetch.wait_calls(1)
    a.cancel()  # readers give up; the others still get their answer
    b.cancel()
    fetch.gates[0].set()
    fetch.gates[1].set()
    assert (await c).kind == "branch"
    assert a.cancelled() and b.cancelled()
    await cache.aclose()
    with pytest.raises(ClosedError):
        cache.get(REPO, BRANCH)
    await rs.aclose()


def test_one_cache_serves_successive_event_loops() -> None:
    """The cache keeps the loop of its last call (asyncio.get_running_loop() costs a
    system call per read); a call from a later loop must get a future of that loop."""
    ref = Ref("branch", "c1")

    async def fetch(repo: str, name: str) -> Ref:
        await asyncio.sleep(0)
        return ref

    cache = RefCache(None, fetch)  # type: ignore[arg-type]  # the fetch is given

    async def read() -> Ref:
        return await cache.get(REPO, BRANCH)

    assert asyncio.run(read()) is ref
    assert asyncio.run(read()) is ref  # a new loop
