"""Encoding staging files off the event loop: in a worker process, else in a thread.

Sorting a sealed batch, writing its SST and building its bloom filter is pure CPU work
(1.3-1.5 us a record).  In a thread it holds the GIL, so on a machine with a spare
core it still competes with the event loop that resolves acknowledgements and serves
reads.  :class:`Encoder` sends batches of at least ``min_records`` records to one
worker process (:func:`main`, started on first use, one per Store) and encodes smaller
ones -- where the round trip would cost more than it saves -- in a thread, and tiny ones
(at most :data:`INLINE_RECORDS`) on the event loop: encoding holds the GIL either way,
and a thread hop would add its own CPU and, on a busy machine, milliseconds of waiting
to every acknowledgement of the batch.

The worker is an optimisation, never a dependency: while it starts, when it has
``max_queued`` batches queued, or if it cannot be started or dies, batches are encoded
in a thread; a batch lost with a dying worker is encoded again in a thread, so no
write fails because of the worker.  It is restarted on a later batch (at most
``MAX_RESTARTS`` times).  It exits when its stdin closes: on :meth:`Encoder.aclose`, or
when this process dies (even by ``kill -9``).

Pending records (:mod:`lsmstore.staging.pending`) are made there too: their identities
and values are computed beside the default identities, as part of encoding the file.

Protocol (pipes, in order): each request is ``u64 length`` + ``pickle((keys,
identities, values, pending, error_rate))`` -- plain lists, cheap to pickle, in memstore
order (the worker sorts); ``pending`` is None or the pending records as columns
(:data:`~lsmstore.staging.pending.PendingColumns`); each answer is ``u64 length`` +
``pickle(("ok", sst, sidecar))`` or ``pickle(("error", text))``.  The worker writes
one ``u64 0`` when it is ready.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import os
import pickle
from collections.abc import Callable, Sequence
from functools import partial
from operator import methodcaller
from typing import Any, BinaryIO

from lsmstore.graveler.record import RecordTuple
from lsmstore.graveler.record import columns as record_columns
from lsmstore.graveler.value import encode_value, encode_values
from lsmstore.staging.files import encode_staging_columns
from lsmstore.staging.keys import DEFERRED_IDENTITY
from lsmstore.staging.pending import PendingColumns, Staged, make_encoded, split
from lsmstore.workerpipe import answer_requests, child_main
from lsmstore.workerproc import AsyncWorkerProcess, pickle_message

log = logging.getLogger(__name__)

#: Batches smaller than this are encoded in a thread (the round trip costs ~0.3 ms).
MIN_RECORDS = 64
#: Batches of at most this many records are encoded on the event loop: ~2 us a record,
#: less than the CPU of a thread hop, and no wait for a thread and the GIL (milliseconds
#: on a busy machine, on the acknowledgement of every write of the batch).
INLINE_RECORDS = 16
#: From this many records, a batch for the worker has its columns made and pickled in
#: a thread: each step of a maximal batch done on the loop would hold it for
#: hundreds of ms (docs/write-path.md); below it, a thread hop costs more than it saves.
THREAD_COLUMNS = 4096
#: Rows of a column pickled at a time for the worker (see :func:`sliced_request`).
PICKLE_SLICE = 4096
#: Batches queued in the worker at most; more are encoded in a thread meanwhile.
MAX_QUEUED = 1
#: Worker (re)starts per Encoder at most; after that, threads only.
MAX_RESTARTS = 3
#: Seconds the worker may take to start.
START_TIMEOUT = 30.0

Columns = tuple[list[bytes], list[bytes], list[bytes | None], PendingColumns | None]


def columns(records: Sequence[Staged | RecordTuple], pending: bool = False) -> Columns:
    """Keys, identities and values of ``records`` as three lists, and the pending ones
    as columns (what is sent); ``pending``: some records may be pending."""
    pend = None
    if pending:
        records, pend = split(list(records))
    keys, identities, values = record_columns(records)  # type: ignore[arg-type]  # made
    return keys, identities, values, pend


def encode_columns(
    keys: list[bytes],
    identities: list[bytes],
    values: list[bytes | None],
    pending: PendingColumns | None,
    error_rate: float,
) -> tuple[bytes, bytes]:
    """``(sst, sidecar)`` of the records given as columns, plus the ``pending`` ones,
    with unique keys in any order.

    A put whose identity is empty (:data:`~lsmstore.staging.keys.DEFERRED_IDENTITY`)
    gets the default, SHA-256 of its value; a pending record the identity and value
    its maker makes.  Every step is a column at a time: the values encoded, the
    columns put in key order, the SST and its sidecar written.
    """
    deferred = identities.count(DEFERRED_IDENTITY)
    tombstones = values.count(None)
    if deferred == len(values) and not tombstones:  # a put_many batch: hash them all
        identities = list(map(_digest, map(hashlib.sha256, values)))  # type: ignore[arg-type]
    elif deferred:
        sha256 = hashlib.sha256
        identities = [
            sha256(v).digest() if not i and v is not None else i
            for i, v in zip(identities, values, strict=True)
        ]
    data_bytes = sum(map(len, keys))
    encoded: list[bytes | None]
    if not tombstones:
        data_bytes += sum(map(len, values))  # type: ignore[arg-type]  # no None
        encoded = encode_values(identities, values)  # type: ignore[arg-type,assignment]
    else:
        encoded = [
            None if v is None else encode_value(i, v)
            for i, v in zip(identities, values, strict=True)
        ]
        data_bytes += sum(len(v) for v in values if v is not None)
    if pending is not None:
        pkeys, _, pencoded, pdata = make_encoded(pending)
        keys = keys + pkeys
        encoded += pencoded
        data_bytes += sum(map(len, pkeys)) + pdata
    # in key order, a column at a time: no Python frame per record
    order = sorted(range(len(keys)), key=keys.__getitem__)
    keys = list(map(keys.__getitem__, order))
    encoded = list(map(encoded.__getitem__, order))
    sst, meta, _ = encode_staging_columns(keys, encoded, data_bytes, error_rate)
    return sst, meta


_digest = methodcaller("digest")


def _columns_of(made: Sequence[RecordTuple], pending: PendingColumns | None) -> Columns:
    """The columns of made records, and the pending ones' as given."""
    keys, identities, values = record_columns(made)
    return keys, identities, values, pending


