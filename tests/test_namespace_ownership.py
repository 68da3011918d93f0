"""Namespace ownership through the library: markers, deleters that check them, a RefStore
restored from an old backup, repositories recorded before ids existed, and where a
``local://`` namespace lives for processes with other homes."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest

import lsmstore
from lsmstore import gc, namespace
from lsmstore.gc.retention import Retention
from lsmstore.gc.staging import Sweeper
from lsmstore.refstore.base import Repository as RepositoryInfo
from lsmstore.storage.url import open_object_store

GRACE = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def connect(refs: Path, clock: Clock, **settings: object) -> lsmstore.Store:
    config = lsmstore.load_config(
        f"local://{refs}", compaction_in_process="off", cache_ram_bytes=0, cache_disk_bytes=0,
        **settings,
    )  # fmt: skip
    return lsmstore.Store(config, clock=clock)


async def collect(store: lsmstore.Store, clock: Clock) -> gc.RunResult:
    result = gc.RunResult()
    for _ in range(3):
        result = await gc.collect_all(
            store.refstore, lambda _: Retention(default_days=0), grace_s=GRACE, clock=clock
        )
        clock.now += GRACE + 1
    return result


async def test_the_marker_names_the_repository_and_is_released_on_delete(tmp_path: Path) -> None:
    clock = Clock()
    ns = (tmp_path / "ns").as_uri()
    async with connect(tmp_path / "refs", clock) as store:
        repo = await store.create_repository("rep", storage_namespace=ns)
        uid = repo.info.uid
        assert len(uid) == 32
        marker = json.loads((tmp_path / "ns" / "_lsm" / "owner.json").read_bytes())
        assert (marker["owner"], marker["repository"], marker["released"]) == (uid, "rep", False)
        await store.delete_repository("rep")
        marker = json.loads((tmp_path / "ns" / "_lsm" / "owner.json").read_bytes())
        assert (marker["owner"], marker["released"]) == (uid, True)
        again = await store.create_repository("rep", storage_namespace=ns)
        assert again.info.uid != uid
        marker = json.loads((tmp_path / "ns" / "_lsm" / "owner.json").read_bytes())
        assert (marker["owner"], marker["released"]) == (again.info.uid, False)


async def test_a_refstore_restored_from_an_old_backup_deletes_nothing(tmp_path: Path) -> None:
    """Backup taken while ``old`` owned the namespace; ``old`` deleted, ``new`` created
    there and written; the backup restored: ``old`` is back in the RefStore, and its
    collections and sweeps must not delete ``new``'s files."""
    clock = Clock()
    ns = (tmp_path / "ns").as_uri()
    refs, backup = tmp_path / "refs", tmp_path / "backup"
    async with connect(refs, clock) as store:
        old = await store.create_repository("old", storage_namespace=ns)
        await old.branch().put("gone", b"x")
        await old.branch().flush()
    shutil.copytree(refs, backup)
    async with connect(refs, clock) as store:
        await store.delete_repository("old")
        new = await store.create_repository("new", storage_namespace=ns)
        for i in range(5):
            await new.branch().put(f"k{i}", b"new data")
            await new.branch().flush()
        await new.branch().commit("committed")
        await new.branch().put("staged", b"new staged")
        await new.branch().flush()
    files = sorted(p for p in (tmp_path / "ns").rglob("*") if p.is_file())
    assert len(files) > 10
    shutil.rmtree(refs)
    shutil.copytree(backup, refs)
    async with connect(refs, clock) as store:
        result = await collect(store, clock)
        assert any("NotOwnerError" in e and "old" in e for e in result.errors), result.errors
        assert not any(r.deleted for r in result.reports)
        old = await store.get_repository("old")
        with pytest.raises(lsmstore.NotOwnerError):
            await Sweeper(GRACE, clock=clock).sweep(store.refstore, "old", old.objects)
    # Not one file of the namespace was deleted.
    assert sorted(p for p in (tmp_path / "ns").rglob("*") if p.is_file()) == files


