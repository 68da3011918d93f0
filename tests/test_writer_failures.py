"""Writer failures: a failed upload or append fails its whole batch and shows nothing;
unknown append outcomes are retried; batches queued behind a failed append fail too;
prepared SSTs are validated before anything is staged."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers.staging import BRANCH, REPO, l1_files, rec

from lsmstore.config import Config
from lsmstore.errors import (
    CorruptFileError,
    EntryTooLargeError,
    InvalidInputError,
    RefNotFoundError,
    UnavailableError,
)
from lsmstore.graveler.sst_writer import write_sst
from lsmstore.refstore.base import Ref, Repository
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.writer import BranchWriter
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore


class AppendFaults(EmbeddedRefStore):
    """The embedded RefStore with injected ``append_l1`` failures: each queued error is
    raised by one append; with ``land`` the append is applied first."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.errors: list[tuple[Exception, bool]] = []
        self.appends: list[str] = []
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def _append_l1(
        self, repo: str, branch: str, file_id: str, repository_id: str | None
    ) -> Ref:
        self.appends.append(file_id)
        self.entered.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.errors:
            error, land = self.errors.pop(0)
            if land:
                await super()._append_l1(repo, branch, file_id, repository_id)
            raise error
        return await super()._append_l1(repo, branch, file_id, repository_id)


async def refstore(tmp_path: Path) -> AppendFaults:
    rs = AppendFaults(tmp_path / "refs")
    await rs.create_repository(Repository(REPO, "mem://x", BRANCH))
    await rs.create_ref(REPO, BRANCH, Ref("branch", ""))
    return rs


def cfg(tmp_path: Path, **kw: object) -> Config:
    return Config(home=tmp_path).replace(**{"batch_interval_ms": 5, **kw})


async def test_failed_upload_fails_the_batch_and_stages_nothing(tmp_path: Path) -> None:
    rs = await refstore(tmp_path)
    objects = FaultyStore(MemoryStore())
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path))
    objects.fail("put", match=lambda k: k.endswith(".sst"))
    results = await asyncio.gather(
        *(w.write(rec(f"k{i}", b"v")) for i in range(20)), return_exceptions=True
    )
    assert all(isinstance(r, UnavailableError) for r in results)
    assert rs.appends == [] and await l1_files(rs, objects) == []
    # the writer goes on: later writes are acknowledged
    await w.write(rec("after", b"ok"))
    assert [[r.key for r in f] for f in await l1_files(rs, objects)] == [[b"after"]]
    assert w.stats.failed_batches == 1
    await w.aclose()
    await rs.aclose()


async def test_unknown_append_outcome_is_retried(tmp_path: Path) -> None:
    rs = await refstore(tmp_path)
    objects = MemoryStore()
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, append_attempts=3))
    rs.errors = [
        (UnavailableError("timeout", outcome_unknown=True), True),  # applied, then lost
        (UnavailableError("timeout", outcome_unknown=True), False),
    ]
    await w.write(rec("k", b"v"))
    assert len(rs.appends) == 3 and len(set(rs.appends)) == 1
    assert [len(f) for f in await l1_files(rs, objects)] == [1]  # appended once
    await w.aclose()
    await rs.aclose()


async def test_append_failure_fails_batch_and_those_queued_behind(tmp_path: Path) -> None:
    rs = await refstore(tmp_path)
    objects = FaultyStore(MemoryStore())
    w = BranchWriter(
        rs,
        objects,
        REPO,
        BRANCH,
        cfg(tmp_path, append_attempts=2, batch_interval_ms=600_000, batch_max_records=1),
    )
    rs.hold = asyncio.Event()
    first = asyncio.create_task(w.write(rec("a", b"1")))
    await rs.entered.wait()  # batch 1 is appending (held)
    uploading = objects.hold("put")
    second = asyncio.create_task(w.write(rec("b", b"2")))  # batch 2 queues behind it
    await uploading.entered.wait()
    uploading.release()
    lost = UnavailableError("refstore down", outcome_unknown=True)
    rs.errors = [(lost, False), (lost, False)]
    rs.hold.set()
    with pytest.raises(UnavailableError) as e1:
        await first
    assert e1.value.outcome_unknown
    with pytest.raises(UnavailableError) as e2:
        await second
    assert e2.value is e1.value  # the same error, and batch 2 never tried to append
    assert len(rs.appends) == 2 and len(set(rs.appends)) == 1
    assert await l1_files(rs, objects) == []  # nothing of either batch is visible
    # a batch sealed after the failure starts afresh
    await w.write(rec("c", b"3"))
    assert [[r.key for r in f] for f in await l1_files(rs, objects)] == [[b"c"]]
    await w.aclose()
    await rs.aclose()


async def test_append_to_missing_branch_is_a_typed_error(tmp_path: Path) -> None:
    rs = await refstore(tmp_path)
    w = BranchWriter(rs, MemoryStore(), REPO, "nosuch", cfg(tmp_path))
    with pytest.raises(RefNotFoundError):
        await w.write(rec("k", b"v"))
    await w.aclose()
    await rs.aclose()


async def test_stage_sst_validates_before_staging(tmp_path: Path) -> None:
    rs = await refstore(tmp_path)
    objects = FaultyStore(MemoryStore())
    w = BranchWriter(rs, objects, REPO, BRANCH, cfg(tmp_path, max_value_bytes=100))
    good = write_sst([rec("a", b"1"), rec("b", None), rec("c", b"3")])
    bad_inputs: list[tuple[bytes, type[Exception]]] = [
        (good[: len(good) - 10], CorruptFileError),  # truncated
        (good[:100] + b"\x00" * 50 + good[150:], CorruptFileError),  # damaged block
        (b"not an sst at all" * 20, CorruptFileError),  # garbage
        (b"", CorruptFileError),
        (write_sst([rec("big", b"x" * 101)]), EntryTooLargeError),  # value over the bound
    ]
    for data, error in bad_inputs:
        with pytest.raises(error):
            await w.stage_sst(data)
    with pytest.raises(InvalidInputError):
        await w.stage_sst("a path is resolved by the client, not here")  # type: ignore[arg-type]
    assert objects.calls["put"] == 0 and rs.appends == []
    file_id = await w.stage_sst(good)
    files = await l1_files(rs, objects)
    assert (await rs.get_ref(REPO, BRANCH)).l1 == (file_id,)
    assert [(r.key, r.value) for r in files[0]] == [(b"a", b"1"), (b"b", None), (b"c", b"3")]
    await w.aclose()
    await rs.aclose()
