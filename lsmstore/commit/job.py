"""The commit job: a branch's staged changes (L2 + L1) applied to its base as a new commit.

Steps (docs/versioning.md has the crash table):

1. Read the ref ``{base, L2, L1}``.  This snapshot decides what is committed: the whole
   L2 and the L1 prefix it holds.  Writes appended later stay staged.
2. Merge the snapshot's files into one sorted change stream (L1 newest first, then L2;
   newest wins; tombstones included) and apply it to the base tree: ranges no change
   touches are reused by ID without being read, touched ranges are rewritten with
   content-defined boundaries, then the metarange is written (``apply_changes``).
3. Write the commit object (parents ``[base]``, generation ``base + 1``).
4. ``swap_committed(base, l2_old=L2, l1_prefix=L1, new_base=commit)``: atomically the
   branch's base becomes the commit, L2 empties and the snapshot's L1 prefix leaves L1.

Everything written before step 4 is content-addressed and immutable, so a crash before
the swap leaves only unreferenced objects (garbage), and the branch unchanged; a crash
after it leaves a complete commit.

When the swap's condition fails:

* only compaction moved (same base; the current L1 still starts with a non-empty tail
  of our prefix): the files compaction merged into L2 were all in our snapshot, so the
  tree is still right.  The swap is re-issued at once against the new L2 and the
  remaining prefix; nothing is recomputed.
* the base is the same but the fast path does not apply (compaction consumed all of
  our prefix): the job starts over from the new ref at once.
* the base moved (another commit or a merge): start over from the new ref after a
  bounded, jittered backoff, up to ``max_attempts`` attempts in all; then the
  :class:`ConflictError` is raised.

A new attempt passes the range IDs of the trees earlier attempts built to
``apply_changes`` as known: output ranges with those IDs (content addressing: the same
records) are neither re-encoded nor re-uploaded, so after a compaction race only the
ranges whose content really changed are written again.

A swap whose outcome is unknown (:class:`UnavailableError` with ``outcome_unknown``) is
settled by reading the ref: if its base is our commit, the swap happened.

Errors: :class:`NothingToCommitError` when nothing is staged, or the staged files leave
the tree unchanged (those no-op files are then dropped from the branch), unless
``allow_empty``; :class:`RefNotFoundError` for a missing branch;
:class:`InvalidInputError` when the name is a tag; :class:`ConflictError` after
``max_attempts``; whatever the stores raise.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lsmstore.errors import (
    ConflictError,
    InvalidInputError,
    NothingToCommitError,
    UnavailableError,
)
from lsmstore.gc.staging import StagedFile, record_garbage
from lsmstore.graveler.apply import apply_changes
from lsmstore.graveler.commit import write_commit
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.graveler.record import Record
from lsmstore.refstore.base import Ref
from lsmstore.refstore.transitions import starts_with
from lsmstore.types import Commit
from lsmstore.versioning.context import RepoContext
from lsmstore.versioning.staged import merged, open_staged

log = logging.getLogger(__name__)

#: The named points of a commit, in order; ``on_step`` is awaited at each.
STEPS = ("staged-read", "tree-written", "commit-written", "swapped")

#: Records merged between two yields to the event loop.
YIELD_EVERY = 2048
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_BACKOFF_S = 0.05
DEFAULT_BACKOFF_MAX_S = 2.0


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What one commit did (the worker logs it)."""

    branch: str
    commit_id: str
    commit: Commit
    previous_base: str  # the base the commit replaced
    changes: int  # staged records applied (last attempt)
    l1_files: int  # L1 files the commit consumed
    l2_files: int  # L2 files the commit consumed
    ranges_read: int  # over all attempts
    ranges_written: int
    ranges_reused: int
    attempts: int
    duration_s: float
    retired: tuple[StagedFile, ...] = field(default=(), repr=False)  # files the swap removed
    garbage_record: str | None = None  # key of the garbage record naming them
    chunks: int = 0  # last attempt: chunks of ranges applied by worker processes
    resyncs: int = 0  # of which adopted after a re-synchronisation

    def to_log(self) -> dict[str, Any]:
        """The fields of the worker's JSON log line (beside repository and branch)."""
        return {
            "commit_id": self.commit_id,
            "previous_base": self.previous_base,
            "changes": self.changes,
            "l1_files": self.l1_files,
            "l2_files": self.l2_files,
            "ranges_read": self.ranges_read,
            "ranges_written": self.ranges_written,
            "ranges_reused": self.ranges_reused,
            "attempts": self.attempts,
            "chunks": self.chunks,
            "duration_s": round(self.duration_s, 6),
        }


