"""Applying a big change set by range across worker processes, with the same result.

A commit whose changes touch many ranges rewrites them record by record: decoding the
base blocks, merging, cutting, naming and encoding -- all CPU, all per record.  The work
is split into chunks at base-range boundaries (chunk ``j`` = base ranges
``[a_j, a_j+1)`` and the changes whose keys fall from ``a_j``'s first key up to
``a_j+1``'s first key; the first chunk also takes the changes before the tree, the last
those after it).  Each chunk goes to a worker process of the
:class:`~lsmstore.graveler.range_encoder.RangeEncoder` pool, which runs the same walk
(:class:`lsmstore.graveler.apply.Walk`) *as if the output were cut right before the
chunk*: it fetches the base ranges it enters through its pipe (the parent reads them
from the store, the next one while the worker works on the current one), names and
encodes each range it cuts and hands it to the parent, which uploads it (ranges cross
the pipe out of band: :mod:`lsmstore.workerpipe`); it answers with its output ranges,
the counts at each cut, and the records after its last cut (the *tail*).

Why the result is the sequential one: the output's cuts depend only on the record
stream and the state since the last cut (ranges.py), so two walks over the same stream
that cut after the same key agree from there on.  The parent walks the tree as before
and, whenever its output has just been cut, checks whether it may *adopt* a chunk's
result:

* at the first range of chunk ``j`` with nothing waiting for a cut: the state is the
  worker's starting state, so the worker's ranges and tail are the sequential ones;
* right after cutting at a key where the worker of the current chunk also cut (the
  *re-synchronisation*: when the previous chunk ended without a cut at its end, the
  parent itself carries its pending records into the chunk and walks on until its
  cuts meet one of the worker's): the worker's ranges after that key are adopted.

Adopting appends the worker's ranges, pushes its tail, and moves the walk to the
chunk's end.  A chunk whose worker fails (or a worker that dies) is walked by the
parent, which raises the real error if there is one.  A range a worker uploaded before
a cut the parent did not adopt is unreferenced (garbage, as after an aborted commit);
at most the worker ranges before the re-synchronisation point of each chunk.

Cost: the parent reads the change set into memory (at most :data:`MAX_CHANGES`; beyond
that the commit streams sequentially as before); small change sets (fewer than
:data:`MIN_TOUCHED` touched ranges) never leave the committing process, so a one-key
commit pays nothing for this.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from bisect import bisect_left, bisect_right
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, BinaryIO, Self, TypeVar

from lsmstore import layout
from lsmstore.errors import ObjectExistsError, ObjectNotFoundError, UnavailableError
from lsmstore.gcfreeze import paused
from lsmstore.graveler.apply import Walk
from lsmstore.graveler.range_encoder import RangeEncoder, encode_records
from lsmstore.graveler.ranges import RangeInfo, RangePolicy, RangeWriter
from lsmstore.graveler.record import Record, RecordTuple
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.tree import TreeCursor
from lsmstore.storage.base import ObjectMeta, ObjectStore, PutMode
from lsmstore.workerpipe import read_message, write_message

#: Touched base ranges below which a change set is applied in the committing process.
MIN_TOUCHED = 4
#: Changes held in memory to plan a split; a bigger change set is applied sequentially.
MAX_CHANGES = 4_000_000
#: Chunks per worker process (more chunks: better balance, more re-synchronisations).
CHUNKS_PER_PROCESS = 2


async def _aiter(records: Iterable[Record]) -> AsyncIterator[Record]:
    for r in records:
        yield r


async def _chain(head: list[Record], rest: AsyncIterator[Record]) -> AsyncIterator[Record]:
    for r in head:
        yield r
    async for r in rest:
        yield r


def plan_chunks(ranges: Sequence[RangeInfo], keys: Sequence[bytes], chunks: int) -> list[int]:
    """The first base range of each chunk (0 first): touched ranges shared out evenly.

    A change belongs to the last range whose first key is <= its key (the first range
    for keys before the tree).  Empty when fewer than :data:`MIN_TOUCHED` ranges are
    touched."""
    mins = [r.min_key for r in ranges]
    touched = sorted({max(0, bisect_right(mins, k) - 1) for k in keys})
    if len(touched) < MIN_TOUCHED or chunks < 2:
        return []
    chunks = min(chunks, len(touched))
    starts = {0}
    starts.update(touched[(g * len(touched)) // chunks] for g in range(1, chunks))
    return sorted(starts)


@dataclass(slots=True)
class _Spec:
    """A worker's result for one chunk (module docstring)."""

    ranges: list[RangeInfo]
    written: set[str]  # IDs of the ranges it uploaded
    cut_counts: list[tuple[int, int, int]]  # (added, removed, changed) after each range
    totals: tuple[int, int, int]
    tail: list[Record]
    ranges_read: int


