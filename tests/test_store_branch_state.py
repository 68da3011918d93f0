"""What a Store keeps per branch name is bounded (docs/security.md, "Per-branch
state"): writes and reads naming branches that do not exist leave no writer, view or
task behind; a branch deleted by another store loses its writer here at its next
refused write; an idle writer is closed and a later write opens a new one, losing
nothing acknowledged.

The Store's private maps are read to count what it holds: they are what is bounded.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import lsmstore
from lsmstore.errors import RefNotFoundError


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _store(home: Path, clock: Clock | None = None, **settings: object) -> lsmstore.Store:
    config = lsmstore.load_config(
        f"local://{home / 'refs'}", home=str(home), compaction_in_process="off",
        cache_ram_bytes=0, cache_disk_bytes=0, **settings,
    )  # fmt: skip
    return lsmstore.Store(config, clock=clock or time.time)


def _held(store: lsmstore.Store) -> tuple[int, int]:
    """Writers (open or closing) and views the store holds."""
    return len(store._writers) + len(store._retiring), len(store._views)


async def _closes_done(store: lsmstore.Store) -> None:
    await store._retired(lambda w: True)


async def test_missing_branches_leave_no_writers_views_or_tasks(tmp_path: Path) -> None:
    async with _store(tmp_path, branch_views_cached=8) as store:
        repo = await store.create_repository("rep", storage_namespace=(tmp_path / "ns").as_uri())
        await repo.branch().put("k", b"v")
        tasks_before = len(asyncio.all_tasks())
        for i in range(200):
            b = repo.branch(f"nope{i}")
            with pytest.raises(RefNotFoundError):
                await b.put("k", b"v")
            with pytest.raises(RefNotFoundError):
                await b.get("k")
        await _closes_done(store)
        writers, views = _held(store)
        assert writers <= 1  # main's
        assert views <= 8
        assert len(asyncio.all_tasks()) <= tasks_before
        # the main branch is untouched, and a refused branch is refused again alike
        assert await repo.branch().get("k") == b"v"
        with pytest.raises(RefNotFoundError):
            await repo.branch("nope0").put("k", b"v")


async def test_a_branch_deleted_by_another_store_leaves_no_writer(tmp_path: Path) -> None:
    ns = (tmp_path / "ns").as_uri()
    async with _store(tmp_path) as a, _store(tmp_path) as b:
        repo_a = await a.create_repository("rep", storage_namespace=ns)
        await repo_a.create_branch("feature")
        feature = repo_a.branch("feature")
        await feature.put("k1", b"v1")
        assert ("rep", "feature") in a.writer_stats()
        await (await b.get_repository("rep")).delete_branch("feature")
        with pytest.raises(RefNotFoundError):
            await feature.put("k2", b"v2")
        await _closes_done(a)
        assert ("rep", "feature") not in a.writer_stats()
        assert _held(a)[0] == 0
        # made again (by the other store), the same handle writes through a new writer
        await (await b.get_repository("rep")).create_branch("feature")
        await feature.put("k3", b"v3")
        assert await (await b.get_repository("rep")).branch("feature").get("k3") == b"v3"


async def test_an_idle_writer_is_closed_and_a_new_one_writes(tmp_path: Path) -> None:
    clock = Clock()
    async with _store(tmp_path, clock, writer_idle_s=60) as store:
        repo = await store.create_repository("rep", storage_namespace=(tmp_path / "ns").as_uri())
        await repo.create_branch("other")
        main = repo.branch()
        await main.put("a", b"1")
        first = main.writer()
        # A write staged, not yet flushed: the writer is not idle, whatever the clock.
        fut = first.try_stage((b"b", b"", b"2"))
        assert fut is not None
        clock.now += 120
        store.writer(repo, "other")  # a new writer sweeps the idle ones
        assert not first.closing
        await fut
        # Now idle for the whole window: the next sweep closes it.
        clock.now += 120
        store.writer(repo, "third")
        assert first.closing
        await _closes_done(store)
        assert first.closed
        assert ("rep", "main") not in store.writer_stats()
        # the handle opens a new writer; nothing acknowledged was lost
        await main.put("c", b"3")
        assert main.writer() is not first
        assert [await main.get(k) for k in ("a", "b", "c")] == [b"1", b"2", b"3"]


async def test_a_writer_in_use_is_not_closed_as_idle(tmp_path: Path) -> None:
    clock = Clock()
    async with _store(tmp_path, clock, writer_idle_s=60) as store:
        repo = await store.create_repository("rep", storage_namespace=(tmp_path / "ns").as_uri())
        main = repo.branch()
        await main.put("a", b"1")
        w = main.writer()
        clock.now += 100
        await main.put("b", b"2")  # seals a batch: active again
        clock.now += 30
        store.writer(repo, "x")
        assert not w.closing
        assert main.writer() is w


async def test_views_are_a_bounded_cache(tmp_path: Path) -> None:
    async with _store(tmp_path, branch_views_cached=4) as store:
        repo = await store.create_repository("rep", storage_namespace=(tmp_path / "ns").as_uri())
        main = repo.branch()
        await main.put("k", b"v")
        for i in range(10):
            await repo.create_branch(f"b{i}")
        handles = [repo.branch(f"b{i}") for i in range(10)]
        assert _held(store)[1] == 4
        # an evicted view still serves its handle, and a new handle reads the same
        await handles[0].put("k0", b"v0")
        assert await handles[0].get("k0") == b"v0"
        assert await repo.branch("b0").get("k0") == b"v0"
        assert await main.get("k") == b"v"
        assert _held(store)[1] == 4


async def test_a_call_under_way_when_its_writer_closes_completes(tmp_path: Path) -> None:
    """A large ``write_staged`` whose rows are prepared off the loop when the writer's
    close begins is staged in that writer and flushed by the close (not refused)."""
    from lsmstore.staging.writer import THREAD_ROWS

    async with _store(tmp_path) as store:
        repo = await store.create_repository("rep", storage_namespace=(tmp_path / "ns").as_uri())
        main = repo.branch()
        w = main.writer()
        rows = [(f"k{i:06d}".encode(), b"", f"v{i}".encode()) for i in range(THREAD_ROWS)]
        call = asyncio.ensure_future(w.write_staged(rows))
        await asyncio.sleep(0)  # the call's first step: its rows go to a thread
        assert w._entering == 1
        assert not w.idle()
        await w.aclose()
        assert call.done()
        await call
        assert await main.get(f"k{THREAD_ROWS - 1:06d}") == f"v{THREAD_ROWS - 1}".encode()


async def test_a_repository_deleted_by_another_store_leaves_no_writer(tmp_path: Path) -> None:
    from lsmstore.errors import NotFoundError

    ns = (tmp_path / "ns").as_uri()
    async with _store(tmp_path) as a, _store(tmp_path) as b:
        repo_a = await a.create_repository("rep", storage_namespace=ns)
        main = repo_a.branch()
        await main.put("k1", b"v1")
        await b.delete_repository("rep")
        with pytest.raises(NotFoundError):  # the repository or its branch: both gone
            await main.put("k2", b"v2")
        await _closes_done(a)
        assert _held(a)[0] == 0
