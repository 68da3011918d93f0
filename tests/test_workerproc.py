"""The parent side of the worker processes, on real workers: a request is answered, a
killed worker reads as gone (with the error its users catch), a worker that cannot
start raises, and a closed worker has exited and been reaped."""

from __future__ import annotations

import asyncio
import signal

import pytest

from lsmstore.graveler.range_encoder import encode_range
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.workerproc import AsyncWorkerProcess, WorkerProcess

KEYS = [b"a", b"b", b"c"]
IDS = [b"1", b"2", b"3"]
VALUES = [b"x", b"y", b"z"]


async def test_async_worker_answers_and_a_killed_one_reads_as_gone() -> None:
    worker = await AsyncWorkerProcess.start("lsmstore.staging.encoder", 60.0)
    try:
        await worker.send((KEYS, IDS, list(VALUES), None, 0.01))
        kind, sst, _ = await worker.receive()
        assert kind == "ok"
        assert list(SSTReader(sst, "t.sst")) == list(map(Record, KEYS, IDS, VALUES))
        assert worker.alive
        worker.kill()
        with pytest.raises(asyncio.IncompleteReadError):
            await worker.receive()
        assert await worker.wait() == -signal.SIGKILL
        assert not worker.alive
    finally:
        worker.kill()
        await worker.wait()


async def test_async_worker_stops_when_its_stdin_closes() -> None:
    worker = await AsyncWorkerProcess.start("lsmstore.staging.encoder", 60.0)
    await worker.stop()
    assert worker.returncode == 0


async def test_async_worker_that_cannot_start_raises() -> None:
    with pytest.raises(asyncio.IncompleteReadError):  # no main(): the child exits at once
        await AsyncWorkerProcess.start("lsmstore.errors", 60.0)


def test_blocking_worker_answers_closes_and_a_killed_one_raises_oserror() -> None:
    worker = WorkerProcess("lsmstore.graveler.range_encoder", "test worker")
    try:
        kind, rid, sst = worker.request((KEYS, IDS, VALUES, frozenset()))
        assert (kind, rid) == ("ok", encode_range(KEYS, IDS, VALUES)[0])
        assert list(SSTReader(sst, "r.sst")) == list(map(Record, KEYS, IDS, VALUES))
    finally:
        worker.close()
    assert not worker.alive and worker.proc.returncode == 0

    worker = WorkerProcess("lsmstore.graveler.range_encoder", "test worker")
    worker.kill()
    assert not worker.alive
    with pytest.raises(OSError):  # a broken pipe, or "test worker exited"
        worker.request((KEYS, IDS, VALUES, frozenset()))


def test_blocking_worker_that_cannot_start_raises_oserror() -> None:
    with pytest.raises(OSError, match="test worker did not start"):
        WorkerProcess("lsmstore.errors", "test worker")