T = TypeVar("T")

#: How often a pool thread waiting on the event loop checks that the commit goes on.
_POLL_S = 0.5


class _Abandoned(Exception):
    pass


class _Chunk:
    """One chunk: its ranges ``[start, end)``, the key its successor starts at, and its
    worker's future result (None: failed; the parent walks it)."""

    __slots__ = ("changes", "end", "end_key", "future", "start")

    def __init__(self, start: int, end: int, end_key: bytes | None, changes: list[Record]):
        self.start = start
        self.end = end
        self.end_key = end_key
        self.changes = changes
        self.future: asyncio.Future[_Spec | None] | None = None


class ParallelPlan:
    """The chunks of one apply, their workers' results, and adoption (module docstring).

    Used as an async context manager around the walk: entering sends every chunk to the
    pool; leaving waits for the workers (abandoning those still running on an error).
    """

    def __init__(
        self,
        ranges: Sequence[RangeInfo],
        starts: list[int],
        changes: list[Record],
        policy: RangePolicy,
        encoder: RangeEncoder,
        store: ObjectStore,
        existing: set[str],
    ) -> None:
        keys = [c.key for c in changes]
        self._ranges = ranges
        self._chunks: dict[int, _Chunk] = {}
        for j, start in enumerate(starts):
            end = starts[j + 1] if j + 1 < len(starts) else len(ranges)
            end_key = ranges[end].min_key if end < len(ranges) else None
            lo = 0 if j == 0 else bisect_left(keys, ranges[start].min_key)
            hi = len(keys) if end_key is None else bisect_left(keys, end_key)
            self._chunks[start] = _Chunk(start, end, end_key, changes[lo:hi])
        self._policy = policy
        self._encoder = encoder
        self._store = store
        self._existing = frozenset(existing)
        self._cut_keys: dict[bytes, tuple[_Spec, int, _Chunk]] = {}
        self._abandoned = threading.Event()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.ranges_read = 0
        self.adopted = 0  # chunks adopted from their start
        self.resynced = 0  # chunks adopted after a re-synchronisation

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()
        self._encoder.start()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, self._encoder.processes), thread_name_prefix="apply-chunk"
        )
        for chunk in self._chunks.values():
            chunk.future = loop.run_in_executor(self._pool, self._run_chunk, chunk, loop)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._abandoned.set()
        futures = [c.future for c in self._chunks.values() if c.future is not None]
        try:
            await asyncio.gather(*futures, return_exceptions=True)
        except BaseException:  # cancelled again while waiting: the threads stop on their own
            self._abandoned.set()
            raise
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=False)

    # --- in a pool thread: one conversation with a worker ---------------------------

    def _run_chunk(self, chunk: _Chunk, loop: asyncio.AbstractEventLoop) -> _Spec | None:
        if self._abandoned.is_set():
            return None  # not begun: no worker is broken off (killed) for nothing
        ranges = self._ranges
        request = (
            "apply",
            [tuple(r) for r in (_info_tuple(i) for i in ranges[chunk.start : chunk.end])],
            chunk.end == len(ranges),
            [tuple(c) for c in chunk.changes],
            (self._policy.min_bytes, self._policy.max_bytes, self._policy.raggedness),
            self._existing,
        )
        puts: list[concurrent.futures.Future[None]] = []
        store = self._store
        # The worker reads the chunk's ranges in order, surely those holding a change:
        # the next of these is always being fetched while it works on the current one.
        first, following = _prefetch_order(ranges[chunk.start : chunk.end], chunk.changes)
        ahead: dict[str, concurrent.futures.Future[bytes]] = {}

        def fetch_ahead(key: str | None) -> None:
            if key is not None and key not in ahead:
                ahead[key] = asyncio.run_coroutine_threadsafe(store.get(key), loop)

        def on_message(msg: tuple[Any, ...]) -> tuple[Any, ...] | None:
            if self._abandoned.is_set():
                raise _Abandoned
            if msg[0] == "get":
                key = msg[1]
                fetch_ahead(key)
                future = ahead.pop(key)
                fetch_ahead(following.get(key))
                try:
                    data = self._wait(future)
                except ObjectNotFoundError as e:
                    return ("missing", str(e))
                except Exception as e:
                    return ("unavailable", f"{type(e).__name__}: {e}")
                return ("ok", data)
            if msg[0] == "put":
                puts.append(asyncio.run_coroutine_threadsafe(_put(store, msg[1], msg[2]), loop))
                return None
            raise OSError(f"unexpected message from an apply worker: {msg[0]!r}")

        fetch_ahead(first)
        try:
            answer = self._encoder.converse(request, on_message)
        finally:
            for stale in ahead.values():
                stale.cancel()
        try:
            for f in puts:
                self._wait(f)
        except Exception:
            return None  # the parent walks the chunk (and meets the store's error itself)
        if answer is None or answer[0] != "ok":
            return None
        infos, written, cut_counts, totals, tail, ranges_read = answer[1:]
        return _Spec(
            [RangeInfo(*i) for i in infos],
            set(written),
            [tuple(c) for c in cut_counts],
            tuple(totals),
            [Record(*t) for t in tail],
            ranges_read,
        )

    def _wait(self, future: concurrent.futures.Future[T]) -> T:
        """The result of a coroutine run on the event loop, waited for from a pool
        thread: a thread never outlives an abandoned commit (cancelled, or its loop
        closed), since nothing would ever run the coroutine then."""
        while True:
            try:
                return future.result(timeout=_POLL_S)
            except concurrent.futures.TimeoutError:
                if self._abandoned.is_set():
                    future.cancel()
                    raise _Abandoned from None

    # --- on the event loop: adoption --------------------------------------------------

    async def _result(self, chunk: _Chunk) -> _Spec | None:
        assert chunk.future is not None
        try:
            return await chunk.future
        except Exception:
            return None

    async def start(self, walk: Walk) -> None:
        """Adopt the first chunk (nothing is written yet: the worker's start state)."""
        await self.on_cut(walk)

    async def on_cut(self, walk: Walk) -> bool:
        """Called when the output has just been cut, and at each base range's header;
        True when a chunk result was adopted (the walk then stands at its end)."""
        base, writer = walk.base, walk.writer
        if base.at_header:
            chunk = self._chunks.get(base.i)
            if chunk is not None:
                spec = await self._result(chunk)
                if spec is not None:
                    if writer.empty and (
                        walk.change is None or walk.change.key >= base.range.min_key
                    ):
                        await self._adopt(walk, chunk, spec, 0)
                        self.adopted += 1
                        return True
                    for r, info in enumerate(spec.ranges):
                        self._cut_keys[info.max_key] = (spec, r + 1, chunk)
        if writer.empty and writer.last_key is not None:
            hit = self._cut_keys.pop(writer.last_key, None)
            if hit is not None:
                spec, r, chunk = hit
                await self._adopt(walk, chunk, spec, r)
                self.resynced += 1
                return True
        return False

    async def _adopt(self, walk: Walk, chunk: _Chunk, spec: _Spec, r: int) -> None:
        writer, base, counts = walk.writer, walk.base, walk.counts
        for info in spec.ranges[r:]:
            writer.add_stored(info, info.id in spec.written)
        for record in spec.tail:
            if writer.push(record):
                await writer.flush()
        before = spec.cut_counts[r - 1] if r else (0, 0, 0)
        counts.added += spec.totals[0] - before[0]
        counts.removed += spec.totals[1] - before[1]
        counts.changed += spec.totals[2] - before[2]
        self.ranges_read += spec.ranges_read
        while base.i < chunk.end:
            base.skip_range()
        change, end_key = walk.change, chunk.end_key
        while change is not None and (end_key is None or change.key < end_key):
            change = await anext(walk.stream, None)
        walk.change = change


