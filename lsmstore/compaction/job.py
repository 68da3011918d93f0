"""One compaction job: the oldest prefix of a branch's L1 merged into its L2.

Steps (docs/compaction.md, "The job"):

1. Read the ref ``{base, L2, L1}``; fetch the sidecars of L1's head and of L2; choose
   the prefix (:meth:`lsmstore.compaction.policy.Policy.select_prefix`).
2. ``before_upload``: fetch the prefix's SSTs (bounded by the policy's job size) and
   merge them, newest wins (:func:`lsmstore.staging.merge.merge_newest`), with L2,
   **keeping tombstones** (the base may hold the key).  L2 files are fetched one at a
   time (plus one prefetched) as the merge reaches them, so memory does not grow with
   L2; an L2 file no prefix key falls in is kept by id, without being fetched, when
   the output has just been cut there.  Output is cut into files of about
   ``compaction_l2_file_bytes``; each file is encoded in a thread as soon as it fills
   and uploaded with its sidecar exactly like an L1 file (create mode), at
   ``layout.staging_key(branch, "L2", id)``; the sidecar names the file's covered
   spans over the base (:mod:`lsmstore.compaction.coverage`), if any.
3. ``after_upload``: if the job ran longer than half the grace period, it gives up
   (the sweep may treat outputs that old as orphans).  Otherwise it writes an *intent*
   (:mod:`lsmstore.gc.staging`) naming inputs and outputs.
4. ``before_swap``: ``swap_compacted(base, l2_old, l1_prefix, l2_new)``.  Appends made
   meanwhile do not conflict (the condition looks at a prefix of L1).  A conflict
   means a commit or another compactor moved the branch: the job is abandoned -- never
   retried with its stale inputs, which could re-stage values a commit consumed on top
   of the new base -- its outputs (never referenced) are deleted, and the next pass
   starts from the new state.
5. ``after_swap``: the replaced inputs are recorded as garbage due one grace period
   from now, then the intent is deleted.

A crash between any two steps leaves only unreferenced objects, which the sweep
reclaims (the crash table is in docs/compaction.md).  ``step`` is an optional hook
awaited at each named step with the step's name and the job (tests pause, race or
kill the job there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lsmstore import layout
from lsmstore.compaction.coverage import Coverage
from lsmstore.compaction.merge_plan import FILE, NEED, REUSE, TICK, L2Input, plan
from lsmstore.compaction.merge_worker import MergeWorker, WorkerUnavailable
from lsmstore.compaction.policy import Policy
from lsmstore.config import Config
from lsmstore.errors import ConflictError, UnavailableError
from lsmstore.gc import staging as garbage
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.layout import Level
from lsmstore.refstore.base import MAX_FILE_IDS, Ref, RefStore
from lsmstore.staging.encoder import Encoder
from lsmstore.staging.files import (
    SIDECAR_SUFFIX,
    SST_SUFFIX,
    Sidecar,
    decode_sidecar,
    encode_staging_file,
    new_file_id,
)
from lsmstore.staging.reader import SidecarCache
from lsmstore.storage.base import ObjectStore, PutMode

log = logging.getLogger(__name__)

STEPS = ("before_upload", "after_upload", "before_swap", "after_swap")
StepHook = Callable[[str, "CompactionJob"], Awaitable[None]]

#: Output files encoded (in a thread) or uploaded at once while the merge fills the
#: next one.  One: a second encoding thread adds no throughput (the GIL) but makes the
#: event loop wait longer for it -- writers in the same process would feel that.
OUTPUT_INFLIGHT = 1
#: Input SSTs fetched at once.
FETCH_CONCURRENCY = 8


@dataclass(slots=True)
class JobResult:
    """What one job did, for structured logs."""

    repo: str
    branch: str
    outcome: str  # compacted | conflict | idle | aborted | failed
    reason: str = ""  # the policy's trigger (files, bytes, age, forced)
    l1_in: int = 0  # L1 files merged
    l2_in: int = 0  # L2 files before
    l2_read: int = 0  # of which fetched and rewritten
    l2_reused: int = 0  # of which kept by id
    files_out: int = 0  # new L2 files written
    l2_out: int = 0  # L2 files after (new + reused)
    records_in: int = 0  # records read (L1 prefix + rewritten L2 files)
    records_out: int = 0  # records written
    bytes_in: int = 0  # SST bytes read
    bytes_out: int = 0  # SST bytes written
    duration_s: float = 0.0
    error: str = ""
    ref: Ref | None = field(default=None, repr=False)  # after the swap, or as found
    new_files: tuple[str, ...] = field(default=(), repr=False)  # the L2 files it wrote

    def to_log(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": "compaction"}
        for name in (
            "repo",
            "branch",
            "outcome",
            "reason",
            "l1_in",
            "l2_in",
            "l2_read",
            "l2_reused",
            "files_out",
            "l2_out",
            "records_in",
            "records_out",
            "bytes_in",
            "bytes_out",
        ):
            out[name] = getattr(self, name)
        out["duration_s"] = round(self.duration_s, 4)
        if self.error:
            out["error"] = self.error
        if self.ref is not None:
            out["l1_after"] = len(self.ref.l1)
        return out


class Sidecars:
    """Fetches and caches decoded sidecars of staging files (they are immutable)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.cache = SidecarCache(capacity)

    async def get(
        self, objects: ObjectStore, branch: str, level: Level, ids: Sequence[str]
    ) -> list[Sidecar]:
        sem = asyncio.Semaphore(FETCH_CONCURRENCY)

        async def one(fid: str) -> Sidecar:
            key = layout.staging_key(branch, level, fid, SIDECAR_SUFFIX)
            sc = self.cache.peek(objects, key)
            if sc is None:
                async with sem:
                    data = await objects.get(key)
                sc = decode_sidecar(data, key)
                self.cache.fetches += 1
                self.cache.put(objects, key, sc)
            return sc

        return list(await asyncio.gather(*(one(f) for f in ids)))


