"""A full memstore is closed at once: writes arriving at it start the next batch, so
concurrent bulk writes pipeline instead of piling into one oversized file."""

from __future__ import annotations

import asyncio
from pathlib import Path

from helpers.staging import BRANCH, REPO, embedded_refstore, l1_files, rec

from lsmstore.config import Config
from lsmstore.staging.writer import THREAD_ROWS, BranchWriter
from lsmstore.storage.memory import MemoryStore


async def test_writes_at_a_full_batch_start_the_next_one(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    config = Config(home=tmp_path).replace(batch_interval_ms=10, batch_max_records=10)
    w = BranchWriter(rs, objects, REPO, BRANCH, config)
    calls = [[rec(f"c{c}-{i}", b"v") for i in range(6)] for c in range(5)]
    calls[0].append(rec("shared", b"first"))
    calls[4].append(rec("shared", b"last"))
    # all five calls are staged in one turn of the loop, before the flusher runs
    await asyncio.gather(*(w.write_many(c) for c in calls))
    files = await l1_files(rs, objects)
    # calls 0+1 fill the first batch (13 >= 10), call 2 starts the next, call 3 fills
    # it, call 4 starts a third: each batch is at most one call past the bound
    assert [len(f) for f in files] == [13, 12, 7]
    keys = [{r.key for r in f} for f in files]
    assert keys[0] == {r.key for r in calls[0] + calls[1]}
    assert keys[1] == {r.key for r in calls[2] + calls[3]}
    assert keys[2] == {r.key for r in calls[4]}
    # files are appended in staging order: the later write of a key is in a later file
    assert [r.value for f in files for r in f if r.key == b"shared"] == [b"first", b"last"]
    assert w.stats.batches == 3 and w.stats.records == 32
    await w.aclose()
    await rs.aclose()


async def test_flush_waits_for_closed_batches_too(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    config = Config(home=tmp_path).replace(batch_interval_ms=600_000, batch_max_records=3)
    w = BranchWriter(rs, objects, REPO, BRANCH, config)
    tasks = [
        asyncio.create_task(w.write_many([rec(f"k{c}-{i}", b"v") for i in range(3)]))
        for c in range(4)
    ]
    await asyncio.sleep(0)  # all four staged: four full batches, none taken yet
    await asyncio.wait_for(w.flush(), 10)
    assert all(t.done() for t in tasks)
    assert [len(f) for f in await l1_files(rs, objects)] == [3, 3, 3, 3]
    await w.aclose()
    await rs.aclose()


async def test_a_large_call_lets_the_loop_run_and_still_lands_in_one_file(tmp_path: Path) -> None:
    # a call of THREAD_ROWS records or more is made ready in a thread: other tasks run
    # before it is staged, and it is staged in one step, so it is one file as before
    rs = await embedded_refstore(tmp_path)
    objects = MemoryStore()
    config = Config(home=tmp_path).replace(batch_interval_ms=10)
    w = BranchWriter(rs, objects, REPO, BRANCH, config)
    n = 3 * THREAD_ROWS
    call = [rec(f"k{i:06d}", b"v") for i in range(n)] + [rec("k000000", b"last")]
    unstaged: list[int] = []  # memstore sizes seen by another task while the call runs
    running = True

    async def other() -> None:
        while running:
            unstaged.append(len(w._batch.mem))
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    unstaged.clear()
    await w.write_staged(call)
    running = False
    await task
    # the other task ran while the call was not staged yet, and never saw part of it
    assert unstaged and unstaged[0] == 0
    assert set(unstaged) <= {0, n}
    files = await l1_files(rs, objects)
    assert [len(f) for f in files] == [n]  # one file, the key given twice once
    assert [r.value for r in files[0] if r.key == b"k000000"] == [b"last"]
    await w.aclose()
    await rs.aclose()
