"""The branch writer: puts and deletes -> N-ms batches -> L1 files -> ``append_l1`` -> ack.

One :class:`BranchWriter` per (repository, branch) per process, shared by every task.
docs/write-path.md walks through it; the contract in short:

* A write is staged in the memstore and acknowledged (its ``await`` returns) only
  after its batch's SST and sidecar are durable on the object store **and** the
  RefStore has appended the file id to the branch's L1 list.  If the upload or the
  append fails, every write of the batch raises the error (a typed
  :mod:`lsmstore.errors` exception) and none of it is visible.
* A write may name data still being made durable (``write(record, durable=future)``,
  an upload's ``put_fresh``): its batch is appended (or taken along by an earlier
  batch's append) only once every such future of the batch is done; one that fails
  fails the batch, unappended, like a failed upload.
* A batch closes ``batch_interval_ms`` after the previous one closed (at once if that
  is past: an idle writer adds no delay to a lone write; the window stretches while
  many writes wait, see :meth:`BranchWriter._window`), or sooner when it passes
  ``batch_max_bytes``/``batch_max_records`` (a write finding the memstore that full
  starts the next batch); so a writer makes at most one L1 file per window under a
  steady load of small writes, and ack latency is the rest of the window plus the
  flush.  Up to ``max_inflight_batches`` (by default sized by the flush time, see
  :meth:`BranchWriter.depth`) are encoded and uploaded at once, while the next one
  fills; their appends run strictly in batch order, so a write acknowledged before
  another began is ordered before it.
* At its turn a batch is appended together with the batches queued right behind it
  whose files are uploaded (``append_l1_many``, one atomic call; they share its
  outcome).
* An append whose outcome is unknown is retried (``append_l1`` and
  ``append_l1_many`` are idempotent), up to ``append_attempts`` in all.  A batch
  whose append failed makes every batch queued behind it fail with the same error,
  unappended, so no later batch lands ahead of one whose fate is in doubt.  A failed
  upload fails only its batch (it was never appended; nothing can be reordered).
* Memory is bounded: the memstore plus in-flight batches hold at most
  ``max_pending_bytes``; a write waits for room (and raises WriteStalledError after
  ``stall_timeout_s``).
* Backpressure from the branch's L1 length (as returned by the last append):
  past ``l1_soft_limit`` the batching window grows by ``l1_slowdown_ms`` per file
  of excess (fewer, larger files, slower acks); at ``l1_hard_limit`` (counting this
  writer's batches in flight) no batch is flushed until compaction or a commit
  shortens the list (the ref is polled with
  backoff, or :meth:`BranchWriter.l1_changed` wakes the writer); a batch stalled
  for ``stall_timeout_s`` fails with WriteStalledError, and one whose branch (or
  repository) is found gone while it waits fails at once with RefNotFoundError
  (RepositoryNotFoundError), unappended; either way the writer carries on.
* Cancelling a waiting write does not unstage it: it may still be written.
* ``aclose()`` flushes and acknowledges everything staged, then refuses new writes
  with ClosedError (from its start: :meth:`BranchWriter.retire`); a call already
  under way when it starts (a large ``write_staged`` preparing its rows, a
  ``stage_sst``) completes first.  An append refused
  because the branch or repository does not exist is reported to ``on_gone``, so the
  owner can drop the writer; :meth:`BranchWriter.idle` tells when closing settles no
  write.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lsmstore import layout
from lsmstore.config import Config
from lsmstore.errors import (
    ClosedError,
    EntryTooLargeError,
    InvalidInputError,
    ObjectExistsError,
    RefNotFoundError,
    RepositoryNotFoundError,
    UnavailableError,
    WriteStalledError,
)
from lsmstore.graveler.record import RecordTuple
from lsmstore.refstore.base import Ref, RefStore
from lsmstore.staging.encoder import Encoder
from lsmstore.staging.files import (
    SIDECAR_SUFFIX,
    SST_SUFFIX,
    Sidecar,
    encode_sidecar,
    new_file_id,
    sidecar_of_prepared_sst,
)
from lsmstore.staging.memstore import (
    RECORD_OVERHEAD,
    Memstore,
    StagedRows,
    prepare_rows,
    record_bytes,
    staged_bytes,
)
from lsmstore.staging.pending import PendingCall, Staged
from lsmstore.storage.base import ObjectStore, PutMode

log = logging.getLogger(__name__)

#: Bounds of the in-flight depth sized by the flush time (``max_inflight_batches=0``).
AUTO_MIN_INFLIGHT = 4
AUTO_MAX_INFLIGHT = 64
#: Batches appended by one RefStore call at most (see BranchWriter._append_group).
MAX_APPEND_GROUP = 64
#: Flushes kept in :attr:`WriterStats.flushes`.
TRACED_FLUSHES = 1024
#: Writes waiting for acknowledgement per ``batch_interval_ms`` of window: past it the
#: window stretches (see BranchWriter._window).
WAITING_PER_WINDOW = 64
#: From this many records, a ``write_staged`` call has its records made ready for the
#: memstore in a thread (:func:`~lsmstore.staging.memstore.prepare_rows`): done on
#: the loop, a maximal batch held it for hundreds of ms; below it, the thread hop
#: costs more than it saves.
THREAD_ROWS = 4096


@dataclass(slots=True)
class WriterStats:
    """Counters of one writer (the demo and benchmarks print them)."""

    batches: int = 0  # L1 files appended
    records: int = 0  # records in them
    sst_bytes: int = 0
    failed_batches: int = 0
    staged_ssts: int = 0
    stalls: int = 0
    l1_length: int = 0  # the branch's L1 length in the ref of the last append
    #: The last :data:`TRACED_FLUSHES` batches appended or failed (newest last).
    flushes: collections.deque[FlushTrace] = field(
        default_factory=lambda: collections.deque(maxlen=TRACED_FLUSHES)
    )


@dataclass(slots=True)
class FlushTrace:
    """Where one batch's time went, in seconds (``python -m bench write`` prints them).

    ``window``: from when the flusher first saw the batch non-empty until it waited
    for a slot; ``slot``: waiting for an in-flight slot (the batch still fills);
    ``admit``: waiting below the L1 hard limit; ``encode``, ``upload``; ``data``:
    waiting, after the upload, for the data its writes name to be durable
    (``write(durable=...)``); ``turn``: waiting for the previous batch's append;
    ``append``: the RefStore call (0 for a batch an earlier batch's call took along,
    see ``group``).
    ``depth``: the in-flight limit when the batch was sealed.
    """

    records: int = 0
    group: int = 1  # batches appended by the same RefStore call
    depth: int = 0
    window: float = 0.0
    slot: float = 0.0
    admit: float = 0.0
    encode: float = 0.0
    upload: float = 0.0
    data: float = 0.0
    turn: float = 0.0
    append: float = 0.0


class _Batch:
    """A memstore and the futures of the writes waiting on it."""

    __slots__ = (
        "appended",
        "carried",
        "done",
        "durable",
        "file_id",
        "mem",
        "next",
        "seen",
        "seq",
        "trace",
        "waiters",
    )

    def __init__(self, seq: int, loop: asyncio.AbstractEventLoop) -> None:
        self.seq = seq
        self.seen = 0.0  # when the flusher first saw it non-empty (perf_counter; 0: not yet)
        self.trace = FlushTrace()
        self.file_id: str | None = None  # set once uploaded and its writes' data durable
        #: The batch sealed next in the same append chain (it appends after this one).
        self.next: _Batch | None = None
        #: The outcome of an earlier batch's append that took this one along.
        self.carried: Ref | BaseException | None = None
        self.mem = Memstore()
        self.waiters: list[asyncio.Future[None]] = []
        #: Durability of the data its writes name (see ``BranchWriter.write``).
        self.durable: list[asyncio.Future[None]] = []
        # Resolved when this batch's turn to append is over: result None lets the next
        # batch append; an exception makes it fail unappended.
        self.appended: asyncio.Future[None] = loop.create_future()
        # Resolved (always with None) once every waiter has its outcome.
        self.done: asyncio.Future[None] = loop.create_future()


def _resolve(waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for w in waiters:
        if not w.done():
            if error is None:
                w.set_result(None)
            else:
                w.set_exception(error)


async def _all_done(futures: list[asyncio.Future[None]]) -> None:
    """Wait for every future (most are done already); raise the first one's error."""
    waiting = [f for f in futures if not f.done()]
    if waiting:
        await asyncio.wait(waiting)
    for f in futures:
        if f.cancelled():  # whoever made the data durable gave up: not known to be
            raise UnavailableError("the data a write names was not made durable")
        error = f.exception()
        if error is not None:
            raise error