class _Output:
    """Cuts the merged stream into L2 files; encodes and uploads them in the background."""

    def __init__(
        self,
        objects: ObjectStore,
        branch: str,
        target_bytes: int,
        error_rate: float,
        clock: Callable[[], float],
        randbits: Callable[[int], int],
        encoder: Encoder | None = None,
        coverage: Coverage | None = None,
    ) -> None:
        self.objects = objects
        self.branch = branch
        self.coverage = coverage
        self.target = target_bytes
        self.error_rate = error_rate
        self.clock = clock
        self.randbits = randbits
        self.encoder = encoder
        self.ids: list[str] = []  # the new L2, in key order (new and reused files)
        self.new: list[str] = []  # files this job wrote (or is writing)
        self.reused: list[str] = []
        self.records = 0
        self.sst_bytes = 0
        self._slots = asyncio.Semaphore(OUTPUT_INFLIGHT)
        self._tasks: list[asyncio.Task[None]] = []

    def _new(self, records: int) -> str:
        fid = new_file_id(self.clock, self.randbits)
        self.ids.append(fid)
        self.new.append(fid)
        self.records += records
        return fid

    async def seal(self, records: list[Record]) -> None:
        """Encode (the encoder, else a thread) and upload ``records`` as the next file."""
        fid = self._new(len(records))
        await self._slots.acquire()
        self.check_tasks()
        self._tasks.append(asyncio.create_task(self._write(fid, records)))

    async def put_encoded(self, sst: bytes, meta: bytes, records: int) -> None:
        """Upload a file encoded elsewhere (the merge worker) as the next file."""
        fid = self._new(records)
        await self._slots.acquire()
        self.check_tasks()
        self._tasks.append(asyncio.create_task(self._upload(fid, sst, meta)))

    def reuse(self, fid: str) -> None:
        self.ids.append(fid)
        self.reused.append(fid)

    def check_tasks(self) -> None:
        """Raise the error of a failed upload early (the job is doomed anyway)."""
        for t in self._tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]

    async def _write(self, fid: str, records: list[Record]) -> None:
        try:
            if self.encoder is not None:  # the client's: a worker process, off the GIL
                sst, meta = await self.encoder.encode(records, self.error_rate)
            else:
                sst, meta, _ = await asyncio.to_thread(
                    encode_staging_file, records, self.error_rate
                )
            del records
            await self._put(fid, sst, meta)
        finally:
            self._slots.release()

    async def _upload(self, fid: str, sst: bytes, meta: bytes) -> None:
        try:
            await self._put(fid, sst, meta)
        finally:
            self._slots.release()

    async def _put(self, fid: str, sst: bytes, meta: bytes) -> None:
        if self.coverage is not None:
            meta = await self.coverage.cover(sst, meta, self._key(fid, SST_SUFFIX))
        await asyncio.gather(
            self.objects.put(self._key(fid, SIDECAR_SUFFIX), meta, PutMode.CREATE),
            self.objects.put(self._key(fid, SST_SUFFIX), sst, PutMode.CREATE),
        )
        self.sst_bytes += len(sst)

    def _key(self, fid: str, suffix: str) -> str:
        return layout.staging_key(self.branch, "L2", fid, suffix)

    async def finish(self) -> None:
        """Wait for every upload; the first error is raised."""
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def discard(self) -> None:
        """Stop uploads and delete whatever this job wrote (never referenced)."""
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await garbage.delete_files(self.objects, self.branch, [("L2", f) for f in self.new])