def _sliced(column: Sequence[Any]) -> list[bytes]:
    return [
        pickle.dumps(column[i : i + PICKLE_SLICE], pickle.HIGHEST_PROTOCOL)
        for i in range(0, len(column), PICKLE_SLICE)
    ]


def _joined(parts: list[bytes]) -> list[Any]:
    out: list[Any] = []
    for part in parts:
        out += pickle.loads(part)
    return out


def sliced_request(cols: Columns, error_rate: float) -> bytes:
    """The worker's request for ``cols`` with each column pickled in slices of
    :data:`PICKLE_SLICE` rows.  Made in a thread, it lets the GIL go between slices:
    one ``pickle.dumps`` of a maximal batch's columns is one C call that holds the GIL,
    and so the event loop, for ~100 ms."""
    keys, identities, values, pending = cols
    return pickle_message((
        _sliced(keys),
        _sliced(identities),
        _sliced(values),
        None if pending is None else [_sliced(column) for column in pending],
        error_rate,
        "sliced",
    ))  # fmt: skip


class _Unavailable(Exception):
    """The worker could not take or finish a batch: encode it in a thread."""


class Encoder:
    """Encodes staging files for the writers of one Store (see the module docstring)."""

    def __init__(
        self,
        *,
        use_process: bool | None = None,
        min_records: int = MIN_RECORDS,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        """``use_process=None``: a worker process when this machine has more than one
        CPU; ``False``: threads only."""
        if use_process is None:
            use_process = (os.cpu_count() or 1) > 1
        self.use_process = use_process
        self.min_records = min_records
        self.max_queued = max_queued
        self.batches_in_process = 0
        self.batches_in_thread = 0
        self.batches_inline = 0
        self.restarts = 0
        self._proc: AsyncWorkerProcess | None = None
        self._starting: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: collections.deque[asyncio.Future[tuple[bytes, bytes]]] = collections.deque()
        self._closed = False

    async def encode(
        self, records: Sequence[Staged | RecordTuple], error_rate: float, *, pending: bool = False
    ) -> tuple[bytes, bytes]:
        """``(sst, sidecar)`` of ``records`` (unique keys, any order; not empty);
        ``pending``: some may be pending records, made here."""
        return await self._encode(len(records), partial(columns, records, pending), error_rate)

    async def encode_split(
        self,
        n: int,
        split: Callable[[], tuple[Sequence[RecordTuple], PendingColumns | None]],
        error_rate: float,
    ) -> tuple[bytes, bytes]:
        """:meth:`encode` of ``n`` records that ``split()`` gives as the made ones and
        the pending ones as columns (``Memstore.split`` of a sealed memstore; called
        where the columns are made, see :meth:`_encode`)."""
        return await self._encode(n, lambda: _columns_of(*split()), error_rate)

    async def _encode(
        self, n: int, columns_of: Callable[[], Columns], error_rate: float
    ) -> tuple[bytes, bytes]:
        """Encode a batch of ``n`` records whose columns ``columns_of()`` gives: made on
        the event loop only where they must be (to be sent to the worker, or for a tiny
        batch encoded there), else in the thread that encodes them."""
        if self.use_process and not self._closed and n >= self.min_records:
            if n >= THREAD_COLUMNS:  # columns and message made off the loop
                if self._starting is not None:
                    # the worker is on its way (a server starts it with itself): wait
                    # for it rather than encode here, holding the GIL beside the loop
                    await asyncio.wait([self._starting])
                cols = await asyncio.to_thread(columns_of)
                data = await asyncio.to_thread(sliced_request, cols, error_rate)
            else:
                cols = columns_of()
                data = pickle_message((*cols, error_rate))
            try:
                out = await self._in_process(data)
            except _Unavailable:
                pass
            else:
                self.batches_in_process += 1
                return out
            self.batches_in_thread += 1
            return await asyncio.to_thread(encode_columns, *cols, error_rate)
        if n <= INLINE_RECORDS:
            self.batches_inline += 1
            return encode_columns(*columns_of(), error_rate)
        self.batches_in_thread += 1
        return await asyncio.to_thread(lambda: encode_columns(*columns_of(), error_rate))

    # --- the worker ---------------------------------------------------------------------

    async def _in_process(self, data: bytes) -> tuple[bytes, bytes]:
        """Send the pickled ``(*columns, error_rate)`` to the worker; its answer."""
        proc = self._proc
        if proc is None or not proc.alive or self._reader is None:
            self._ensure_started()
            raise _Unavailable
        if len(self._pending) >= self.max_queued:
            raise _Unavailable
        fut: asyncio.Future[tuple[bytes, bytes]] = asyncio.get_running_loop().create_future()
        try:
            proc.write_pickled(data)
        except (ConnectionError, RuntimeError) as e:  # broken pipe: the worker died
            self._lost(e)
            raise _Unavailable(str(e)) from e
        self._pending.append(fut)
        try:
            await proc.drain()
        except (ConnectionError, RuntimeError) as e:  # broken pipe: the worker died
            self._lost(e)
        return await fut

    def _ensure_started(self) -> None:
        if self._starting is not None or self._closed or self.restarts >= MAX_RESTARTS:
            return
        self.restarts += 1
        self._starting = asyncio.get_running_loop().create_task(self._start())

    async def _start(self) -> None:
        try:
            proc = await AsyncWorkerProcess.start("lsmstore.staging.encoder", START_TIMEOUT)
            if self._closed:
                await proc.stop()
                return
            self._proc = proc
            self._reader = asyncio.get_running_loop().create_task(self._read(proc))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("encoder worker did not start (%s); encoding in threads", e)
        finally:
            self._starting = None

    async def _read(self, proc: AsyncWorkerProcess) -> None:
        try:
            while True:
                answer = await proc.receive()
                fut = self._pending.popleft()
                if fut.done():
                    continue
                if answer[0] == "ok":
                    fut.set_result((answer[1], answer[2]))
                else:  # encoded again in a thread, which raises the real error
                    log.warning("encoder worker: %s", answer[1])
                    fut.set_exception(_Unavailable(answer[1]))
        except (asyncio.IncompleteReadError, ConnectionError, IndexError) as e:
            self._lost(e)
        except asyncio.CancelledError:  # the event loop is going away
            self._lost(ConnectionError("encoder closed"), quiet=True)
            raise

    def _lost(self, error: BaseException, *, quiet: bool = False) -> None:
        """The worker is gone: its batches go to threads; a later batch restarts it."""
        if not self._closed and not quiet:
            log.warning("encoder worker lost (%s); encoding in threads", error)
        proc, self._proc = self._proc, None
        self._reader = None
        if proc is not None and not self._closed:
            proc.kill()
        while self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(_Unavailable(str(error)))

    def start(self) -> None:
        """Start the worker now rather than on the first batch (without waiting for
        it): a server does at startup, so that its first maximal batch is not encoded
        in a thread of its own process (holding the GIL beside the event loop for
        tens of milliseconds).  A batch of :data:`THREAD_COLUMNS` records or more
        waits for a worker that is starting; smaller ones use a thread meanwhile."""
        if self.use_process and self._proc is None:
            self._ensure_started()

    async def aclose(self) -> None:
        """Stop the worker (batches already sent finish first; later ones use threads)."""
        if self._closed:
            return
        self._closed = True
        if self._starting is not None:
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._starting
        proc = self._proc
        if proc is not None:
            await proc.stop()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._lost(ConnectionError("encoder closed"), quiet=True)


# --- the worker process --------------------------------------------------------------


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer requests ``(keys, identities, values, pending, error_rate)`` with
    ``("ok", sst, sidecar)`` or ``("error", text)`` until ``inp`` closes."""
    answer_requests(inp, out, _answer)


def _answer(request: tuple[Any, ...]) -> tuple[bytes, bytes]:
    if len(request) == 6:  # a sliced_request
        keys, identities, values, pending, error_rate, _ = request
        return encode_columns(
            _joined(keys),
            _joined(identities),
            _joined(values),
            None if pending is None else tuple(map(_joined, pending)),  # type: ignore[arg-type]
            error_rate,
        )
    return encode_columns(*request)


def main() -> None:
    child_main(serve)


if __name__ == "__main__":
    main()