@dataclass(slots=True)
class _Counter:
    n: int = 0

    async def count(self, records: Iterator[Record]) -> AsyncIterator[Record]:
        """Count the records, yielding to the event loop every :data:`YIELD_EVERY` of
        them (a commit may run inside a client process next to its writers)."""
        for record in records:
            self.n += 1
            if not self.n % YIELD_EVERY:
                await asyncio.sleep(0)
            yield record


def _compacted_rest(found: Ref, base: str, prefix: tuple[str, ...]) -> tuple[str, ...] | None:
    """The part of ``prefix`` still in L1 when only compaction moved, else None.

    Compaction removes a prefix of L1 and rewrites L2.  If the current L1 starts with a
    non-empty tail ``prefix[k:]``, compaction consumed exactly ``prefix[:k]`` (ids are
    unique), so every record now in L2 came from our snapshot.
    """
    if not found.is_branch or found.base != base:
        return None
    for k in range(1, len(prefix)):
        rest = prefix[k:]
        if starts_with(found.l1, rest):
            return rest
    return None


async def commit_branch(
    repo: RepoContext,
    branch: str,
    message: str,
    *,
    committer: str,
    metadata: Mapping[str, str] | None = None,
    allow_empty: bool = False,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: Callable[[], float] = random.random,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff_s: float = DEFAULT_BACKOFF_S,
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
    grace_s: float | None = None,
    on_step: Callable[[str], Awaitable[None]] | None = None,
) -> CommitResult:
    """Commit ``branch``'s staged changes (module docstring).

    ``clock`` gives the creation time; ``sleep``/``rng`` time the backoff.  With
    ``grace_s``, the staging files the swap removed are recorded as garbage due that
    long after (:func:`lsmstore.gc.staging.record_garbage`); a failure to record is only
    logged -- the sweep finds unrecorded files as orphans.  ``on_step`` is awaited at
    each of :data:`STEPS` (crash tests pause there).
    """
    if max_attempts < 1:
        raise InvalidInputError(f"max_attempts must be >= 1, got {max_attempts}")
    # Validate the commit fields before any work (Commit raises InvalidInputError).
    Commit(EMPTY_METARANGE_ID, (), committer, message, 0, dict(metadata or {}))
    started = time.monotonic()
    ctx = repo
    reads = writes = reuses = 0
    known: set[str] = set()  # range IDs of the trees earlier attempts built
    attempt = 0

    async def step(name: str) -> None:
        if on_step is not None:
            await on_step(name)

    while True:
        attempt += 1
        ref = await ctx.refstore.get_ref(ctx.name, branch)
        if not ref.is_branch:
            raise InvalidInputError(f"{ctx.name}/{branch} is a tag: only branches take commits")
        if not ref.l1 and not ref.l2 and not allow_empty:
            raise NothingToCommitError(f"{ctx.name}/{branch}: nothing staged to commit")
        base = await ctx.commit(ref.base) if ref.base else None
        base_tree = base.metarange_id if base is not None else EMPTY_METARANGE_ID
        readers = await open_staged(ctx, branch, ref)
        await step("staged-read")
        counter = _Counter()
        applied = await apply_changes(
            ctx.source,
            ctx.objects,
            base_tree,
            counter.count(merged(readers)),
            ctx.policy,
            known_ranges=known,
            encoder=ctx.range_encoder,
        )
        reads += applied.ranges_read
        writes += applied.ranges_written
        reuses += applied.ranges_reused
        tree = applied.metarange_id
        await step("tree-written")

        if tree == base_tree and not allow_empty:
            # The staged files change nothing: drop them without a commit.
            if ref.base:
                try:
                    await ctx.refstore.swap_committed(
                        ctx.name,
                        branch,
                        base=ref.base,
                        l2_old=ref.l2,
                        l1_prefix=ref.l1,
                        new_base=ref.base,
                    )
                except ConflictError:
                    pass  # someone else moved the ref: their business
                else:
                    if grace_s is not None:
                        dropped: list[StagedFile] = [("L1", f) for f in ref.l1]
                        dropped += [("L2", f) for f in ref.l2]
                        await _record_garbage(ctx, branch, dropped, grace_s, clock)
            raise NothingToCommitError(
                f"{ctx.name}/{branch}: the {counter.n} staged changes leave the tree "
                "unchanged; nothing to commit"
            )

        parents = (ref.base,) if ref.base else ()
        commit = Commit(
            tree,
            parents,
            committer,
            message,
            int(clock()),
            dict(metadata or {}),
            base.generation + 1 if base is not None else 1,
        )
        commit_id = await write_commit(ctx.objects, commit)
        ctx.remember(commit_id, commit)
        await step("commit-written")

        l2_old, prefix = ref.l2, ref.l1
        found: Ref | None = None
        swapped = False
        while not swapped:
            try:
                await ctx.refstore.swap_committed(
                    ctx.name,
                    branch,
                    base=ref.base,
                    l2_old=l2_old,
                    l1_prefix=prefix,
                    new_base=commit_id,
                )
                swapped = True
            except UnavailableError as e:
                if not e.outcome_unknown:
                    raise
                # The swap may or may not have happened: the ref tells.  If not, the
                # CAS makes another try safe.
                swapped = (await ctx.refstore.get_ref(ctx.name, branch)).base == commit_id
            except ConflictError as e:
                found = e.found if isinstance(e.found, Ref) else None
                rest = _compacted_rest(found, ref.base, prefix) if found is not None else None
                if found is None or rest is None:
                    break
                l2_old, prefix = found.l2, rest
        if swapped:
            await step("swapped")
            retired: list[StagedFile] = [("L1", f) for f in prefix]
            retired += [("L2", f) for f in l2_old]
            record = None
            if grace_s is not None:
                record = await _record_garbage(ctx, branch, retired, grace_s, clock)
            return CommitResult(
                branch=branch,
                commit_id=commit_id,
                commit=commit,
                previous_base=ref.base,
                changes=counter.n,
                l1_files=len(ref.l1),
                l2_files=len(ref.l2),
                ranges_read=reads,
                ranges_written=writes,
                ranges_reused=reuses,
                attempts=attempt,
                duration_s=time.monotonic() - started,
                # What our swap removed from the ref (compaction retires what it replaced).
                retired=tuple(retired),
                garbage_record=record,
                chunks=applied.chunks,
                resyncs=applied.resyncs,
            )
        if attempt >= max_attempts:
            raise ConflictError(
                f"{ctx.name}/{branch}: commit gave up after {attempt} attempts: the branch "
                "kept changing under it",
                found=found,
            )
        known.update(r.id for r in await ctx.source.metarange(tree))
        if found is None or found.base != ref.base:
            # another commit or a merge moved the base: back off, start over
            delay = min(backoff_max_s, backoff_s * 2 ** (attempt - 1))
            await sleep(delay * (0.5 + 0.5 * rng()))


async def _record_garbage(
    ctx: RepoContext,
    branch: str,
    files: list[StagedFile],
    grace_s: float,
    clock: Callable[[], float],
) -> str | None:
    try:
        return await record_garbage(
            ctx.objects, ctx.name, branch, files, grace_s=grace_s, reason="commit", clock=clock
        )
    except Exception as e:  # the commit is done; the sweep will find the files as orphans
        log.warning(
            "%s/%s: could not record %d retired staging files: %s", ctx.name, branch, len(files), e
        )
        return None
