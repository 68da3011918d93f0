"""Namespaces nested inside one another across two RefStores (two clusters on one
directory tree, or a RefStore restored from an old backup): creation refuses what it
can see, and no deleter of the outer repository deletes a file of the inner one when a
create could not see it (docs/security.md, "Namespaces, ownership and deletion").

Each RefStore is embedded and knows nothing of the other; both see the same
directories.  "Could not see" is two creates at the same moment: the inner create
checked the directories around it before the outer create wrote its marker, which the
tests reproduce by keeping the outer marker aside while the inner repository is
created.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

import lsmstore
from lsmstore import gc, namespace
from lsmstore.gc.retention import Retention
from lsmstore.gc.staging import Sweeper
from lsmstore.testing.refstore_contract import FakeClock
from tests.helpers.clusters import two_clusters

GRACE = 60.0


def new_clock() -> FakeClock:
    return FakeClock(time.time())


async def write(repo: lsmstore.Repository, n: int, *, commit: bool) -> dict[str, bytes]:
    written = {}
    for i in range(n):
        key, value = f"{repo.name}-{i}", f"{repo.name} value {i}".encode()
        await repo.branch().put(key, value)
        await repo.branch().flush()
        written[key] = value
    if commit:
        await repo.branch().commit("committed")
        await repo.branch().put(f"{repo.name}-staged", b"staged after the commit")
        await repo.branch().flush()
        written[f"{repo.name}-staged"] = b"staged after the commit"
    return written


async def collect_everything(stores: list[lsmstore.Store], clock: FakeClock) -> None:
    """Garbage collection and staging sweeps of every repository of both clusters,
    three times a grace period apart (enough for the two marks a deletion needs)."""
    sweeper = Sweeper(GRACE, clock=clock)
    for _ in range(3):
        for s in stores:
            result = await gc.collect_all(
                s.refstore, lambda _: Retention(default_days=0), grace_s=GRACE, clock=clock
            )
            assert not result.errors, result.errors
            for info in await s.refstore.list_repositories(limit=100):
                repo = await s.get_repository(info.name)
                await sweeper.sweep(s.refstore, info.name, repo.objects)
        clock.now += GRACE + 1


async def reads_back(repo: lsmstore.Repository, written: dict[str, bytes]) -> None:
    for key, value in written.items():
        assert await repo.branch().get(key) == value, (repo.name, key)


# --- creation refuses what it can see --------------------------------------------------


@pytest.mark.parametrize("area", ["data", "_lsm/staging"])
async def test_a_namespace_inside_another_clusters_repository_is_refused(
    tmp_path: Path, area: str
) -> None:
    clock = new_clock()
    async with two_clusters(tmp_path, clock) as (one, two):
        await one.create_repository("outer", storage_namespace=(tmp_path / "n1").as_uri())
        with pytest.raises(lsmstore.NamespaceInUseError):
            await two.create_repository(
                "inner", storage_namespace=(tmp_path / "n1" / area).as_uri()
            )
        assert [r.name for r in await two.refstore.list_repositories()] == []


async def test_a_namespace_around_another_clusters_repository_is_refused(tmp_path: Path) -> None:
    clock = new_clock()
    async with two_clusters(tmp_path, clock) as (one, two):
        inner = await two.create_repository(
            "inner", storage_namespace=(tmp_path / "n1" / "data").as_uri()
        )
        written = await write(inner, 3, commit=True)
        with pytest.raises(lsmstore.NamespaceInUseError, match="data/"):
            await one.create_repository("outer", storage_namespace=(tmp_path / "n1").as_uri())
        await collect_everything([one, two], clock)
        await reads_back(inner, written)


async def test_a_namespace_with_an_lsm_segment_is_refused(tmp_path: Path) -> None:
    """``_lsm`` holds a repository's own files; nothing else may live there, even when
    no repository of this RefStore is around it (the one around it may be deleted but
    still collected, or another RefStore's)."""
    clock = new_clock()
    async with two_clusters(tmp_path, clock) as (one, _):
        for where in ("n1/_lsm/staging", "n1/_lsm", "n2/x/_lsm/y"):
            with pytest.raises(lsmstore.NamespaceInUseError, match="_lsm"):
                await one.create_repository("rep", storage_namespace=(tmp_path / where).as_uri())
        assert await one.refstore.list_repositories() == []
        assert not (tmp_path / "n1").exists()


async def test_a_deleted_repositorys_staging_area_is_not_a_namespace(tmp_path: Path) -> None:
    """The program the property test found: ``rea`` on n1 collected and deleted (its
    marker released, its leftover staging still collected), then ``reb`` created on
    n1/_lsm/staging, whose files that collection deleted as ``rea``'s."""
    clock = new_clock()
    async with two_clusters(tmp_path, clock) as (one, two):
        rea = await one.create_repository("rea", storage_namespace=(tmp_path / "n1").as_uri())
        await write(rea, 2, commit=False)
        await collect_everything([one, two], clock)
        await one.delete_repository("rea")
        with pytest.raises(lsmstore.NamespaceInUseError, match="_lsm"):
            await one.create_repository(
                "reb", storage_namespace=(tmp_path / "n1" / "_lsm" / "staging").as_uri()
            )
        await collect_everything([one, two], clock)


# --- deleters keep out of a nested namespace a create could not see -------------------


async def created_at_the_same_moment(
    tmp_path: Path, one: lsmstore.Store, two: lsmstore.Store, area: str
) -> tuple[lsmstore.Repository, lsmstore.Repository]:
    """``outer`` on n1 by one cluster and ``inner`` on n1/<area> by the other, as two
    creates at the same moment leave them: the inner create looked around before the
    outer marker was written."""
    outer = await one.create_repository("outer", storage_namespace=(tmp_path / "n1").as_uri())
    marker = tmp_path / "n1" / namespace.MARKER
    aside = tmp_path / "marker-aside"
    shutil.move(marker, aside)
    inner = await two.create_repository(
        "inner", storage_namespace=(tmp_path / "n1" / area).as_uri()
    )
    shutil.move(aside, marker)
    return outer, inner


@pytest.mark.parametrize("area", ["data", "_lsm/staging"])
async def test_deleters_of_the_outer_repository_keep_out_of_a_nested_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, area: str
) -> None:
    """The inner repository in the outer one's data area, or in its staging area (as a
    release that did not refuse ``_lsm`` segments created it): the outer's staging
    sweep, garbage collection and (once it is deleted) the collection of its leftover
    staging all keep out of it."""
    clock = new_clock()
    async with two_clusters(tmp_path, clock) as (one, two):
        with monkeypatch.context() as m:
            m.setattr(namespace, "check_not_reserved", lambda info: None)
            outer, inner = await created_at_the_same_moment(tmp_path, one, two, area)
        written_outer = await write(outer, 3, commit=True)
        written_inner = await write(inner, 3, commit=True)
        await collect_everything([one, two], clock)
        await reads_back(inner, written_inner)
        await reads_back(outer, written_outer)
        await one.delete_repository("outer")
        await collect_everything([one, two], clock)
        await reads_back(inner, written_inner)
        assert (tmp_path / "n1" / area / namespace.MARKER).is_file()


def test_outside_nested_drops_the_keys_of_nested_namespaces() -> None:
    keys = {
        "data/a",
        "data/x/_lsm/owner.json",
        "data/x/_lsm/staging/main/L1/f.sst",
        "data/x/data/b",
        "data/xy",
        "_lsm/staging/main/L1/g.sst",
        "_lsm/owner.json",
    }
    assert namespace.nested_roots(keys) == {"data/x/"}
    assert namespace.outside_nested(keys) == {
        "data/a",
        "data/xy",
        "_lsm/staging/main/L1/g.sst",
        "_lsm/owner.json",
    }