def _prefetch_order(
    ranges: Sequence[RangeInfo], changes: Sequence[Record]
) -> tuple[str | None, dict[str, str]]:
    """The key of the first range of a chunk that holds one of ``changes`` (between its
    first and last keys), and for the key of each range, the key of the next such range
    after it.  The worker's walk enters such a range whatever comes before it, so
    fetching it ahead is never a wasted read."""
    mins = [r.min_key for r in ranges]
    touched = sorted(
        {
            i
            for i, key in ((bisect_right(mins, c.key) - 1, c.key) for c in changes)
            if i >= 0 and key <= ranges[i].max_key
        }
    )
    keys = [layout.range_key(r.id) for r in ranges]
    order: dict[str, str] = {}
    t = 0
    for i, key in enumerate(keys):
        while t < len(touched) and touched[t] <= i:
            t += 1
        if t < len(touched):
            order[key] = keys[touched[t]]
    return (keys[touched[0]] if touched else None), order


def _info_tuple(info: RangeInfo) -> tuple[str, bytes, bytes, int, int]:
    return (info.id, info.min_key, info.max_key, info.count, info.size)


async def _put(store: ObjectStore, key: str, data: bytes) -> None:
    try:
        await store.put(key, data, PutMode.CREATE)
    except ObjectExistsError:
        pass  # content-addressed: the same records are already stored


