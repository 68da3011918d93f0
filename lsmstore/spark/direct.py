"""Direct commit of a bulk write: the job's records become a commit on the branch's base.

Like lakeFS's import, the write skips staging, and the tree is built where the records
are: each task sorts its records (the rows are range-partitioned by key, so tasks hold
disjoint key intervals), cuts them into committed ranges with the repository's range
policy (:class:`~lsmstore.graveler.ranges.RangeWriter`: content-defined boundaries,
each range named by the fileID of its records) and uploads them, and reports the
ranges (:class:`RangesMessage`).  The driver only orders the ranges, refuses overlapping
ones, and commits them with :func:`lsmstore.versioning.graft.commit_ranges` (the
metarange built side by side with the base's ranges where they do not overlap, else
merged onto the base; the branch's base moved with a compare-and-swap).

The tree is deterministic: range IDs depend on the records alone, cuts on the records
and the partitioning (a task's first range starts at its first key, so the tree equals
a one-process build only where a task boundary falls on a cut; every reader, diff and
merge treats any sorted, disjoint list of ranges alike).

Ranges are content-addressed and may be shared with other commits, so an aborted job
deletes none: ranges of failed, speculative or aborted attempts are garbage for
:mod:`lsmstore.gc`, which deletes them two marks a grace period apart.  So a job must
commit within half the grace period of its first range, as a staged job
(:func:`lsmstore.spark.stage.check_job_age`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from lsmstore.config import load_config
from lsmstore.graveler.ranges import FNV_OFFSET, FNV_PRIME, RangeInfo, RangePolicy, RangeWriter
from lsmstore.graveler.record import Record
from lsmstore.refstore.base import RefStore
from lsmstore.refstore.url import open_refstore
from lsmstore.spark import stage
from lsmstore.spark.source import LsmWriter, Options, run
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store
from lsmstore.versioning.context import range_policy
from lsmstore.versioning.graft import commit_ranges, job_tree

COMMITTER = "lsmstore-spark"


@dataclass
class RangesMessage(WriterCommitMessage):
    """What a task wrote: committed ranges (referenced by no tree yet), and when it
    started writing them."""

    ranges: list[RangeInfo]
    started: float


#: Keys hashed at once by :func:`hash_boundaries`.
HASH_CHUNK = 8192


def hash_boundaries(keys: Sequence[bytes], raggedness: int) -> list[bool]:
    """``RangePolicy.is_hash_boundary`` of every key, vectorised: FNV-1a 64 of all keys
    at once, one byte position at a time (numpy's uint64 arithmetic wraps as the hash's
    does).  The per-key Python loop of :func:`~lsmstore.graveler.ranges.fnv1a64` costs
    about 5 us per key, most of a task's range cutting."""
    import numpy as np

    out: list[bool] = []
    prime = np.uint64(FNV_PRIME)
    for start in range(0, len(keys), HASH_CHUNK):
        chunk = keys[start : start + HASH_CHUNK]
        lens = np.fromiter(map(len, chunk), np.int64, len(chunk))
        width = int(lens.max())
        matrix = np.frombuffer(b"".join(k.ljust(width, b"\0") for k in chunk), np.uint8)
        matrix = matrix.reshape(len(chunk), width).astype(np.uint64)
        h = np.full(len(chunk), FNV_OFFSET, np.uint64)
        for j in range(width):
            h = np.where(lens > j, (h ^ matrix[:, j]) * prime, h)
        out.extend((h % np.uint64(raggedness) == 0).tolist())
    return out


async def write_ranges(
    objects: ObjectStore, records: Sequence[Record], policy: RangePolicy
) -> list[RangeInfo]:
    """Cut sorted, unique ``records`` into committed ranges and upload them."""
    async with RangeWriter(objects, policy) as writer:
        push = writer.push
        for start in range(0, len(records), HASH_CHUNK):
            chunk = records[start : start + HASH_CHUNK]
            hints = hash_boundaries([r.key for r in chunk], policy.raggedness)
            for rec, hint in zip(chunk, hints, strict=True):
                if push(rec, hint):
                    await writer.flush()
        return await writer.finish()


def order_ranges(ranges: Sequence[RangeInfo]) -> list[RangeInfo]:
    """The job's ranges in key order; InvalidInputError if two overlap."""
    return stage.order_disjoint(ranges, lambda r: (r.min_key, r.max_key), "ranges")


async def commit_direct(
    refstore: RefStore,
    objects: ObjectStore,
    repo: str,
    branch: str,
    ranges: Sequence[RangeInfo],
    *,
    message: str,
    policy: RangePolicy,
    metadata: dict[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> str:
    """Commit the job's ranges onto the branch's base
    (:func:`lsmstore.versioning.graft.commit_ranges`); the commit id."""
    commit_id, _ = await commit_ranges(
        refstore,
        objects,
        repo,
        branch,
        order_ranges(ranges),
        message=message,
        policy=policy,
        committer=COMMITTER,
        metadata=metadata,
        clock=clock,
    )
    return commit_id


class DirectWriter(LsmWriter):
    """A write whose tasks write committed ranges and whose ``commit()`` makes a
    commit of them."""

    def __init__(self, opts: Options) -> None:
        super().__init__(opts)
        self.policy = range_policy(load_config())  # the driver's, shipped to the tasks

    async def _store(self, objects: ObjectStore, records: list[Record]) -> WriterCommitMessage:
        started = time.time()
        return RangesMessage(await write_ranges(objects, records, self.policy), started)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        msgs = [m for m in messages if isinstance(m, RangesMessage)]
        stage.check_job_age(
            str(self.opts.location),
            min((m.started for m in msgs), default=time.time()),
            time.time(),
            self.opts.grace_s,
        )
        run(self._commit_direct([r for m in msgs for r in m.ranges]))

    async def _commit_direct(self, ranges: list[RangeInfo]) -> None:
        loc = self.opts.location
        objects = open_object_store(self.namespace)
        try:
            async with open_refstore(self.opts.refstore) as refstore:
                self.commit_id = await commit_direct(
                    refstore,
                    objects,
                    loc.repo,
                    loc.ref,
                    ranges,
                    message=self.opts.message,
                    policy=self.policy,
                )
        finally:
            await objects.aclose()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to delete: the tasks' ranges may be shared (content-addressed); no
        tree refers to them, so :mod:`lsmstore.gc` collects them."""


__all__ = ["DirectWriter", "Options", "RangesMessage", "commit_direct", "job_tree"]
