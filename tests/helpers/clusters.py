"""Two clusters on one directory tree: two Stores, each on its own embedded RefStore
(neither knows the other's repositories), without caches (a deleted file cannot hide),
sharing one injected clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import lsmstore
from lsmstore.testing.refstore_contract import FakeClock


@asynccontextmanager
async def two_clusters(root: Path, clock: FakeClock) -> AsyncIterator[list[lsmstore.Store]]:
    stores = [
        lsmstore.Store(
            lsmstore.load_config(
                f"local://{root / f'refs{i}'}",
                batch_interval_ms=0,
                compaction_in_process="off",
                cache_ram_bytes=0,
                cache_disk_bytes=0,
            ),
            clock=clock,
        )
        for i in range(2)
    ]
    try:
        yield stores
    finally:
        for s in stores:
            await s.aclose()
