"""A compaction job's merge and encoding in a process of its own.

The in-process compactor (the embedded default) shares its process with the writers;
merging and encoding there cost the writers' event loop ~10 us of CPU per record and
fill the heap with live records that CPython's full collections walk.
:class:`MergeWorker` runs the CPU part of a job -- :func:`lsmstore.compaction.merge_plan.plan`
over the decoded inputs, and the encoding of every output file -- in one child
process, started on first use and kept for later jobs.  Everything else stays in the
job, on the event loop, unchanged: reading the ref, fetching the inputs (the worker
asks for each L2 file when the merge reaches it; the job prefetches the next one),
uploading the outputs, the intent, the swap and the garbage record.  So the safety
argument of docs/compaction.md does not change: the worker only turns input bytes
into output bytes.

Protocol (the child's stdin and stdout; every message is ``u64 length`` +
``pickle(tuple)``):

* parent: ``("job", n, l2, target, error_rate)`` where ``l2`` lists
  ``(first_key, last_key, data_bytes)``; then ``n`` messages ``("l1", name, sst)``,
  the L1 prefix oldest first;
* child, any number of: ``("need", i)`` -- answered by the parent with
  ``("l2", name, sst)`` of L2 file ``i`` --, ``("reuse", i)``,
  ``("file", sst, sidecar, records)``; then ``("done", records_in)`` or
  ``("error", kind, ...)``.  The child writes ``u64 0`` once when ready.

One job at a time (a lock).  If the worker cannot start, :meth:`MergeWorker.run`
raises :class:`WorkerUnavailable` before anything was sent and the job merges on the
event loop instead; after ``MAX_RESTARTS`` failed starts it stops trying.  If the
worker dies during a job, the job fails with :class:`UnavailableError` (its outputs
are discarded like any failed job's) and the next job starts a new worker.  A job
cancelled while the worker runs kills the worker (its state is unknown).  The worker
exits when its stdin closes (:meth:`MergeWorker.aclose`, or this process dying).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, BinaryIO

from lsmstore.compaction.merge_plan import FILE, NEED, REUSE, L2Input, plan
from lsmstore.errors import CorruptFileError, LsmError, UnavailableError, UnsupportedFormatError
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.staging.files import encode_staging_file
from lsmstore.workerpipe import READY, child_main, read_message, write_message
from lsmstore.workerproc import AsyncWorkerProcess

log = logging.getLogger(__name__)

MAX_RESTARTS = 3
START_TIMEOUT = 30.0

#: ``fetch(i)``: the bytes of L2 file ``i``; ``on_file(sst, sidecar, records)``;
#: ``on_reuse(i)``.
Fetch = Callable[[int], Awaitable[tuple[str, bytes]]]
OnFile = Callable[[bytes, bytes, int], Awaitable[None]]
OnReuse = Callable[[int], Awaitable[None]]


class WorkerUnavailable(Exception):
    """The merge worker could not be started: merge on the event loop."""


class _JobFailed(Exception):
    def __init__(self, error: LsmError) -> None:
        self.error = error


class MergeWorker:
    """One child process that merges and encodes compaction jobs (module docstring)."""

    def __init__(self) -> None:
        self.jobs = 0
        self.restarts = 0
        self._proc: AsyncWorkerProcess | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def available(self) -> bool:
        """False once the worker failed to start ``MAX_RESTARTS`` times (or is closed)."""
        return not self._closed and (self._proc is not None or self.restarts < MAX_RESTARTS)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def run(
        self,
        l1: list[tuple[str, bytes]],
        l2: Sequence[L2Input],
        target: int,
        error_rate: float,
        *,
        fetch: Fetch,
        on_file: OnFile,
        on_reuse: OnReuse,
    ) -> int:
        """Merge the L1 prefix ``l1`` (``(name, sst)``, oldest first) with ``l2``; calls
        back for every L2 file the merge reads, every output file and every reused L2
        file, in key order.  Returns the records read.  ``l1`` is emptied once sent
        (its bytes then live in the worker only)."""
        async with self._lock:
            proc = await self._ensure()
            self.jobs += 1
            try:
                return await self._job(proc, l1, l2, target, error_rate, fetch, on_file, on_reuse)
            except _JobFailed as e:  # the worker reported it and is ready for the next job
                raise e.error from None
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                self._kill()
                if isinstance(e, LsmError):
                    raise
                raise UnavailableError(f"compaction merge worker died: {e!r}") from e
            except BaseException:
                # cancelled, or a callback failed: the worker may be mid-job
                self._kill()
                raise

    async def _job(
        self,
        proc: AsyncWorkerProcess,
        l1: list[tuple[str, bytes]],
        l2: Sequence[L2Input],
        target: int,
        error_rate: float,
        fetch: Fetch,
        on_file: OnFile,
        on_reuse: OnReuse,
    ) -> int:
        inputs = [(i.first_key, i.last_key, i.data_bytes) for i in l2]
        await proc.send(("job", len(l1), inputs, target, error_rate))
        for name, data in l1:
            await proc.send(("l1", name, data))
        l1.clear()  # the bytes live in the worker now
        while True:
            msg = await proc.receive()
            kind = msg[0]
            if kind == "need":
                name, data = await fetch(msg[1])
                await proc.send(("l2", name, data))
                del data
            elif kind == "file":
                await on_file(msg[1], msg[2], msg[3])
            elif kind == "reuse":
                await on_reuse(msg[1])
            elif kind == "done":
                return int(msg[1])
            elif kind == "error":
                raise _JobFailed(_error(msg))
            else:
                raise ConnectionError(f"unexpected message {kind!r}")

    async def _ensure(self) -> AsyncWorkerProcess:
        proc = self._proc
        if proc is not None and proc.alive:
            return proc
        self._proc = None
        if self._closed or self.restarts >= MAX_RESTARTS:
            raise WorkerUnavailable("no merge worker")
        self.restarts += 1
        try:
            proc = await AsyncWorkerProcess.start("lsmstore.compaction.merge_worker", START_TIMEOUT)
        except Exception as e:
            log.warning("compaction merge worker did not start (%s); merging in process", e)
            raise WorkerUnavailable(str(e)) from e
        self._proc = proc
        return proc

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()

    async def aclose(self) -> None:
        """Stop the worker (waits for a running job's lock)."""
        if self._closed:
            return
        self._closed = True
        async with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                await proc.stop()


def _error(msg: tuple[Any, ...]) -> LsmError:
    if msg[1] == "corrupt":
        cls = UnsupportedFormatError if msg[2] else CorruptFileError
        return cls(msg[3], msg[4])
    return LsmError(f"compaction merge worker: {msg[2]}")


# --- the child process -------------------------------------------------------------------


def run_job(first: tuple[Any, ...], inp: BinaryIO, out: BinaryIO) -> None:
    """Serve one job whose ``("job", ...)`` message was ``first``.  The input stream
    stays in step whatever fails: all L1 messages are read before any is decoded, and
    an L2 file is asked for only when it will be read."""
    _, n_l1, inputs, target, error_rate = first
    l1: list[tuple[str, bytes]] = []
    for _ in range(n_l1):
        msg = read_message(inp)
        if msg is None:
            raise EOFError
        l1.append((msg[1], msg[2]))
    try:
        readers = [SSTReader(data, name) for name, data in l1]
        del l1
        records_in = sum(r.num_entries for r in readers)
        gen = plan([iter(r) for r in reversed(readers)], [L2Input(*t) for t in inputs], target)
        del readers
        answer: Any = None
        while True:
            try:
                event = gen.send(answer)
            except StopIteration:
                break
            answer = None
            kind = event[0]
            if kind == NEED:
                write_message(out, ("need", event[1]))
                msg = read_message(inp)
                if msg is None:
                    raise EOFError
                answer = SSTReader(msg[2], msg[1])
                del msg
                records_in += answer.num_entries
            elif kind == FILE:
                records = event[1]
                del event
                sst, meta, _ = encode_staging_file(records, error_rate)
                write_message(out, ("file", sst, meta, len(records)))
                del records, sst, meta
            elif kind == REUSE:
                write_message(out, ("reuse", event[1]))
        write_message(out, ("done", records_in))
    except EOFError:
        raise
    except Exception as e:
        if isinstance(e, CorruptFileError):
            write_message(
                out, ("error", "corrupt", isinstance(e, UnsupportedFormatError), e.name, e.problem)
            )
        else:
            write_message(out, ("error", "other", f"{type(e).__name__}: {e}"))


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer jobs from ``inp`` on ``out`` until ``inp`` closes."""
    out.write(READY)
    out.flush()
    while True:
        msg = read_message(inp)
        if msg is None:
            return
        if msg[0] != "job":
            raise SystemExit(f"compaction merge worker: unexpected message {msg[0]!r}")
        try:
            run_job(msg, inp, out)
        except EOFError:
            return


def main() -> None:
    child_main(serve)


if __name__ == "__main__":
    main()