class BranchWriter:
    """Writes of one branch, batched into L1 files. See the module docstring."""

    def __init__(
        self,
        refstore: RefStore,
        objects: ObjectStore,
        repo: str,
        branch: str,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        randbits: Callable[[int], int] = secrets.randbits,
        on_append: Callable[[Ref], None] | None = None,
        encoder: Encoder | None = None,
        repository_id: str | None = None,
        before_append: Callable[[], Awaitable[None]] | None = None,
        on_gone: Callable[[BranchWriter], None] | None = None,
    ) -> None:
        """``before_append`` is awaited before every append and refuses it by raising
        (the operations layer's branch protection: the batch fails, nothing is
        appended).  ``encoder`` encodes sealed batches (a Store shares one, with a worker
        process); without one, batches are encoded in a thread.  ``repository_id``
        conditions every append on the repository's id (RefStore, "Repository ids"):
        a batch prepared for a repository deleted or re-created meanwhile fails with
        RepositoryNotFoundError, never acknowledged.  ``on_gone(writer)`` is called
        when an append is refused because the branch or its repository does not exist
        (RefNotFoundError, RepositoryNotFoundError): the owner then retires the writer
        (:meth:`retire`; a Store drops it, docs/security.md, "Per-branch state")."""
        self.refstore = refstore
        self.repository_id = repository_id
        self.objects = objects
        self.repo = repo
        self.branch = branch
        self.config = config
        self._max_bytes, self._max_records = config.batch_max_bytes, config.batch_max_records
        self._max_pending = config.max_pending_bytes
        self.stats = WriterStats()
        self._clock = clock
        self._randbits = randbits
        self._on_append = on_append
        self._before_append = before_append
        self._on_gone = on_gone
        self._encoder = encoder or Encoder(use_process=False)
        self._loop = asyncio.get_running_loop()
        self._seq = 0
        self._batch = _Batch(0, self._loop)
        self._last_seal = self._loop.time()  # batches close at most once per window
        self._tail: _Batch | None = None  # the last sealed batch
        #: Batches closed because they were full, not yet taken by the flusher (in order).
        self._full: collections.deque[_Batch] = collections.deque()
        self._inflight = 0
        self._slot_free = asyncio.Event()
        self._flush_s = 0.0  # recent flush time, seal to appended (see depth())
        self._pending_bytes = 0  # memstore + in-flight batches
        self._waiting = 0  # writes staged, not yet acknowledged (futures unresolved)
        self._room: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._granted = 0  # writes let in by _grant_room that have not staged yet
        self._wake = asyncio.Event()
        self._l1_changed = asyncio.Event()
        #: Set while flushing is stalled at the L1 hard limit.
        self.stalled = asyncio.Event()
        self._flush_now = False
        #: True from :meth:`retire` (or :meth:`aclose`) on: new writes raise ClosedError.
        self.closing = False
        #: Calls under way that have not reached the memstore (see :meth:`idle`).
        self._entering = 0
        #: ``clock()`` when the last batch was sealed (or the writer made).
        self.last_active = clock()
        #: True once :meth:`aclose` is done (an attribute, not a property: every put
        #: reads it).
        self.closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._runner = self._loop.create_task(self._run(), name=f"writer {repo}/{branch}")

    # --- writes ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closing:
            raise ClosedError(f"writer of {self.repo}/{self.branch} is closed")

    async def write(self, record: RecordTuple, durable: asyncio.Future[None] | None = None) -> None:
        """Stage one validated record and wait for its acknowledgement.  ``durable``:
        the record names data not yet durable (an object store's ``put_fresh``); its
        batch is not appended before that future is done, and fails if it fails."""
        self._check_open()
        size = record_bytes(record)
        if self._room or self._pending_bytes + size > self._max_pending:
            await self._wait_room(size)
        await self._stage((record,), size, durable=durable)

    def try_stage(self, record: RecordTuple) -> asyncio.Future[None] | None:
        """:meth:`write` without a coroutine, when the record fits at once (the common
        case): stage it and return the future of its acknowledgement -- its own, so
        cancelling one waiting write never touches another's.  None when the record
        must wait for room (nothing is staged): then ``await write(record)``.
        ClosedError if the writer is closing."""
        if self.closing:
            self._check_open()  # raises
        value = record[2]
        size = len(record[0]) + (len(value) if value is not None else 0) + RECORD_OVERHEAD
        if self._room or self._pending_bytes + size > self._max_pending:
            return None
        return self._stage((record,), size)

    async def write_many(self, records: Sequence[RecordTuple]) -> None:
        """Stage validated records into one batch; one acknowledgement for the lot.

        A key given twice keeps its last record.  The lot must fit the writer's
        memory bound (``max_pending_bytes``): EntryTooLargeError otherwise.
        """
        await self._write_many(records, record_bytes, pending=False)

    async def write_staged(self, records: Sequence[Staged | RecordTuple] | PendingCall) -> None:
        """:meth:`write_many` of records of which some may be pending
        (:mod:`lsmstore.staging.pending`): their values are made while the batch is
        encoded, off the event loop.  A :class:`PendingCall` (a call's pending records
        as columns) is held as one object (:meth:`Memstore.add_call`)."""
        if len(records) >= THREAD_ROWS and not isinstance(records, PendingCall):
            self._check_open()
            # the per-row work off the loop; the call still enters one memstore in one
            # step (:meth:`Memstore.add_rows`), so it lands in one file as before
            self._entering += 1
            try:
                rows = await asyncio.to_thread(prepare_rows, records)
            finally:
                self._left()
            # begun before any close: it lands in this writer, which waits for it
            await self._write_many(rows, staged_bytes, pending=True, entered=True)
            return
        await self._write_many(records, staged_bytes, pending=True)

    async def _write_many(
        self,
        records: Sequence[Staged | RecordTuple] | PendingCall | StagedRows,
        charge: Callable[[Any], int],
        *,
        pending: bool,
        entered: bool = False,
    ) -> None:
        if not entered:
            self._check_open()
        if not records:
            return
        size = (
            records.charge
            if isinstance(records, PendingCall | StagedRows)
            else sum(map(charge, records))
        )
        if size > self.config.max_pending_bytes:
            raise EntryTooLargeError(
                f"put_many of {len(records)} records ({size} bytes) exceeds the writer's "
                f"memory bound max_pending_bytes={self.config.max_pending_bytes}; "
                "split it or use stage_sst"
            )
        if self._room or self._pending_bytes + size > self._max_pending:
            await self._wait_room(size)
        await self._stage(records, size, pending)

    def _stage(
        self,
        records: Sequence[Staged | RecordTuple] | PendingCall | StagedRows,
        size: int,
        pending: bool = False,
        durable: asyncio.Future[None] | None = None,
    ) -> asyncio.Future[None]:
        """Insert into the current memstore (no await in between: one batch).  A full
        memstore is closed first, so these records start the next batch (the flusher
        takes closed batches in order)."""
        max_bytes, max_records = self._max_bytes, self._max_records
        batch = self._batch
        mem = batch.mem
        n = len(mem.map)
        if n and (mem.nbytes >= max_bytes or n >= max_records):
            self._full.append(batch)
            self._next_batch()
            self._wake.set()
            batch = self._batch
            mem = batch.mem
            n = 0
        if not n:
            self._wake.set()
        if pending:
            self._pending_bytes += (
                mem.add_call(records)
                if isinstance(records, PendingCall)
                else mem.add_rows(records)
                if isinstance(records, StagedRows)
                else mem.add_staged(records)
            )
        else:  # made records only
            self._pending_bytes += (
                mem.add(records[0]) if len(records) == 1 else mem.add_many(records)  # type: ignore[arg-type,index]
            )
        fut: asyncio.Future[None] = self._loop.create_future()
        batch.waiters.append(fut)
        if durable is not None:
            batch.durable.append(durable)
        self._waiting += 1
        if mem.nbytes >= max_bytes or len(mem.map) >= max_records:
            self._wake.set()
        return fut

    async def _wait_room(self, size: int) -> None:
        """Wait in FIFO order until ``size`` bytes fit; on return the bytes are
        reserved for the caller, which stages right away (no await in between)."""
        fut: asyncio.Future[None] = self._loop.create_future()
        entry = (size, fut)
        self._room.append(entry)
        self._grant_room()
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.config.stall_timeout_s)
        except BaseException as e:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._unreserve(size)  # granted, but we are leaving
            else:
                fut.cancel()
                with contextlib.suppress(ValueError):
                    self._room.remove(entry)
            if isinstance(e, TimeoutError):
                raise WriteStalledError(
                    f"write to {self.repo}/{self.branch} waited {self.config.stall_timeout_s}s "
                    f"for room in the writer ({self._pending_bytes} bytes pending)"
                ) from None
            raise
        self._unreserve(size)

    def _unreserve(self, size: int) -> None:
        self._pending_bytes -= size
        self._granted -= 1
        if not self._granted:
            self._wake.set()  # the flusher may be waiting for us to stage before closing

    def _grant_room(self) -> None:
        """Admit waiting writes in FIFO order while they fit (an empty writer admits one)."""
        limit = self.config.max_pending_bytes
        while self._room:
            size, fut = self._room[0]
            if fut.done():
                self._room.popleft()
                continue
            if self._pending_bytes + size > limit and self._pending_bytes > 0:
                return
            self._room.popleft()
            self._pending_bytes += size  # reserved until the waiter stages
            self._granted += 1
            fut.set_result(None)

    async def flush(self) -> None:
        """Flush now and wait until every write staged so far has its outcome."""
        if len(self._batch.mem):
            self._flush_now = True
            self._wake.set()
            target = self._batch
            await asyncio.shield(target.done)
        elif self._full:
            await asyncio.shield(self._full[-1].done)
        elif self._tail is not None:
            await asyncio.shield(self._tail.done)

    def l1_changed(self) -> None:
        """Wake a writer stalled at the hard bound (called after a compaction or commit)."""
        self._l1_changed.set()

    # --- the flusher -------------------------------------------------------------------

    def _window(self) -> float:
        """The batching window in seconds: ``batch_interval_ms``, stretched while more
        than :data:`WAITING_PER_WINDOW` writes wait for acknowledgement (in proportion,
        up to ``batch_interval_max_ms``), and past the L1 soft limit.

        Many waiting writes mean a saturated writer (256 clients each waiting on its
        write); every window's flush has a fixed cost (an L1 file: encode, two puts,
        fsyncs, an append, a file for compaction to merge) that a longer window shares
        among more writes, while the clients' wait is set by that saturation more
        than by the window.  A lightly loaded writer (a few writes per window) keeps
        the short window: its writes' latency is the window plus one flush."""
        cfg = self.config
        ms = cfg.batch_interval_ms
        waiting = self._waiting
        if waiting > WAITING_PER_WINDOW:
            ms = max(ms, min(cfg.batch_interval_max_ms, ms * waiting / WAITING_PER_WINDOW))
        excess = self.stats.l1_length - cfg.l1_soft_limit
        if excess > 0:
            ms += cfg.l1_slowdown_ms * excess
        return ms / 1000.0

    def depth(self) -> int:
        """Batches in flight at most: ``max_inflight_batches`` when set; else enough
        that one batch can be sealed per window while earlier ones are flushed (the
        recent flush time over the window, plus one), between
        :data:`AUTO_MIN_INFLIGHT` and :data:`AUTO_MAX_INFLIGHT`.  On a store with 20 ms
        PUTs a fixed 4 held batches back for a slot, and they grew meanwhile: the
        window stretched to the flush time over 4.  Memory stays bounded by
        ``max_pending_bytes`` whatever the depth."""
        fixed = self.config.max_inflight_batches
        if fixed:
            return fixed
        need = math.ceil(self._flush_s / max(self._window(), 0.001)) + 1
        return min(AUTO_MAX_INFLIGHT, max(AUTO_MIN_INFLIGHT, need))

    def _flushed(self, seconds: float) -> None:
        """Track the flush time (seal to appended) that :meth:`depth` sizes for: it
        follows a rise at once and decays slowly, so the depth covers the slow end."""
        if seconds > self._flush_s:
            self._flush_s = seconds
        else:
            self._flush_s += (seconds - self._flush_s) * 0.1

    async def _wait_slot(self) -> None:
        while self._inflight >= self.depth():
            self._slot_free.clear()
            await self._slot_free.wait()

    async def _run(self) -> None:
        loop = self._loop
        while True:
            if self._full:  # closed because full: flush at once, in order
                batch = self._full[0]
            else:
                batch = self._batch
                if not len(batch.mem):
                    if self.closing and not (self._room or self._granted or self._entering):
                        break
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if not batch.seen:
                    batch.seen = time.perf_counter()
                # Wait out the batching window unless the batch is full or a flush is due.
                while not (self._flush_now or self.closing or self._full or self._is_full(batch)):
                    remaining = self._last_seal + self._window() - loop.time()
                    if remaining <= 0:
                        break
                    self._wake.clear()
                    timer = loop.call_later(remaining, self._wake.set)
                    await self._wake.wait()
                    timer.cancel()
                if self._full and self._full[0] is not batch:
                    continue  # the current batch is not the oldest any more
            trace = batch.trace
            t_slot = time.perf_counter()  # (uvloop's loop.time() counts whole ms)
            if batch.seen:
                trace.window = t_slot - batch.seen
            await self._wait_slot()
            t_admit = time.perf_counter()
            trace.slot = t_admit - t_slot
            try:
                await self._admit()
            except (WriteStalledError, RefNotFoundError, RepositoryNotFoundError) as e:
                # Stalled too long, or the branch went away while stalled: the batch
                # fails unappended (nothing of it visible); the writer carries on.
                self._take(batch)
                self._finish(batch, e, poison=None)
                continue
            trace.admit = time.perf_counter() - t_admit
            trace.depth = self.depth()
            self._take(batch)
            prev = self._tail_before(batch)
            if prev is not None and self._tail is not None:
                self._tail.next = batch
            self._tail = batch
            self._inflight += 1
            task = loop.create_task(self._flush(batch, prev))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _is_full(self, batch: _Batch) -> bool:
        cfg = self.config
        return batch.mem.nbytes >= cfg.batch_max_bytes or len(batch.mem) >= cfg.batch_max_records

    def _next_batch(self) -> None:
        self._seq += 1
        self._batch = _Batch(self._seq, self._loop)

    def _take(self, batch: _Batch) -> None:
        """Seal ``batch`` for flushing: the oldest full batch, or the current one."""
        self._last_seal = self._loop.time()
        self.last_active = self._clock()
        if self._full and self._full[0] is batch:
            self._full.popleft()
        else:
            self._flush_now = False
            self._next_batch()

    def _tail_before(self, batch: _Batch) -> asyncio.Future[None] | None:
        """What the next batch waits for: the last sealed batch's turn, if still running.
        A batch sealed after an earlier failure was reported starts a fresh chain."""
        tail = self._tail
        if tail is None or tail.appended.done():
            return None
        return tail.appended

    async def _admit(self) -> None:
        """Wait while the branch's L1 list, counting this writer's batches admitted but
        not yet appended, is at the hard limit (WriteStalledError after
        ``stall_timeout_s``).  Counting those keeps the limit hard with several batches
        in flight: each admitted batch becomes one more L1 file."""
        cfg = self.config
        if self.stats.l1_length + self._inflight < cfg.l1_hard_limit:
            return
        self.stats.stalls += 1
        self.stalled.set()
        try:
            await self._wait_below_hard_limit()
        except (RefNotFoundError, RepositoryNotFoundError):
            self._gone()
            raise
        finally:
            self.stalled.clear()

    async def _wait_below_hard_limit(self) -> None:
        cfg = self.config
        deadline = self._loop.time() + cfg.stall_timeout_s
        delay = 0.01
        log.info(
            "writer %s/%s stalled: L1 holds %d files", self.repo, self.branch, self.stats.l1_length
        )
        while True:
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                raise WriteStalledError(
                    f"writes to {self.repo}/{self.branch} stalled for {cfg.stall_timeout_s}s: "
                    f"its L1 list holds {self.stats.l1_length} files "
                    f"(hard limit {cfg.l1_hard_limit}); is compaction running?"
                )
            self._l1_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._l1_changed.wait(), min(delay, remaining))
            delay = min(delay * 2, 1.0)
            try:
                ref = await self.refstore.get_ref(self.repo, self.branch)
            except UnavailableError:
                continue
            self.stats.l1_length = len(ref.l1)
            if len(ref.l1) + self._inflight < cfg.l1_hard_limit:
                return

    async def _flush(self, batch: _Batch, prev: asyncio.Future[None] | None) -> None:
        """Encode and upload ``batch``; at its turn, append it; then resolve its writes."""
        error: BaseException | None = None  # what the batch's writes get
        poison: BaseException | None = None  # what batches queued behind it get
        file_id: str | None = None
        sst_size = 0
        now = time.perf_counter
        trace = batch.trace
        t0 = t = now()
        try:
            try:
                mem = batch.mem
                sst, meta = await self._encoder.encode_split(
                    len(mem), mem.split, self.config.bloom_error_rate
                )
                trace.encode = now() - t
                t = now()
                sst_size = len(sst)
                uploaded = await self._upload(sst, meta)
                trace.upload = now() - t
                del sst, meta
                if batch.durable:  # before an earlier batch's append can take it along
                    t = now()
                    await _all_done(batch.durable)
                    trace.data = now() - t
                file_id = batch.file_id = uploaded
            except Exception as e:
                error = e
            # Our turn comes when the previous batch's append is over.
            t = now()
            if prev is not None:
                try:
                    await asyncio.shield(prev)
                except Exception as e:
                    poison = e
                    error = error or e
            trace.turn = now() - t
            if error is None and file_id is not None:
                outcome = batch.carried
                if outcome is None:  # ours to append, with the ready batches behind it
                    t = now()
                    outcome = await self._append_group(batch)
                    trace.append = now() - t
                if isinstance(outcome, BaseException):
                    error = poison = outcome
                    if isinstance(outcome, RefNotFoundError | RepositoryNotFoundError):
                        self._gone()
                else:
                    self._flushed(now() - t0)
                    self.stats.batches += 1
                    self.stats.records += len(batch.mem)
                    self.stats.sst_bytes += sst_size
                    self._after_append(outcome)
        except BaseException as e:  # cancelled: the event loop is going away
            error = poison = ClosedError(f"writer of {self.repo}/{self.branch} was cancelled")
            if not isinstance(e, asyncio.CancelledError):
                raise
        finally:
            self._inflight -= 1
            self._slot_free.set()
            self._finish(batch, error, poison=poison)
        if error is not None:
            log.warning(
                "batch of %d writes to %s/%s failed: %s",
                len(batch.waiters),
                self.repo,
                self.branch,
                error,
            )

    def _finish(
        self, batch: _Batch, error: BaseException | None, *, poison: BaseException | None
    ) -> None:
        if error is not None:
            self.stats.failed_batches += 1
        batch.trace.records = len(batch.mem)
        batch.next = None
        self.stats.flushes.append(batch.trace)
        if poison is None:
            batch.appended.set_result(None)
        else:
            batch.appended.set_exception(poison)
            batch.appended.exception()  # mark retrieved: no batch may be queued behind
        self._pending_bytes -= batch.mem.nbytes
        self._waiting -= len(batch.waiters)
        _resolve(batch.waiters, error)
        batch.done.set_result(None)
        self._grant_room()

    def _after_append(self, ref: Ref) -> None:
        self.stats.l1_length = len(ref.l1)
        if self._on_append is not None:
            self._on_append(ref)

    async def _upload(self, sst: bytes, meta: bytes) -> str:
        """Put the sidecar and the SST (create mode, in parallel); returns the file id."""
        for attempt in range(2):
            file_id = new_file_id(self._clock, self._randbits)
            try:
                await asyncio.gather(
                    self.objects.put(self._key(file_id, SIDECAR_SUFFIX), meta, PutMode.CREATE),
                    self.objects.put(self._key(file_id, SST_SUFFIX), sst, PutMode.CREATE),
                )
                return file_id
            except ObjectExistsError:
                if attempt:  # two collisions of 64 random bits: something is wrong
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _key(self, file_id: str, suffix: str) -> str:
        return layout.staging_key(self.branch, "L1", file_id, suffix)

    async def _append_group(self, lead: _Batch) -> Ref | BaseException:
        """Append ``lead``'s file and those of the batches queued right behind it whose
        files are uploaded (at most :data:`MAX_APPEND_GROUP`), in order, in one RefStore
        call; each of those batches then takes the outcome when its turn comes, without
        a call of its own.  Under a slow RefStore the queue behind a slow append then
        drains in one round trip instead of one each."""
        group = [lead]
        b = lead.next
        while b is not None and b.file_id is not None and len(group) < MAX_APPEND_GROUP:
            group.append(b)
            b = b.next
        ids = [g.file_id for g in group if g.file_id is not None]
        outcome: Ref | BaseException
        try:
            outcome = await self._append(ids)
        except Exception as e:
            outcome = e
        for g in group:
            g.trace.group = len(group)
            if g is not lead:
                g.carried = outcome
        return outcome

    async def _append(self, file_ids: Sequence[str]) -> Ref:
        """``append_l1`` (``append_l1_many`` for several files) with retries of
        unavailable backends (both are idempotent)."""
        attempts = self.config.append_attempts
        unknown = False
        delay = 0.02
        rs, repo, branch = self.refstore, self.repo, self.branch
        named = ", ".join(file_ids)
        if self._before_append is not None:
            await self._before_append()
        for attempt in range(1, attempts + 1):
            try:
                uid = self.repository_id
                if len(file_ids) == 1:
                    return await rs.append_l1(repo, branch, file_ids[0], repository_id=uid)
                return await rs.append_l1_many(repo, branch, file_ids, repository_id=uid)
            except UnavailableError as e:
                unknown = unknown or e.outcome_unknown
                if attempt == attempts:
                    raise UnavailableError(
                        f"append of L1 file(s) {named} to {repo}/{branch} failed "
                        f"after {attempts} attempts: {e}",
                        outcome_unknown=unknown,
                    ) from e
                log.info("append of %s to %s/%s: %s; retrying", named, repo, branch, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- prepared SSTs ---------------------------------------------------------------------

    async def stage_sst(self, data: bytes) -> str:
        """Validate a prepared SST, upload it with its sidecar, and append it as one L1 file.

        Returns the file id.  Malformed input raises CorruptFileError/InvalidInputError
        (or EntryTooLargeError for a key or value out of bounds) and stages nothing.
        """
        self._check_open()
        if not isinstance(data, bytes):
            raise InvalidInputError(f"stage_sst needs bytes, not {type(data).__name__}")
        self._entering += 1
        try:
            return await self._stage_sst(data)
        finally:
            self._left()
            self.last_active = self._clock()

    async def _stage_sst(self, data: bytes) -> str:
        cfg = self.config
        sidecar: Sidecar = await asyncio.to_thread(
            sidecar_of_prepared_sst,
            data,
            "prepared SST",
            cfg.max_key_bytes,
            cfg.max_value_bytes,
            cfg.bloom_error_rate,
            cfg.max_prepared_sst_bytes,
        )
        await self._admit()  # the same backpressure as batches
        file_id = await self._upload(data, encode_sidecar(sidecar))
        try:
            ref = await self._append([file_id])
        except (RefNotFoundError, RepositoryNotFoundError):
            self._gone()
            raise
        self.stats.staged_ssts += 1
        self._after_append(ref)
        return file_id

    # --- life cycle --------------------------------------------------------------------------

    def _left(self) -> None:
        """A call counted in ``_entering`` is done entering."""
        self._entering -= 1
        if not self._entering:
            self._wake.set()  # a closing flusher waits for it (see _run)

    def _gone(self) -> None:
        if self._on_gone is not None and not self.closing:
            self._on_gone(self)

    def idle(self) -> bool:
        """True when nothing is staged, in flight, waiting for room or on its way in:
        closing the writer now settles no write."""
        return not (
            len(self._batch.mem)
            or self._full
            or self._inflight
            or self._waiting
            or self._room
            or self._granted
            or self._entering
        )

    def retire(self) -> None:
        """Refuse new writes (ClosedError) from now on; what is staged is still flushed
        by :meth:`aclose`, which the caller awaits.  Synchronous, so that an owner
        that saw the writer :meth:`idle` retires it before any other write comes in."""
        self.closing = True
        self._wake.set()

    async def aclose(self) -> None:
        """Flush and acknowledge everything staged, then release the writer."""
        if self.closed:
            return
        self.retire()
        try:
            await asyncio.shield(self._runner)
        finally:
            self.closed = True
            for _, fut in self._room:
                if not fut.done():
                    fut.set_exception(ClosedError(f"writer of {self.repo}/{self.branch} is closed"))