async def plan_parallel(
    stream: AsyncIterator[Record],
    ranges: Sequence[RangeInfo],
    policy: RangePolicy,
    encoder: RangeEncoder,
    store: ObjectStore,
    existing: set[str],
) -> tuple[AsyncIterator[Record], ParallelPlan | None]:
    """Read the change stream (up to :data:`MAX_CHANGES`) and plan its chunks; the
    stream to walk (the same changes) and the plan, or None to apply sequentially."""
    changes: list[Record] = []
    async for record in stream:
        changes.append(record)
        if len(changes) >= MAX_CHANGES:
            return _chain(changes, stream), None
    starts = plan_chunks(ranges, [c.key for c in changes], CHUNKS_PER_PROCESS * encoder.processes)
    if not starts:
        return _aiter(changes), None
    return _aiter(changes), ParallelPlan(ranges, starts, changes, policy, encoder, store, existing)


# --- the worker side ---------------------------------------------------------------------


class _PipeStore(ObjectStore):
    """The worker's view of the store: ``get`` asks the parent, ``put`` hands it over."""

    def __init__(self, inp: BinaryIO, out: BinaryIO) -> None:
        self._in, self._out = inp, out
        self.url = "pipe:"
        self.put_keys: set[str] = set()

    async def get(self, key: str) -> bytes:
        write_message(self._out, ("get", key))
        answer = read_message(self._in)
        if answer is None:
            raise UnavailableError("the parent process went away")
        if answer[0] == "ok":
            data: bytes = answer[1]
            return data
        if answer[0] == "missing":
            raise ObjectNotFoundError(key)
        raise UnavailableError(str(answer[1]))

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        write_message(self._out, ("put", key, data), out_of_band=True)
        self.put_keys.add(key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return (await self.get(key))[start:end]

    async def head(self, key: str) -> ObjectMeta:
        return ObjectMeta(key, len(await self.get(key)))

    async def delete(self, key: str, *, missing_ok: bool = True) -> None:
        raise UnavailableError("an apply worker deletes nothing")

    def list(self, prefix: str = "", *, after: str | None = None) -> AsyncIterator[ObjectMeta]:
        raise UnavailableError("an apply worker lists nothing")


class _InlineEncoder(RangeEncoder):
    """Encodes on the calling thread (the worker is a process of its own)."""

    def __init__(self) -> None:
        super().__init__(0)

    async def encode(
        self,
        records: Sequence[RecordTuple],
        skip: Any,
        *,
        in_pool: bool = True,
        size: int | None = None,
    ) -> tuple[str, bytes | None]:
        return encode_records(records, skip, size)


async def _apply_chunk(request: tuple[Any, ...], inp: BinaryIO, out: BinaryIO) -> tuple[Any, ...]:
    _, infos, ends_tree, changes, policy_args, existing = request
    ranges = [RangeInfo(*i) for i in infos]
    policy = RangePolicy(*policy_args)
    store = _PipeStore(inp, out)
    writer = RangeWriter(
        store, policy, max_in_flight=1, existing=existing, encoder=_InlineEncoder()
    )
    base = TreeCursor(DirectSource(store), ranges)
    stream = _aiter(Record(*c) for c in changes)
    walk = Walk(base, len(ranges) - 1 if ends_tree else -1, stream, writer, policy)
    cut_counts: list[tuple[int, int, int]] = []

    async def on_cut() -> bool:
        while len(cut_counts) < writer.ranges_cut:
            cut_counts.append(walk.counts.totals())
        return False

    walk.on_cut = on_cut
    walk.change = await anext(stream, None)
    async with writer:
        await walk.run()
        tail = writer.pending
        out_ranges = await writer.finish(cut_last=False)
    written = [r.id for r in out_ranges if layout.range_key(r.id) in store.put_keys]
    return (
        [_info_tuple(r) for r in out_ranges],
        written,
        cut_counts,
        walk.counts.totals(),
        [tuple(r) for r in tail],
        base.ranges_read,
    )


def serve_chunk(request: tuple[Any, ...], inp: BinaryIO, out: BinaryIO) -> tuple[Any, ...]:
    """Worker side of one chunk (module docstring): answers its result.  The cyclic GC
    is paused meanwhile (:func:`lsmstore.gcfreeze.paused`): the chunk's memory is
    bounded by its ranges, and its records are plain tuples and bytes."""
    with paused():
        return asyncio.run(_apply_chunk(request, inp, out))
