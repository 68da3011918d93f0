"""Direct commit of a bulk write: the job's records become a commit on the branch's base.

Like lakeFS's import, the write skips staging: tasks write their sorted files as for a
staged write (:mod:`lsmstore.spark.stage`), then the driver merges them -- files in key
order, read one after the other -- into the base tree with
:func:`~lsmstore.graveler.apply.apply_changes` (base ranges the job does not touch are
reused by ID, untouched), writes the commit (parent: the base) and moves the branch's
base to it with ``set_base`` (a compare-and-swap; staged changes stay staged on top, as
after a merge).  If a commit moved the base meanwhile, the tree is built again on the
new base.  The job's files are deleted afterwards; they were never referenced, so a
crash leaves them to the staging sweep, and a crash before ``set_base`` leaves a commit
no ref reaches (garbage for :mod:`lsmstore.gc`).

The ranges are built on the driver (one process reads the job's records once); the
tasks only sort and write.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence

from pyspark.sql.datasource import WriterCommitMessage

from lsmstore import layout
from lsmstore.config import load_config
from lsmstore.errors import ConflictError, UnavailableError
from lsmstore.graveler.apply import apply_changes
from lsmstore.graveler.commit import Commit, next_generation, write_commit
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.graveler.ranges import RangePolicy
from lsmstore.graveler.record import Record
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.refstore.base import Ref, RefStore
from lsmstore.refstore.url import open_refstore
from lsmstore.spark import stage
from lsmstore.spark.source import LsmWriter, Options
from lsmstore.staging.files import SST_SUFFIX
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store
from lsmstore.versioning.context import RepoContext, range_policy

COMMITTER = "lsmstore-spark"
ATTEMPTS = 10


async def _records(
    objects: ObjectStore, branch: str, files: Sequence[stage.WrittenFile]
) -> AsyncIterator[Record]:
    for f in files:
        key = layout.staging_key(branch, "L1", f.file_id, SST_SUFFIX)
        for rec in SSTReader(await objects.get(key), key):
            yield rec


async def commit_direct(
    refstore: RefStore,
    objects: ObjectStore,
    repo: str,
    branch: str,
    files: Sequence[stage.WrittenFile],
    *,
    message: str,
    policy: RangePolicy,
    metadata: dict[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> str:
    """Commit the job's files onto the branch's base (module docstring); the commit id."""
    ordered = stage.order_files(files)
    ctx = RepoContext(repo, refstore, objects, policy=policy)
    source = DirectSource(objects)
    for _ in range(ATTEMPTS):
        ref: Ref = await refstore.get_ref(repo, branch)
        if not ref.is_branch:
            raise ConflictError(f"{repo}/{branch} is not a branch", found=ref)
        parents: tuple[str, ...] = ()
        base_tree = EMPTY_METARANGE_ID
        generation = 1
        if ref.base:
            base = await ctx.commit(ref.base)
            parents, base_tree, generation = (ref.base,), base.metarange_id, next_generation([base])
        result = await apply_changes(
            source, objects, base_tree, _records(objects, branch, ordered), policy
        )
        commit = Commit(
            result.metarange_id,
            parents,
            COMMITTER,
            message,
            int(clock()),
            metadata or {},
            generation,
        )
        commit_id = await write_commit(objects, commit)
        try:
            await refstore.set_base(repo, branch, expected_base=ref.base, new_base=commit_id)
            return commit_id
        except ConflictError as e:
            if isinstance(e.found, Ref) and not e.found.is_branch:
                raise
        except UnavailableError as e:
            if not e.outcome_unknown:
                raise
            if (await refstore.get_ref(repo, branch)).base == commit_id:
                return commit_id
    raise UnavailableError(f"{repo}/{branch}: the base kept moving; direct commit not made")


class DirectWriter(LsmWriter):
    """A write whose ``commit()`` makes a commit instead of staging the files."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from lsmstore.spark.source import FilesMessage, run

        files = [f for m in messages if isinstance(m, FilesMessage) for f in m.files]
        run(self._commit_direct(files))

    async def _commit_direct(self, files: list[stage.WrittenFile]) -> None:
        loc = self.opts.location
        objects = open_object_store(self.namespace)
        try:
            async with open_refstore(self.opts.refstore) as refstore:
                try:
                    self.commit_id = await commit_direct(
                        refstore,
                        objects,
                        loc.repo,
                        loc.ref,
                        files,
                        message=self.opts.message,
                        policy=range_policy(load_config()),
                    )
                finally:
                    await stage.discard_files(objects, loc.ref, files)
        finally:
            await objects.aclose()


__all__ = ["DirectWriter", "Options", "commit_direct"]
