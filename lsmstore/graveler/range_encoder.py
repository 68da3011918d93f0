"""Naming and encoding committed ranges: in a thread, or spread over a process pool.

Once :class:`~lsmstore.graveler.ranges.RangeWriter` has cut a range, what is left is
pure CPU work on that range alone: its ID (three SHA-256 per record, then one over the
record IDs) and its SST.  A commit that rewrites many ranges (random changes touch
every range of a big tree) can therefore use every core: :class:`RangeEncoder` runs
:func:`encode_range` in a pool of worker processes, one range per task, while the
event loop goes on merging and cutting the next ranges.  The result is the same
whichever way a range is encoded -- the ID comes from the records alone -- so a
commit's range and metarange IDs do not depend on it (``tests/test_range_encoder.py``).

The workers are started on first use (in the background: until one is up, ranges go to
threads), as many as the machine has CPUs unless told otherwise.  Each is
``python -c "from lsmstore.graveler.range_encoder import main; main()"`` talking pickle
over its stdin and stdout -- not ``multiprocessing``, whose ``spawn`` start method
re-runs the application's main script in every worker (a script without an
``if __name__ == "__main__"`` guard would write its data again there).  A worker exits
when its stdin closes (:meth:`RangeEncoder.close`, or this process dying).  A writer
sends its first range, and ranges under ``pool_min_bytes`` (256 KiB), to a thread, so a
commit that rewrites one range never waits for a worker; a worker that dies costs its
range a thread and is replaced (at most ``MAX_STARTS`` starts per worker).

The same workers also apply whole chunks of a big commit
(:mod:`lsmstore.graveler.apply_parallel`): :meth:`RangeEncoder.converse` sends a
request and serves the worker's requests for base ranges and its finished ranges
(to upload) until it answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import pickle
import queue
import threading
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any, BinaryIO

from lsmstore.gcfreeze import freeze_startup_state
from lsmstore.graveler.record import RecordTuple, columns
from lsmstore.graveler.sst_writer import RANGE, write_committed_columns
from lsmstore.workerpipe import answer_requests, child_main
from lsmstore.workerproc import WorkerProcess

log = logging.getLogger(__name__)

_sha256 = hashlib.sha256
#: Worker starts per configured process at most (then threads only).
MAX_STARTS = 3
#: Seconds a range waits for an idle worker before it is encoded in a thread instead.
START_TIMEOUT = 60.0


def range_id(keys: Sequence[bytes], identities: Sequence[bytes]) -> str:
    """The fileID of records given as columns (see :mod:`lsmstore.graveler.ids`)."""
    return _fold_ids(zip(keys, identities, strict=True))


def _fold_ids(pairs: Iterable[tuple[bytes, bytes]]) -> str:
    h = _sha256()
    update = h.update
    for key, ident in pairs:
        update(_sha256(_sha256(key).digest() + _sha256(ident).digest()).digest())
    return h.hexdigest()


def encode_records(
    records: Sequence[RecordTuple], skip: Container[str] = frozenset(), size: int | None = None
) -> tuple[str, bytes | None]:
    """:func:`encode_range` of records as they are (no columns to ship: a thread, or
    the worker that cut them)."""
    return encode_columns(*columns(records), skip, size)


def encode_columns(
    keys: Sequence[bytes],
    identities: Sequence[bytes],
    values: Sequence[bytes | None],
    skip: Container[str] = frozenset(),
    size: int | None = None,
) -> tuple[str, bytes | None]:
    """:func:`encode_range` of columns of any sequence type."""
    rid = range_id(keys, identities)
    if rid in skip:
        return rid, None
    return rid, write_committed_columns(keys, identities, values, RANGE, size=size)


def encode_range(
    keys: list[bytes],
    identities: list[bytes],
    values: list[bytes],
    skip: Container[str] = frozenset(),
    size: int | None = None,
) -> tuple[str, bytes | None]:
    """``(id, sst)`` of a range's records (key order, no tombstones); ``sst`` is None
    when the id is in ``skip`` (already stored).  ``size``: the records' estimated size
    when they were cut by a :class:`~lsmstore.graveler.ranges.RangeWriter` (checked
    already: see :func:`~lsmstore.graveler.sst_writer.write_committed_columns`)."""
    return encode_columns(keys, identities, values, skip, size)


class RangeEncoder:
    """Runs :func:`encode_range` in a thread or in worker processes (module docstring)."""

    def __init__(self, processes: int | None = None, *, pool_min_bytes: int = 256 << 10) -> None:
        """``processes``: worker processes (None: ``os.cpu_count()``, or threads only on
        a machine with one CPU); 0: threads only.  Writers send ranges smaller than
        ``pool_min_bytes`` (estimated size) to a thread: shipping them costs more than
        encoding them."""
        self.pool_min_bytes = pool_min_bytes
        if processes is None:
            cpus = os.cpu_count() or 1
            processes = cpus if cpus > 1 else 0
        self.processes = max(0, processes)
        self.ranges_in_pool = 0
        self.ranges_in_thread = 0
        self.conversations = 0  # answered by a worker through converse()
        self.restarts = 0
        self._idle: queue.SimpleQueue[WorkerProcess] = queue.SimpleQueue()
        self._workers: list[WorkerProcess] = []
        self._starting = 0
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        """Start the missing workers in the background (each becomes usable once it has
        started; until then ranges go to threads)."""
        with self._lock:
            if self._closed:
                return
            missing = self.processes - len(self._workers) - self._starting
            if missing <= 0 or self.restarts >= MAX_STARTS * max(1, self.processes):
                return
            self._starting += missing
            self.restarts += missing
        for _ in range(missing):
            threading.Thread(
                target=self._start_one, name="range-encoder-start", daemon=True
            ).start()

    def worker_pids(self) -> list[int]:
        """Process IDs of the workers up and running."""
        with self._lock:
            return [w.pid for w in self._workers]

    @property
    def started(self) -> int:
        """Workers up and running."""
        return len(self._workers)

    def _start_one(self) -> None:
        try:
            worker = WorkerProcess("lsmstore.graveler.range_encoder", "range encoder worker")
        except (OSError, ValueError) as e:
            log.warning("range encoder worker did not start (%s); using threads", e)
            with self._lock:
                self._starting -= 1
            return
        with self._lock:
            self._starting -= 1
            if self._closed:
                worker.close()
                return
            self._workers.append(worker)
        self._idle.put(worker)

    async def encode(
        self,
        records: Sequence[RecordTuple],
        skip: Container[str],
        *,
        in_pool: bool = True,
        size: int | None = None,
    ) -> tuple[str, bytes | None]:
        """:func:`encode_range` of ``records`` (and their ``size``, when a range writer
        cut them): in a worker process when ``in_pool`` and the workers have started
        (waiting for a busy one), else in a thread."""
        if in_pool and self.processes and not self._closed:
            keys, identities, values = columns(records)  # no tombstones: the writer checks
            self.start()
            if self._workers:  # started: wait for an idle one
                # sent along (pickled); a Container that is not a set is checked after
                frozen = frozenset(skip) if isinstance(skip, set | frozenset) else frozenset()
                answer = await asyncio.to_thread(
                    self._call, (keys, identities, values, frozen, size)
                )
                if answer is not None:
                    self.ranges_in_pool += 1
                    rid, sst = answer
                    return (rid, None) if rid in skip else (rid, sst)
        self.ranges_in_thread += 1
        return await asyncio.to_thread(encode_records, records, skip, size)

    def _call(self, request: tuple[Any, ...]) -> tuple[str, bytes | None] | None:
        """Run one request on an idle worker (blocking); None: no answer (the caller
        encodes in a thread, which raises the real error if there is one)."""
        try:
            worker = self._idle.get(timeout=START_TIMEOUT)
        except queue.Empty:
            return None
        try:
            answer = worker.request(request)
        except (OSError, ValueError, EOFError, pickle.PickleError) as e:
            log.warning("range encoder worker lost (%s); starting another", e)
            self._lose(worker)
            return None
        self._idle.put(worker)
        if answer[0] != "ok":
            return None
        return answer[1], answer[2]

    def converse(
        self,
        request: tuple[Any, ...],
        on_message: Callable[[tuple[Any, ...]], tuple[Any, ...] | None],
    ) -> tuple[Any, ...] | None:
        """Send ``request`` to an idle worker (blocking) and pass each message it writes
        before its answer to ``on_message``, writing back what that returns (None:
        nothing).  The answer ``("ok", ...)``/``("error", text)``, or None when no worker
        answered (none idle in time, or it died); a worker whose conversation broke off
        (``on_message`` raised) is killed and replaced."""
        if not self.processes or self._closed:
            return None
        self.start()
        with self._lock:
            if not self._workers and not self._starting:
                return None  # none running, none starting (starts failed or used up)
        try:
            worker = self._idle.get(timeout=START_TIMEOUT)
        except queue.Empty:
            return None
        try:
            worker.send(request)
            while True:
                msg = worker.receive()
                if msg[0] in ("ok", "error"):
                    break
                reply = on_message(msg)
                if reply is not None:
                    worker.send(reply)
        except Exception as e:
            log.warning("range encoder worker lost (%s); starting another", e)
            self._lose(worker)
            return None
        self._idle.put(worker)
        self.conversations += 1
        return msg

    def _lose(self, worker: WorkerProcess) -> None:
        worker.kill()
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)
        self.start()

    def close(self) -> None:
        """Stop the workers (a range being encoded finishes first)."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        for w in workers:
            w.close()


