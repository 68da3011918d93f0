"""Workspaces move ids, never files: a popped file is read, compacted, committed and
kept alive where it was written; a dropped workspace's files are collected."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lsmstore
from lsmstore.compaction.job import CompactionJob
from lsmstore.gc.staging import Sweeper, referenced_files
from lsmstore.refstore.names import locate_entry
from lsmstore.storage.url import open_object_store
from lsmstore.testing.compaction import make_config, staged_files

GRACE = 60.0


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
async def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[lsmstore.Store]:
    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path / "home"))
    async with lsmstore.connect(batch_interval_ms=2, compaction_in_process="off") as s:
        yield s


async def _stage(branch: lsmstore.Branch, items: dict[str, bytes]) -> None:
    await branch.put_many(list(items.items()))
    await branch.flush()


async def test_popped_files_are_read_compacted_and_committed(
    store: lsmstore.Store, tmp_path: Path
) -> None:
    ns = (tmp_path / "rep").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    main = repo.branch("main")
    await _stage(main, {"a": b"main-a", "b": b"main-b"})
    await main.commit("base")
    dev = await repo.create_branch("dev")
    await _stage(dev, {"a": b"dev-a1", "c": b"dev-c"})
    objects = open_object_store(ns)
    # Compact dev's first file into L2, so the workspace holds L2 and L1 files.
    cfg = make_config(compaction_grace_s=GRACE)
    job = CompactionJob(store.refstore, objects, "rep", "dev", cfg)
    assert (await job.run()).outcome == "compacted"
    await _stage(dev, {"a": b"dev-a2"})
    head = await dev.head()
    assert head.l2 and head.l1
    await store.refstore.stash_workspace(
        "rep", "dev", "wip", expected=await store.refstore.get_ref("rep", "dev")
    )
    with pytest.raises(lsmstore.NotFoundError):
        await dev.get("c")
    await _stage(main, {"b": b"main-b2"})
    popped = await store.refstore.pop_workspace("rep", "wip", "main")
    assert any(locate_entry("main", "L1", e)[0] == "dev" for e in popped.l1)
    # Newer than what main had staged; the base still shows through.
    want = {"a": b"dev-a2", "b": b"main-b2", "c": b"dev-c"}
    for k, v in want.items():
        assert await main.get(k) == v
    assert [e.key async for e in main.list()] == [b"a", b"b", b"c"]
    # The compactor reads the popped files where they live.
    job = CompactionJob(store.refstore, objects, "rep", "main", cfg)
    assert (await job.run()).outcome == "compacted"
    assert (await store.refstore.get_ref("rep", "main")).l1 == ()
    for k, v in want.items():
        assert await main.get(k) == v
    await _stage(main, {"d": b"main-d"})
    await store.refstore.stash_workspace(
        "rep", "main", "again", expected=await store.refstore.get_ref("rep", "main")
    )
    await store.refstore.pop_workspace("rep", "again", "main")
    await main.commit("with the workspace")
    ref = await repo.ref("main").resolve()
    assert ref is not None
    for k, v in {**want, "d": b"main-d"}.items():
        assert await repo.ref("main").get(k) == v


async def test_workspace_files_live_until_dropped(store: lsmstore.Store, tmp_path: Path) -> None:
    ns = (tmp_path / "rep").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    objects = open_object_store(ns)
    dev = await repo.create_branch("dev")
    await _stage(dev, {"x": b"1"})
    await _stage(dev, {"y": b"2"})
    stashed = await store.refstore.get_ref("rep", "dev")
    await store.refstore.stash_workspace("rep", "dev", "wip", expected=stashed)
    held = await referenced_files(store.refstore, "rep")
    assert held is not None and held["dev"] == {("L1", f) for f in stashed.l1}
    clock = Clock()
    sweeper = Sweeper(GRACE, clock=clock)
    for offset in (GRACE + 1, 3 * GRACE, 10 * GRACE):  # held only by the workspace
        clock.offset = offset
        result = await sweeper.sweep(store.refstore, "rep", objects)
        assert result.orphans == 0 and result.deleted_files == 0
    assert {("L1", f) for f in stashed.l1} <= await staged_files(objects, "dev")
    # Popped onto main: still dev's files, still alive.
    await store.refstore.pop_workspace("rep", "wip", "main")
    clock.offset = 20 * GRACE
    await sweeper.sweep(store.refstore, "rep", objects)
    clock.offset = 22 * GRACE
    await sweeper.sweep(store.refstore, "rep", objects)
    assert await repo.branch("main").get("y") == b"2"
    # Stashed again and dropped: collected after the grace period.
    main_ref = await store.refstore.get_ref("rep", "main")
    await store.refstore.stash_workspace("rep", "main", "w2", expected=main_ref)
    await store.refstore.drop_workspace("rep", "w2")
    clock.offset = 30 * GRACE
    assert (await sweeper.sweep(store.refstore, "rep", objects)).orphans == len(stashed.l1)
    clock.offset = 32 * GRACE
    assert (await sweeper.sweep(store.refstore, "rep", objects)).deleted_files == len(stashed.l1)
    assert await staged_files(objects, "dev") == set()


async def test_a_sweep_never_sees_a_moving_file_as_unreferenced(
    store: lsmstore.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stash or pop between the sweep's reads of refs and of workspaces: the move
    count changes, the sweep lists again."""
    ns = (tmp_path / "rep").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    dev = await repo.create_branch("dev")
    await _stage(dev, {"x": b"1"})
    rs = store.refstore
    files = (await rs.get_ref("rep", "dev")).l1
    real = rs.list_refs
    moved = []

    async def list_refs_then_move(*args, **kwargs):  # type: ignore[no-untyped-def]
        page = await real(*args, **kwargs)
        if not moved:  # the file leaves dev for a workspace right after dev was read
            moved.append(True)
            await rs.stash_workspace("rep", "dev", "wip", expected=await rs.get_ref("rep", "dev"))
        return page

    monkeypatch.setattr(rs, "list_refs", list_refs_then_move)
    held = await referenced_files(rs, "rep")
    assert held is not None and {("L1", f) for f in files} <= held["dev"]
    assert moved
