"""The driver's commit of a Spark job (``stage.commit_or_discard``): a commit refused
with nothing staged deletes the job's staging files and its other outputs; a commit that
lands keeps them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lsmstore
from lsmstore import layout
from lsmstore.errors import ObjectNotFoundError, ProtectedBranchError
from lsmstore.graveler.record import Record
from lsmstore.spark import stage
from lsmstore.staging.files import SIDECAR_SUFFIX, SST_SUFFIX
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[lsmstore.Store]:
    async with lsmstore.connect(home=str(tmp_path / "home"), batch_interval_ms=1) as s:
        yield s


async def _exists(objects: ObjectStore, key: str) -> bool:
    try:
        await objects.head(key)
    except ObjectNotFoundError:
        return False
    return True


async def _present(objects: ObjectStore, files: list[stage.WrittenFile]) -> list[bool]:
    out = []
    for f in files:
        for suffix in (SST_SUFFIX, SIDECAR_SUFFIX):
            key = layout.staging_key("main", "L1", f.file_id, suffix)
            out.append(await _exists(objects, key))
    return out


async def test_refused_commit_discards_the_job(store: lsmstore.Store, tmp_path: Path) -> None:
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    objects = open_object_store(ns)
    records = [Record(f"k{i}".encode(), b"i", b"v") for i in range(3)]
    files = await stage.write_files(objects, "main", records, file_bytes=2)
    assert len(files) > 1 and all(await _present(objects, files))
    await objects.put("data/table-file", b"parquet")
    deleted: list[str] = []

    async def also() -> None:
        await objects.delete("data/table-file")
        deleted.append("data/table-file")

    await repo.set_branch_protection(["main"])
    with pytest.raises(ProtectedBranchError):
        await stage.commit_or_discard(store.refstore, objects, "rep", "main", "job", files,
                                      grace_s=600, discard_also=also)  # fmt: skip
    assert not any(await _present(objects, files))
    assert deleted == ["data/table-file"] and not await _exists(objects, "data/table-file")
    assert [s.path async for s in repo.branch("main").list_objects()] == []


async def test_landed_commit_keeps_the_job(store: lsmstore.Store, tmp_path: Path) -> None:
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    objects = open_object_store(ns)
    files = await stage.write_files(objects, "main", [Record(b"k", b"i", b"v")])
    called: list[bool] = []

    async def also() -> None:
        called.append(True)

    await stage.commit_or_discard(store.refstore, objects, "rep", "main", "job", files,
                                  grace_s=600, discard_also=also)  # fmt: skip
    assert called == [] and all(await _present(objects, files))
    assert await repo.branch("main").get("k") == b"v"
