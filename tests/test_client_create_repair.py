"""create_repository is two RefStore steps (record the repository, create its default
branch); a crash between them must not leave a repository that can never be used."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lsmstore
from lsmstore.refstore.base import Repository as RepositoryInfo


@pytest.fixture
async def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[lsmstore.Store]:
    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path / "home"))
    async with lsmstore.connect(batch_interval_ms=2) as s:
        yield s


async def test_retry_finishes_a_create_that_stopped_before_the_branch(
    store: lsmstore.Store, tmp_path: Path
) -> None:
    ns = (tmp_path / "rep").as_uri()
    # what a process killed between the two steps leaves behind
    await store.refstore.create_repository(RepositoryInfo("rep", ns, "main"))
    assert await store.refstore.get_refs("rep", ["main"]) == {}

    repo = await store.create_repository("rep", storage_namespace=ns)
    head = await repo.branch().head()
    assert head.base and head.l1 == ()
    await repo.branch().put("k", b"v")
    assert await repo.branch().get("k") == b"v"


async def test_a_complete_repository_is_still_taken(store: lsmstore.Store, tmp_path: Path) -> None:
    ns = (tmp_path / "rep").as_uri()
    await store.create_repository("rep", storage_namespace=ns)
    with pytest.raises(lsmstore.RefExistsError):
        await store.create_repository("rep", storage_namespace=ns)


async def test_a_half_created_repository_is_not_taken_over_with_other_settings(
    store: lsmstore.Store, tmp_path: Path
) -> None:
    await store.refstore.create_repository(
        RepositoryInfo("rep", (tmp_path / "rep").as_uri(), "main")
    )
    with pytest.raises(lsmstore.RefExistsError):
        await store.create_repository("rep", storage_namespace=(tmp_path / "other").as_uri())
    assert await store.refstore.get_refs("rep", ["main"]) == {}


async def test_an_unwritable_namespace_records_nothing(
    store: lsmstore.Store, tmp_path: Path
) -> None:
    """The first commit is written before the repository is recorded: a namespace that
    cannot be written fails the create and leaves no repository behind."""
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a directory")
    with pytest.raises(lsmstore.LsmError):
        await store.create_repository("rep", storage_namespace=(blocker / "ns").as_uri())
    with pytest.raises(lsmstore.RepositoryNotFoundError):
        await store.get_repository("rep")
    repo = await store.create_repository("rep", storage_namespace=(tmp_path / "ok").as_uri())
    assert (await repo.branch().head()).base
