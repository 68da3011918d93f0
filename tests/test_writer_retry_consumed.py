"""A retried append never re-stages a file that a compaction or commit consumed.

The first ``append_l1`` of a batch lands, then its answer is lost.  Before the writer's
retry, a swap consumes the file and another writer stages a newer value of the same
key.  The retry must change nothing: put back on top of L1, the old file would hide
the newer, acknowledged value.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.staging import BRANCH, REPO, DirectCache, commit_tree, rec

from lsmstore import layout
from lsmstore.config import Config
from lsmstore.errors import UnavailableError
from lsmstore.graveler.source import CachedSource
from lsmstore.graveler.sst_writer import write_sst
from lsmstore.refstore.base import Ref, Repository
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.files import SIDECAR_SUFFIX, SST_SUFFIX, new_file_id
from lsmstore.staging.reader import Files, SidecarCache, Snapshot
from lsmstore.staging.writer import BranchWriter
from lsmstore.storage.memory import MemoryStore


class ConsumedBeforeRetry(EmbeddedRefStore):
    """The embedded RefStore whose first append lands, is consumed by a swap
    (``how``: "compacted" or "committed"), is followed by another writer's newer
    write, and only then reports an unknown outcome."""

    def __init__(self, path: Path, objects: MemoryStore, how: str, config: Config) -> None:
        super().__init__(path)
        self.objects = objects
        self.how = how
        self.config = config
        self.appends: list[str] = []

    async def _append_l1(
        self, repo: str, branch: str, file_id: str, repository_id: str | None
    ) -> Ref:
        self.appends.append(file_id)
        if len(self.appends) > 1:
            return await super()._append_l1(repo, branch, file_id, repository_id)
        await super()._append_l1(repo, branch, file_id, repository_id)
        await self._consume(file_id)
        async with EmbeddedRefStore(self.path) as other_process:
            other = BranchWriter(other_process, self.objects, REPO, BRANCH, self.config)
            await other.write(rec("k", b"newer"))  # acknowledged
            await other.aclose()
        raise UnavailableError("append_l1: answer lost", outcome_unknown=True)

    async def _consume(self, file_id: str) -> None:
        cur = await self.get_ref(REPO, BRANCH)
        assert cur.l1 == (file_id,)
        if self.how == "committed":
            base = await commit_tree(self.objects, [rec("k", b"old"), rec("only-old", b"x")])
            await self.swap_committed(
                REPO, BRANCH, base=cur.base, l2_old=cur.l2, l1_prefix=cur.l1, new_base=base
            )
            return
        l2 = new_file_id()  # the compaction of one file: the same records as an L2 file
        for suffix in (SST_SUFFIX, SIDECAR_SUFFIX):
            data = await self.objects.get(layout.staging_key(BRANCH, "L1", file_id, suffix))
            await self.objects.put(layout.staging_key(BRANCH, "L2", l2, suffix), data)
        await self.swap_compacted(
            REPO, BRANCH, base=cur.base, l2_old=cur.l2, l1_prefix=cur.l1, l2_new=(l2,)
        )


async def _read(refstore: EmbeddedRefStore, objects: MemoryStore, key: str) -> bytes | None:
    cache = DirectCache()
    files = Files(objects, cache, CachedSource(objects, cache), SidecarCache(100))
    snapshot = await Snapshot.load(await refstore.get_ref(REPO, BRANCH), files, BRANCH)
    record, _ = await snapshot.lookup(key.encode())
    return None if record is None else record.value


@pytest.mark.parametrize("how", ["compacted", "committed"])
@pytest.mark.parametrize("stage", ["write", "stage_sst"])
async def test_retried_append_does_not_restage_a_consumed_file(
    tmp_path: Path, how: str, stage: str
) -> None:
    objects = MemoryStore()
    config = Config(home=tmp_path).replace(batch_interval_ms=5, append_attempts=3)
    refstore = ConsumedBeforeRetry(tmp_path / "refs", objects, how, config)
    await refstore.create_repository(Repository(REPO, "mem://x", BRANCH))
    await refstore.create_ref(REPO, BRANCH, Ref("branch", ""))
    writer = BranchWriter(refstore, objects, REPO, BRANCH, config)
    if stage == "write":
        await writer.write_many([rec("k", b"old"), rec("only-old", b"x")])
    else:
        await writer.stage_sst(write_sst([rec("k", b"old"), rec("only-old", b"x")]))
    first, *retries = refstore.appends
    assert retries == [first]  # the lost answer was retried, and the retry succeeded
    ref = await refstore.get_ref(REPO, BRANCH)
    assert first not in ref.l1 and len(ref.l1) == 1  # only the other writer's file
    assert await _read(refstore, objects, "k") == b"newer"
    assert await _read(refstore, objects, "only-old") == b"x"  # consumed, not lost
    await writer.aclose()
    await refstore.aclose()
