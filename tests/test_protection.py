"""Branch protection beyond the per-front-end checks of test_client_api /
test_server_sdk / test_cli: the Spark job's append, the ETag's compare-and-swap under a
race, rules set by another process, a re-created repository, pattern checks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lsmstore
from lsmstore.errors import (
    InvalidInputError,
    PreconditionFailedError,
    ProtectedBranchError,
)
from lsmstore.graveler.record import Record
from lsmstore.spark import stage
from lsmstore.storage.url import open_object_store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[lsmstore.Store]:
    async with lsmstore.connect(home=str(tmp_path / "home"), batch_interval_ms=1) as s:
        yield s


async def test_spark_job_append_is_refused(store: lsmstore.Store, tmp_path: Path) -> None:
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("spk", storage_namespace=ns)
    objects = open_object_store(ns)
    files = await stage.write_files(objects, "main", [Record(b"k", b"i", b"v")])
    await repo.set_branch_protection(["main"])
    before = await repo.branch("main").head()
    with pytest.raises(ProtectedBranchError):
        await stage.commit_files(store.refstore, "spk", "main", "job", files, grace_s=600)
    assert await repo.branch("main").head() == before
    await repo.set_branch_protection([])
    await stage.commit_files(store.refstore, "spk", "main", "job", files, grace_s=600)
    assert await repo.branch("main").get("k") == b"v"


async def test_concurrent_replacements_one_wins(store: lsmstore.Store, tmp_path: Path) -> None:
    repo = await store.create_repository("cas", storage_namespace=(tmp_path / "c").as_uri())
    etag = (await repo.branch_protection()).etag
    results = await asyncio.gather(
        *(repo.set_branch_protection([f"b{i}"], if_match=etag) for i in range(5)),
        return_exceptions=True,
    )
    won = [r for r in results if not isinstance(r, BaseException)]
    assert len(won) == 1
    assert all(isinstance(r, PreconditionFailedError) for r in results if r not in won)
    assert await repo.branch_protection() == won[0]
    # without if_match a replacement is unconditional
    after = await repo.set_branch_protection(["x"])
    assert after.patterns == ("x",) and after.etag != won[0].etag


async def test_rules_set_by_another_process_apply(store: lsmstore.Store, tmp_path: Path) -> None:
    repo = await store.create_repository("mpr", storage_namespace=(tmp_path / "m").as_uri())
    main = repo.branch("main")
    await main.put("a", b"1")
    await main.flush()
    async with lsmstore.connect(home=str(tmp_path / "home")) as other:
        await (await other.get_repository("mpr")).set_branch_protection(["main"])
    with pytest.raises(ProtectedBranchError):
        await main.put("b", b"2")
    with pytest.raises(ProtectedBranchError):
        await main.commit("c")
    assert await main.get("a") == b"1" and not await main.exists("b")


async def test_recreated_repository_starts_without_rules(
    store: lsmstore.Store, tmp_path: Path
) -> None:
    repo = await store.create_repository("rec", storage_namespace=(tmp_path / "r1").as_uri())
    await repo.set_branch_protection(["main"])
    await store.delete_repository("rec")
    again = await store.create_repository("rec", storage_namespace=(tmp_path / "r2").as_uri())
    assert (await again.branch_protection()).patterns == ()
    await again.branch("main").put("k", b"v")
    await again.branch("main").commit("allowed")


@pytest.mark.parametrize("patterns", [["a", "a"], [""], ["x\n"], "main", [1], ["p" * 257]])
async def test_bad_patterns(store: lsmstore.Store, tmp_path: Path, patterns: object) -> None:
    repo = await store.create_repository("bad", storage_namespace=(tmp_path / "b").as_uri())
    with pytest.raises(InvalidInputError):
        await repo.set_branch_protection(patterns)  # type: ignore[arg-type]
    assert (await repo.branch_protection()).patterns == ()