async def test_a_repository_recorded_without_an_id_adopts_its_namespace(tmp_path: Path) -> None:
    clock = Clock()
    ns = (tmp_path / "ns").as_uri()
    async with connect(tmp_path / "refs", clock) as store:
        repo = await store.create_repository("rep", storage_namespace=ns)
        await repo.branch().put("k", b"v")
        await repo.branch().flush()
        # As a repository recorded before ids existed: no uid in its record, no marker.
        ref = await store.refstore.get_ref("rep", "main")
        await store.refstore.delete_repository("rep")
        (tmp_path / "ns" / "_lsm" / "owner.json").unlink()
        legacy = RepositoryInfo("rep", ns, "main", repo.info.created_at)
        await store.refstore.create_repository(legacy)
        await store.refstore.create_ref("rep", "main", ref)
        result = await collect(store, clock)
        assert not result.errors
        marker = json.loads((tmp_path / "ns" / "_lsm" / "owner.json").read_bytes())
        assert marker["owner"] == namespace.owner_id(legacy) != ""
        old = await store.get_repository("rep")
        assert await old.branch().get("k") == b"v"
        await old.branch().put("k2", b"v2")  # appends name the legacy repository by ""
        assert await old.branch().get("k2") == b"v2"


async def test_local_namespaces_resolve_where_they_were_created(tmp_path: Path) -> None:
    clock = Clock()
    refs = tmp_path / "refs"
    async with connect(refs, clock, home=tmp_path / "home-a") as a:
        repo = await a.create_repository("rep", storage_namespace="local://team/r")
        assert repo.info.location == (tmp_path / "home-a" / "data" / "team" / "r").as_uri()
        await repo.branch().put("k", b"from a")
        await repo.branch().commit("c")
    async with connect(refs, clock, home=tmp_path / "home-b") as b:
        repo = await b.get_repository("rep")
        assert await repo.branch().get("k") == b"from a"
        assert not (tmp_path / "home-b" / "data").exists()
    shutil.move(tmp_path / "home-a", tmp_path / "moved")
    async with connect(refs, clock, home=tmp_path / "home-b") as b:
        with pytest.raises(lsmstore.UnavailableError, match="cannot reach"):
            await b.get_repository("rep")


async def test_nul_in_a_local_namespace_is_invalid(tmp_path: Path) -> None:
    async with connect(tmp_path / "refs", Clock(), home=tmp_path / "home") as store:
        for ns in ("local://a%00b", "local://a/%01"):
            with pytest.raises(lsmstore.InvalidURLError):
                await store.create_repository("rep", storage_namespace=ns)
    with pytest.raises(lsmstore.InvalidURLError):
        open_object_store("local://a%00b")


async def test_concurrent_creates_on_overlapping_namespaces(
    tmp_path: Path, redis_server_url: str
) -> None:
    """Two stores (two processes' worth of state) on one Redis RefStore race to create
    repositories on equal or nested namespaces: at most one of each pair exists."""
    clock = Clock()
    url = f"{redis_server_url}?prefix=nsrace-{time.time_ns()}:"
    config = lsmstore.load_config(url, compaction_in_process="off")
    a, b = lsmstore.Store(config, clock=clock), lsmstore.Store(config, clock=clock)
    try:
        for i in range(20):
            base = tmp_path / f"ns{i}"
            inner = base if i % 2 else base / "data"
            results = await asyncio.gather(
                a.create_repository(f"aa-{i}", storage_namespace=base.as_uri()),
                b.create_repository(f"bb-{i}", storage_namespace=inner.as_uri()),
                return_exceptions=True,
            )
            won = [r for r in results if isinstance(r, lsmstore.Repository)]
            for r in results:
                assert isinstance(r, lsmstore.Repository | lsmstore.NamespaceInUseError), r
            assert len(won) <= 1
            names = {r.name for r in await a.list_repositories()}
            assert {f"aa-{i}", f"bb-{i}"} & names == {r.name for r in won}
    finally:
        await a.aclose()
        await b.aclose()