class CompactionJob:
    """One job on one branch.  ``run()`` never raises for an ordinary failure: it
    returns a :class:`JobResult` whose ``outcome`` says what happened (cancellation
    propagates, after cleaning up what it can)."""

    def __init__(
        self,
        refstore: RefStore,
        objects: ObjectStore,
        repo: str,
        branch: str,
        config: Config,
        *,
        sidecars: Sidecars | None = None,
        clock: Callable[[], float] = time.time,
        randbits: Callable[[int], int] = secrets.randbits,
        step: StepHook | None = None,
        reason: str = "",
        encoder: Encoder | None = None,
        merger: MergeWorker | None = None,
    ) -> None:
        """``merger`` merges and encodes in a process of its own (the in-process
        compactor passes one, so the records never reach the writers' event loop);
        without one (or when it cannot start) the merge runs here, yielding to the
        event loop every few hundred records, and the output files are encoded by
        ``encoder`` or else in a thread."""
        self.refstore = refstore
        self.objects = objects
        self.repo = repo
        self.branch = branch
        self.config = config
        self.policy = Policy.from_config(config)
        self.sidecars = sidecars or Sidecars()
        self.clock = clock
        self.randbits = randbits
        self._step = step
        self.encoder = encoder
        self.merger = merger
        self.result = JobResult(repo, branch, "idle", reason=reason)

    async def step(self, name: str) -> None:
        if self._step is not None:
            await self._step(name, self)

    async def run(self, ref: Ref | None = None) -> JobResult:
        t0 = time.monotonic()
        try:
            await self._run(ref)
        except Exception as e:  # cancellation propagates
            self.result.outcome = "failed"
            self.result.error = f"{type(e).__name__}: {e}"
        finally:
            self.result.duration_s = time.monotonic() - t0
        return self.result

    async def _run(self, ref: Ref | None) -> None:
        res = self.result
        objects, branch = self.objects, self.branch
        started = self.clock()
        if ref is None:
            ref = await self.refstore.get_ref(self.repo, branch)
        res.ref = ref
        if not ref.is_branch or not ref.l1:
            return
        head = ref.l1[: self.policy.job_files]
        l1_sc, l2_sc = await asyncio.gather(
            self.sidecars.get(objects, branch, "L1", head),
            self.sidecars.get(objects, branch, "L2", ref.l2),
        )
        prefix = self.policy.select_prefix(head, [sc.sst_size for sc in l1_sc])
        l1_sc = l1_sc[: len(prefix)]
        res.l1_in, res.l2_in = len(prefix), len(ref.l2)
        await self.step("before_upload")

        target = self._target_bytes(l1_sc, l2_sc)
        out = _Output(
            objects,
            branch,
            target,
            self.config.bloom_error_rate,
            self.clock,
            self.randbits,
            self.encoder,
            Coverage(objects, ref.base),
        )
        try:
            await self._merge(prefix, list(zip(ref.l2, l2_sc, strict=True)), out)
            await out.finish()
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(out.discard())
            raise
        res.files_out, res.l2_out, res.l2_reused = len(out.new), len(out.ids), len(out.reused)
        res.new_files = tuple(out.new)
        res.records_out, res.bytes_out = out.records, out.sst_bytes
        intent_key: str | None = None
        try:
            await self.step("after_upload")
            # Outputs older than half the grace period may be taken for orphans by a
            # sweep: such a slow job gives up rather than swap them in.
            if self.clock() - started > self.config.compaction_grace_s / 2:
                res.outcome = "aborted"
                res.error = "job outlived half the grace period; outputs discarded"
                await out.discard()
                return
            intent = garbage.intent_record(
                self.repo,
                branch,
                base=ref.base,
                l1_prefix=prefix,
                l2_old=ref.l2,
                l2_new=out.ids,
                now=self.clock(),
            )
            intent_key = await garbage.write_record(objects, intent, self.clock)
            await self.step("before_swap")
        except BaseException:  # failed or cancelled before the swap: nothing is visible
            with contextlib.suppress(Exception):
                await asyncio.shield(self._drop(out, intent_key))
            raise
        reused = set(out.reused)

        try:
            new_ref = await self.refstore.swap_compacted(
                self.repo,
                branch,
                base=ref.base,
                l2_old=ref.l2,
                l1_prefix=prefix,
                l2_new=out.ids,
            )
        except ConflictError as e:
            # Definitely not applied: the outputs were never referenced.
            res.outcome = "conflict"
            res.error = str(e)
            res.ref = e.found if isinstance(e.found, Ref) else None
            await self._drop(out, intent_key)
            return
        except UnavailableError as e:
            if not e.outcome_unknown:
                await self._drop(out, intent_key)
                raise
            # Maybe applied: look once; if unclear, the intent lets the sweep decide.
            try:
                now_ref = await self.refstore.get_ref(self.repo, branch)
            except Exception:
                raise e from None
            if not out.new or not set(out.new) <= set(now_ref.l2):
                raise
            new_ref = now_ref
        res.outcome = "compacted"
        res.ref = new_ref
        await self.step("after_swap")

        replaced: list[garbage.StagedFile] = [("L1", f) for f in prefix]
        replaced += [("L2", f) for f in ref.l2 if f not in reused]
        await garbage.record_garbage(
            objects,
            self.repo,
            branch,
            replaced,
            grace_s=self.config.compaction_grace_s,
            reason="compacted",
            clock=self.clock,
        )
        await objects.delete(intent_key)

    async def _drop(self, out: _Output, intent_key: str | None) -> None:
        """Delete the outputs of a swap that did not happen, then the intent.  If that
        fails, the intent stays and the sweep finishes the job."""
        try:
            await out.discard()
            if intent_key is not None:
                await self.objects.delete(intent_key)
        except Exception as e:
            log.warning("%s/%s: cleanup after a failed swap: %s", self.repo, self.branch, e)

    def _target_bytes(self, l1_sc: Sequence[Sidecar], l2_sc: Sequence[Sidecar]) -> int:
        """The L2 file size: the configured target, grown if the output would otherwise
        need more files than a ref can hold next to a full L1 list."""
        total = sum(sc.data_bytes for sc in (*l1_sc, *l2_sc))
        max_files = max(1, (MAX_FILE_IDS - self.config.l1_hard_limit) // 2)
        return max(self.config.compaction_l2_file_bytes, -(-total // max_files))

    async def _fetch_bytes(self, level: Level, fid: str) -> tuple[str, bytes]:
        key = layout.staging_key(self.branch, level, fid, SST_SUFFIX)
        data = await self.objects.get(key)
        self.result.bytes_in += len(data)
        return key, data

    async def _merge(
        self, prefix: Sequence[str], l2: Sequence[tuple[str, Sidecar]], out: _Output
    ) -> None:
        """Merge the prefix with L2 into ``out``: in the merge worker when there is one
        (and it can start), else on the event loop."""
        sem = asyncio.Semaphore(FETCH_CONCURRENCY)
        inputs = [L2Input(sc.first_key, sc.last_key, sc.data_bytes) for _, sc in l2]
        fetches: dict[int, asyncio.Task[tuple[str, bytes]]] = {}

        async def fetch_l1(fid: str) -> tuple[str, bytes]:
            async with sem:
                return await self._fetch_bytes("L1", fid)

        def fetch_l2(i: int) -> asyncio.Task[tuple[str, bytes]]:
            task = fetches.get(i)
            if task is None:
                task = fetches[i] = asyncio.create_task(self._fetch_bytes("L2", l2[i][0]))
            return task

        async def need(i: int) -> tuple[str, bytes]:
            """L2 file ``i``, fetching the next one meanwhile."""
            task = fetch_l2(i)
            if i + 1 < len(l2):
                fetch_l2(i + 1)
            self.result.l2_read += 1
            try:
                return await task
            finally:
                fetches.pop(i, None)

        def reuse(i: int) -> None:
            task = fetches.pop(i, None)
            if task is not None:
                task.cancel()
            out.reuse(l2[i][0])

        try:
            l1 = await asyncio.gather(*(fetch_l1(f) for f in prefix))
            merger = self.merger
            if merger is not None and merger.available:
                try:
                    await self._merge_in_worker(merger, l1, inputs, out, need, reuse)
                    return
                except WorkerUnavailable:
                    pass
            await self._merge_here(l1, inputs, out, need, reuse)
        finally:
            for task in fetches.values():
                task.cancel()
            await asyncio.gather(*fetches.values(), return_exceptions=True)

    async def _merge_in_worker(
        self,
        merger: MergeWorker,
        l1: list[tuple[str, bytes]],
        inputs: list[L2Input],
        out: _Output,
        need: Callable[[int], Awaitable[tuple[str, bytes]]],
        reuse: Callable[[int], None],
    ) -> None:
        async def on_reuse(i: int) -> None:
            reuse(i)

        self.result.records_in += await merger.run(
            l1,
            inputs,
            out.target,
            out.error_rate,
            fetch=need,
            on_file=out.put_encoded,
            on_reuse=on_reuse,
        )

    async def _merge_here(
        self,
        l1: list[tuple[str, bytes]],
        inputs: list[L2Input],
        out: _Output,
        need: Callable[[int], Awaitable[tuple[str, bytes]]],
        reuse: Callable[[int], None],
    ) -> None:
        readers = [SSTReader(data, name) for name, data in l1]
        del l1[:]
        self.result.records_in += sum(r.num_entries for r in readers)
        # plan wants the newest source first; the prefix is oldest first.
        gen = plan([iter(r) for r in reversed(readers)], inputs, out.target)
        del readers
        answer: SSTReader | None = None
        try:
            while True:
                try:
                    event = gen.send(answer)
                except StopIteration:
                    break
                answer = None
                kind = event[0]
                if kind is TICK:
                    await asyncio.sleep(0)  # writers in this process stay responsive
                    out.check_tasks()
                elif kind is FILE:
                    await out.seal(event[1])
                    del event
                elif kind is NEED:
                    name, data = await need(event[1])
                    answer = SSTReader(data, name)
                    del data
                    self.result.records_in += answer.num_entries
                elif kind is REUSE:
                    reuse(event[1])
        finally:
            gen.close()
