"""``lsmstore demo`` (``python -m lsmstore demo``): a real write/read workload on the
embedded default.

Runs in ``$LSMSTORE_HOME`` when set, else in a fresh temporary directory (removed
afterwards unless ``--keep``).  Prints what it did and how fast: every rate is
measured here, on this machine, end to end through the public API.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import lsmstore
from lsmstore.config import configured_home


def _pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    i = min(len(sorted_values) - 1, int(p / 100 * len(sorted_values)))
    return sorted_values[i]


async def demo(home: Path, puts: int, tasks: int, batch: int) -> None:
    t_start = time.perf_counter()
    print(f"lsmstore demo in {home}")
    async with lsmstore.Store(lsmstore.load_config(home=str(home))) as store:
        name = f"demo-{int(time.time())}-{random.randrange(1000):03d}"
        namespace = (home / "data" / name).as_uri()
        repo = await store.create_repository(name, storage_namespace=namespace)
        main = repo.branch("main")
        print(
            f"repository {name!r} on {namespace}, branch main, RefStore {store.config.refstore_url}"
        )

        # 1. puts from many concurrent tasks
        per_task = puts // tasks
        lat: list[float] = []
        value = os.urandom(100)

        async def writer(t: int) -> None:
            for i in range(per_task):
                t0 = time.perf_counter()
                await main.put(f"tasks/{t:04d}/{i:06d}", value)
                lat.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(writer(t) for t in range(tasks)))
        dt = time.perf_counter() - t0
        lat.sort()
        n = per_task * tasks
        stats = main.writer_stats
        print(
            f"put:      {n:>9,} acknowledged puts from {tasks} tasks in {dt:.2f}s = "
            f"{n / dt:,.0f}/s; ack p50 {_pct(lat, 50) * 1000:.1f} ms, "
            f"p99 {_pct(lat, 99) * 1000:.1f} ms; {stats.batches} L1 files"
        )

        # 2. put_many: batches of records, one acknowledgement each
        files_before = stats.batches
        total = 0
        t0 = time.perf_counter()

        async def bulk(t: int) -> None:
            nonlocal total
            for j in range(5):
                items = [(f"bulk/{t}/{j:02d}/{i:06d}", value) for i in range(batch)]
                await main.put_many(items)
                total += len(items)

        await asyncio.gather(*(bulk(t) for t in range(4)))
        dt = time.perf_counter() - t0
        print(
            f"put_many: {total:>9,} records in 20 calls of {batch:,} from 4 tasks in {dt:.2f}s = "
            f"{total / dt:,.0f} records/s; {stats.batches - files_before} L1 files"
        )

        # 3. random gets, all present
        rng = random.Random(1)
        keys = [
            f"tasks/{rng.randrange(tasks):04d}/{rng.randrange(per_task):06d}" for _ in range(50_000)
        ]
        await main.get(keys[0])  # warm the sidecars
        t0 = time.perf_counter()

        async def reader(chunk: list[str]) -> None:
            for k in chunk:
                if await main.get(k) != value:
                    raise AssertionError(f"wrong value for {k}")

        await asyncio.gather(*(reader(keys[i::100]) for i in range(100)))
        dt = time.perf_counter() - t0
        head = await main.head()
        print(
            f"get:      {len(keys):>9,} random gets from 100 tasks in {dt:.2f}s = "
            f"{len(keys) / dt:,.0f}/s over {len(head.l1)} L1 files"
        )

        # 4. a listing with a delimiter, and one page of keys
        t0 = time.perf_counter()
        dirs = [e.path async for e in main.list(prefix="tasks/", delimiter="/")]
        page = [e.path async for e in main.list(prefix="tasks/0007/", limit=5)]
        dt = time.perf_counter() - t0
        print(
            f"list:     {len(dirs)} common prefixes under tasks/ (first {dirs[0]!r}), "
            f"a page of {len(page)} keys from {page[0]!r}, in {dt * 1000:.0f} ms"
        )

        # 5. deletes hide keys
        doomed = [f"tasks/0007/{i:06d}" for i in range(per_task)]
        t0 = time.perf_counter()
        await main.delete_many(doomed)
        left = [e.path async for e in main.list(prefix="tasks/0007/")]
        gone = not await main.exists(doomed[0])
        dt = time.perf_counter() - t0
        print(
            f"delete:   {len(doomed)} keys in one batch; listing tasks/0007/ now shows "
            f"{len(left)} keys, exists() {'False' if gone else 'True'}; {dt * 1000:.0f} ms"
        )
        if left or not gone:
            raise AssertionError("deleted keys are still visible")
        head = await main.head()
        print(f"branch main: base {head.base[:12]}, {len(head.l2)} L2 and {len(head.l1)} L1 files")

        # 6. commit the staged writes, branch, change, merge back
        t0 = time.perf_counter()
        commit = await main.commit("demo workload", metadata={"source": "lsmstore demo"})
        dt_commit = time.perf_counter() - t0
        dev = await repo.create_branch("dev", source="main")
        await dev.put("tasks/0007/000000", b"restored on dev")
        await dev.commit("restore one key")
        await repo.merge("dev", into="main")
        restored = await main.get("tasks/0007/000000")
        if restored != b"restored on dev":
            raise AssertionError("the merge did not bring dev's change to main")
        head = await main.head()
        print(
            f"commit:   {commit.id[:12]} in {dt_commit:.2f}s; branch dev changed one key, "
            f"merged into main as {head.base[:12]}; "
            f"main now has {len(head.l2)} L2 and {len(head.l1)} L1 files"
        )
    print(f"done in {time.perf_counter() - t_start:.1f}s")


def run_demo(puts: int, tasks: int, batch: int, *, keep: bool = False) -> None:
    """The workload in the configured home (``LSMSTORE_HOME``), else in a temporary
    directory (removed afterwards unless ``keep``)."""
    import uvloop

    env_home = configured_home()
    home = env_home or Path(tempfile.mkdtemp(prefix="lsmstore-demo-"))
    try:
        uvloop.run(demo(home, puts, tasks, batch))
    finally:
        if env_home is None and not keep:
            shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``lsmstore-demo``: the same as ``lsmstore demo``."""
    from lsmstore.cli import main as cli_main

    return cli_main(["demo", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
