"""The ``if_absent`` claim of a path (lsmstore.operations.objects.claim_absent) on the
embedded RefStore with an injected clock: its holder renews the lease while it holds
the claim, so a live holder whose append is slow (a writer stalled at the L1 hard
limit) keeps the path past the lease's first life, and a released one frees it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import lsmstore
from lsmstore.config import load_config
from lsmstore.operations.objects import CLAIM_TTL_S, claim_absent, claim_key
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.testing.refstore_contract import FakeClock

T0 = 1_800_000_000.0


class Told(EmbeddedRefStore):
    """The embedded RefStore, noting each lease acquisition (owner, clock) so that a
    test can wait for a renewal."""

    def __init__(self, path: Path, clock: FakeClock) -> None:
        super().__init__(path, clock=clock)
        self.clock = clock
        self.acquired: list[tuple[str, str, float]] = []
        self.changed = asyncio.Condition()

    async def acquire_lease(self, key: str, owner: str, ttl_seconds: float) -> bool:
        ok = await super().acquire_lease(key, owner, ttl_seconds)
        async with self.changed:
            self.acquired.append((key, owner, self.clock()))
            self.changed.notify_all()
        return ok


@contextlib.asynccontextmanager
async def on_main(tmp_path: Path) -> AsyncIterator[tuple[FakeClock, Told, lsmstore.Branch]]:
    """A store on :class:`Told` with a fake clock at T0, and its repository's main."""
    clock = FakeClock(T0)
    rs = Told(tmp_path / "refs", clock)
    cfg = load_config(home=str(tmp_path / "home"), environ={}, batch_interval_ms=1)
    async with lsmstore.Store(cfg, refstore=rs, clock=clock) as store:
        repo = await store.create_repository("claims", storage_namespace=(tmp_path / "ns").as_uri())
        yield clock, rs, repo.branch("main")


async def test_a_held_claim_is_renewed_and_a_released_one_is_free(tmp_path: Path) -> None:
    async with on_main(tmp_path) as (clock, rs, main):
        lease = claim_key(main, b"k")
        held, go = asyncio.Event(), asyncio.Event()

        async def holder() -> None:
            async with claim_absent(main, [b"k"]):
                held.set()
                await go.wait()  # a slow append

        task = asyncio.create_task(holder())
        await asyncio.wait_for(held.wait(), 60)
        [(_, owner, _)] = [a for a in rs.acquired if a[0] == lease]
        clock.now = T0 + CLAIM_TTL_S - 1  # the first lease's last second

        def renewed() -> bool:
            return any(k == lease and o == owner and t >= clock.now for k, o, t in rs.acquired)

        async with rs.changed:
            await asyncio.wait_for(rs.changed.wait_for(renewed), 60)
        clock.now = T0 + CLAIM_TTL_S + 1  # past the first lease's life: still held
        assert not await rs.acquire_lease(lease, "intruder", CLAIM_TTL_S)
        go.set()
        await task
        assert await rs.acquire_lease(lease, "intruder", CLAIM_TTL_S)  # released on exit


async def test_leases_taken_first_are_renewed_while_a_later_one_is_awaited(
    tmp_path: Path,
) -> None:
    """A claim of two paths whose second is held by another writer: the first path's
    lease is renewed while the claim waits for the second, so it cannot lapse and let a
    third writer in (the wait may outlast a lease's life)."""
    async with on_main(tmp_path) as (clock, rs, main):
        first, second = claim_key(main, b"a"), claim_key(main, b"b")
        assert await rs.acquire_lease(second, "other", 10 * CLAIM_TTL_S)
        claimed = asyncio.Event()

        async def claimant() -> None:
            async with claim_absent(main, [b"b", b"a"]):
                claimed.set()

        task = asyncio.create_task(claimant())

        def took_first() -> bool:
            return any(k == first and o != "intruder" for k, o, _ in rs.acquired)

        async with rs.changed:
            await asyncio.wait_for(rs.changed.wait_for(took_first), 60)
        [owner] = {o for k, o, _ in rs.acquired if k == first}
        clock.now = T0 + CLAIM_TTL_S - 1  # the first lease's last second, still waiting

        def renewed() -> bool:
            return any(k == first and o == owner and t >= clock.now for k, o, t in rs.acquired)

        async with rs.changed:
            await asyncio.wait_for(rs.changed.wait_for(renewed), 60)
        clock.now = T0 + CLAIM_TTL_S + 1
        assert not await rs.acquire_lease(first, "intruder", CLAIM_TTL_S)
        assert not claimed.is_set()
        await rs.release_lease(second, "other")
        await asyncio.wait_for(task, 60)
        assert claimed.is_set()
