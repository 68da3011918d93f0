"""Bulk staging: tasks write sorted staging files, the driver stages them as one unit.

A job (a Spark write, an import) has one *group id*.  Each task sorts its records,
writes them as L1 staging files of the target branch (SST + sidecar, the writer's
format, at most ``file_bytes`` of keys and values each) and reports them
(:class:`WrittenFile`).  The driver then calls :func:`commit_files`: the files, ordered
by key and checked not to overlap, are appended to the branch's L1 with one
``append_l1_group`` -- a reader sees the whole job or none of it, and a re-sent commit
stages nothing twice.  :func:`discard_files` deletes the files of an aborted job;
:func:`commit_or_discard` is the commit that deletes them when it fails with nothing
staged.

Crash table (docs/spark.md):

=============================================  ========================================
crash                                          leaves
=============================================  ========================================
a task after writing some files                files no commit message names: orphans,
                                               deleted by the staging sweep after the
                                               grace period
the driver before ``append_l1_group``          all the job's files, unreferenced: the
                                               same
the driver after it (answer lost)              the group staged; a re-sent commit is a
                                               no-op (group id)
=============================================  ========================================

A job must commit within half the grace period of its first file (the compactor's rule
for its own outputs): older files may already be marked as orphans, so
:func:`commit_files` refuses them (:class:`JobTooSlowError`) and the job is re-run (or
the grace period raised).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from lsmstore import layout
from lsmstore.compaction.policy import file_time
from lsmstore.errors import InvalidInputError, LsmError, UnavailableError
from lsmstore.graveler.record import Record
from lsmstore.operations import protection as _protection
from lsmstore.refstore.base import MAX_FILE_IDS, Ref, RefStore
from lsmstore.staging.files import SIDECAR_SUFFIX, SST_SUFFIX, encode_staging_file, new_file_id
from lsmstore.storage.base import ObjectStore, PutMode

T = TypeVar("T")

#: Default upper bound on keys + values in one staging file a job writes.
FILE_BYTES = 64 * 1024 * 1024
#: Attempts of the group append after an unknown outcome.
COMMIT_ATTEMPTS = 5


class JobTooSlowError(LsmError):
    """A job's files are older than half the grace period: they may already be marked
    as orphans, so they are not staged."""


@dataclass(frozen=True)
class WrittenFile:
    file_id: str
    first_key: bytes
    last_key: bytes
    entries: int
    sst_bytes: int


def sorted_unique(records: Iterable[Record]) -> list[Record]:
    """``records`` in key order; InvalidInputError naming a key that occurs twice."""
    out = sorted(records, key=lambda r: r.key)
    for a, b in itertools.pairwise(out):
        if a.key == b.key:
            raise InvalidInputError(f"key {a.key!r} occurs twice in one write")
    return out


def _chunks(records: Sequence[Record], file_bytes: int) -> Iterable[Sequence[Record]]:
    start, size = 0, 0
    for i, r in enumerate(records):
        size += len(r.key) + (len(r.value) if r.value is not None else 0)
        if size >= file_bytes:
            yield records[start : i + 1]
            start, size = i + 1, 0
    if start < len(records):
        yield records[start:]


async def write_files(
    objects: ObjectStore,
    branch: str,
    records: Sequence[Record],
    *,
    file_bytes: int = FILE_BYTES,
    error_rate: float = 0.01,
    clock: Callable[[], float] = time.time,
) -> list[WrittenFile]:
    """Write sorted, unique ``records`` as L1 staging files of ``branch`` (not staged)."""
    written: list[WrittenFile] = []
    for chunk in _chunks(records, max(1, file_bytes)):
        batch = list(chunk)
        sst, meta, sc = await asyncio.to_thread(encode_staging_file, batch, error_rate)
        fid = new_file_id(clock)
        await objects.put(
            layout.staging_key(branch, "L1", fid, SIDECAR_SUFFIX), meta, PutMode.CREATE
        )
        await objects.put(layout.staging_key(branch, "L1", fid, SST_SUFFIX), sst, PutMode.CREATE)
        written.append(WrittenFile(fid, sc.first_key, sc.last_key, sc.entries, len(sst)))
    return written


def check_job_age(what: str, oldest: float, now: float, grace_s: float) -> None:
    """JobTooSlowError when the job's first output (written at ``oldest``) is older than
    half the grace period: it may already be marked as garbage, so it must not become
    live (module docstring)."""
    if now - oldest > grace_s / 2:
        raise JobTooSlowError(
            f"{what}: the job's first file is {now - oldest:.0f} s old, more than half the "
            f"grace period ({grace_s:.0f} s): not staged; re-run the job or raise "
            "compaction_grace_s"
        )


def order_disjoint(
    items: Iterable[T], bounds: Callable[[T], tuple[bytes, bytes]], what: str
) -> list[T]:
    """A job's outputs (files, ranges) in key order by their ``(first, last)`` keys;
    InvalidInputError if two overlap (the rows were not range-partitioned by key: see
    :func:`lsmstore.spark.save`)."""
    out = sorted(items, key=lambda x: bounds(x)[0])
    for a, b in itertools.pairwise(out):
        (a_first, a_last), (b_first, b_last) = bounds(a), bounds(b)
        if b_first <= a_last:
            raise InvalidInputError(
                f"the job's {what} overlap ({a_first!r}..{a_last!r} and "
                f"{b_first!r}..{b_last!r}): range-partition the rows by key "
                "(lsmstore.spark.save does)"
            )
    return out


def order_files(files: Iterable[WrittenFile]) -> list[WrittenFile]:
    """The job's files in key order (:func:`order_disjoint`), at most a branch's worth."""
    out = order_disjoint(files, lambda f: (f.first_key, f.last_key), "files")
    if len(out) > MAX_FILE_IDS:
        raise InvalidInputError(
            f"the job wrote {len(out)} files, more than a branch holds ({MAX_FILE_IDS}): "
            "raise file_bytes or use fewer partitions"
        )
    return out


async def commit_files(
    refstore: RefStore,
    repo: str,
    branch: str,
    group_id: str,
    files: Iterable[WrittenFile],
    *,
    grace_s: float,
    clock: Callable[[], float] = time.time,
    attempts: int = COMMIT_ATTEMPTS,
    repository_id: str | None = None,
) -> Ref:
    """Stage the job's files as one unit (module docstring); returns the branch's value.
    ``repository_id``: the id of the repository the files were written for (the append
    is refused with RepositoryNotFoundError if it was deleted or re-created since)."""
    ordered = order_files(files)
    now = clock()
    check_job_age(
        f"{repo}/{branch}",
        min((file_time(f.file_id) or now for f in ordered), default=now),
        now,
        grace_s,
    )
    ids = [f.file_id for f in ordered]
    # branch protection (lsmstore.operations.protection): a protected branch refuses
    # the job before anything is appended
    await _protection.check(refstore, await refstore.get_repository(repo), branch, "write to")
    delay = 0.05
    for attempt in range(attempts):
        try:
            return await refstore.append_l1_group(
                repo, branch, group_id, ids, repository_id=repository_id
            )
        except UnavailableError:  # idempotent by the group id: safe to send again
            if attempt + 1 == attempts:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


async def commit_or_discard(
    refstore: RefStore,
    objects: ObjectStore,
    repo: str,
    branch: str,
    group_id: str,
    files: Sequence[WrittenFile],
    *,
    grace_s: float,
    repository_id: str | None = None,
    discard_also: Callable[[], Awaitable[None]] | None = None,
) -> Ref:
    """:func:`commit_files`; when it fails with nothing staged, the files are deleted
    (:func:`discard_files`, then ``discard_also``: the job's other outputs) before the
    error is raised again.  When the outcome is unknown (``UnavailableError`` with
    ``outcome_unknown``: the group may have landed) nothing is deleted: the sweeps
    decide from what the branch holds."""

    async def discard() -> None:
        await discard_files(objects, branch, files)
        if discard_also is not None:
            await discard_also()

    try:
        return await commit_files(
            refstore, repo, branch, group_id, files,
            grace_s=grace_s, repository_id=repository_id,
        )  # fmt: skip
    except UnavailableError as e:
        if not e.outcome_unknown:  # otherwise the group may have landed
            await discard()
        raise
    except Exception:
        await discard()
        raise


async def discard_files(objects: ObjectStore, branch: str, files: Iterable[WrittenFile]) -> None:
    """Delete files of a job that will not be staged (absent ones are fine)."""
    for f in files:
        for suffix in (SST_SUFFIX, SIDECAR_SUFFIX):
            await objects.delete(layout.staging_key(branch, "L1", f.file_id, suffix))