_shared: RangeEncoder | None = None
_shared_lock = threading.Lock()


def shared_range_encoder() -> RangeEncoder:
    """The process's default encoder (workers sized to the machine, started on first
    use; they exit when this process does: their stdin closes)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = RangeEncoder()
        return _shared


# --- the worker process ------------------------------------------------------------------


def worker_startup() -> None:
    """What a worker does before its first request: import what a request may need,
    then freeze that startup state out of the cyclic GC's full collections
    (:mod:`lsmstore.gcfreeze`): a chunk of a big commit allocates a container per
    record, and each full collection it triggered walked every module's objects too."""
    import lsmstore.graveler.apply_parallel  # noqa: F401  # the chunks' code

    freeze_startup_state()


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer requests ``(keys, identities, values, skip, size)`` with ``("ok", id, sst)``, and
    ``("apply", ...)`` chunks of a split commit
    (:func:`lsmstore.graveler.apply_parallel.serve_chunk`, which talks to the parent
    on the same pipes before it answers), or ``("error", text)``, until ``inp`` closes."""

    worker_startup()

    def handle(request: tuple[Any, ...]) -> tuple[Any, ...]:
        if request[0] == "apply":
            from lsmstore.graveler.apply_parallel import serve_chunk

            return serve_chunk(request, inp, out)
        return encode_range(*request)

    answer_requests(inp, out, handle, out_of_band=True)  # SSTs: megabytes


def main() -> None:
    child_main(serve)
