"""The branch writer's memory bound: what it holds never passes ``max_pending_bytes``,
and a long run of writes leaves the process no larger than a short one did."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from helpers.staging import BRANCH, REPO, embedded_refstore, rec

from lsmstore.config import Config
from lsmstore.staging.writer import BranchWriter
from lsmstore.storage.base import PutMode
from lsmstore.storage.local import LocalStore

MiB = 1 << 20
VALUE = b"v" * (16 * 1024)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class WatchedStore(LocalStore):
    """A local store that notes the writer's pending bytes at every upload: the
    moment its batches are in flight."""

    writer: BranchWriter | None = None
    peak = 0

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.OVERWRITE) -> None:
        if self.writer is not None:
            self.peak = max(self.peak, self.writer._pending_bytes)
        await super().put(key, data, mode)


async def test_pending_bytes_and_rss_stay_bounded_over_a_long_run(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = WatchedStore(tmp_path / "objects")
    c = Config(home=tmp_path).replace(
        max_value_bytes=64 * 1024,
        max_pending_bytes=2 * MiB,
        batch_max_bytes=MiB,
        batch_interval_ms=1,
        l1_soft_limit=1000,
        l1_hard_limit=1000,
    )
    w = objects.writer = BranchWriter(rs, objects, REPO, BRANCH, c)
    bound = c.max_pending_bytes

    async def run(tag: str, tasks: int, per_task: int) -> None:
        async def one(t: int) -> None:
            for i in range(per_task):
                key = f"{tag}/{t:03}/{i:05}"
                await w.write(rec(key, key.encode() + VALUE))  # a value object of its own
                objects.peak = max(objects.peak, w._pending_bytes)

        await asyncio.gather(*(one(t) for t in range(tasks)))

    await run("warm", 100, 10)  # 16 MB: every code path and cache warmed
    before = rss_bytes()
    await run("long", 100, 60)  # 98 MB through a 2 MiB bound
    grown = rss_bytes() - before
    assert w.stats.records == 100 * 70 and w.stats.failed_batches == 0
    assert 0 < objects.peak <= bound
    assert w._pending_bytes == 0 and not w._room
    # Kept per run: nothing of the data, only the bounded flush traces (1,024).
    assert len(w.stats.flushes) <= 1024
    assert grown < 24 * MiB, f"RSS grew {grown / MiB:.1f} MiB over 98 MB of writes"
    await w.aclose()
    await rs.aclose()
