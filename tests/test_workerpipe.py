"""The worker pipe protocol: a message written with its big byte strings out of band
reads back equal, those strings travel outside the pickle (each a frame of its own), a
stream that ends inside such a message is an error, and a request/answer worker takes
out-of-band requests and writes out-of-band answers when asked to."""

from __future__ import annotations

import io
import os
import pickle
from typing import Any

import pytest

from lsmstore.graveler.range_encoder import encode_range
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.workerpipe import (
    FRAME,
    OUT_OF_BAND_BYTES,
    READY,
    answer_requests,
    read_frame,
    read_message,
    write_message,
)
from lsmstore.workerproc import WorkerProcess

BIG = os.urandom(OUT_OF_BAND_BYTES + 1)
OTHER = os.urandom(3 * OUT_OF_BAND_BYTES)
MSG = ("put", "some/key", BIG, b"small", [BIG[:10]], OTHER, 7)


def test_out_of_band_message_reads_back_equal_with_its_big_bytes_outside_the_pickle() -> None:
    buf = io.BytesIO()
    write_message(buf, MSG, out_of_band=True)
    write_message(buf, ("next",))
    buf.seek(0)
    body = read_frame(buf)
    assert body is not None and len(body) < OUT_OF_BAND_BYTES  # the pickle alone
    assert read_frame(buf) == BIG and read_frame(buf) == OTHER  # then each, raw
    buf.seek(0)
    got = read_message(buf)
    assert got == MSG
    assert got is not None and type(got[2]) is bytes and type(got[5]) is bytes
    assert read_message(buf) == ("next",)
    assert read_message(buf) is None


def test_in_band_message_is_one_pickle_frame() -> None:
    buf = io.BytesIO()
    write_message(buf, MSG)
    data = buf.getvalue()
    (n,) = FRAME.unpack_from(data)
    assert len(data) == FRAME.size + n
    assert pickle.loads(data[FRAME.size :]) == MSG
    assert read_message(io.BytesIO(data)) == MSG


def test_a_stream_ending_inside_an_out_of_band_message_is_an_error() -> None:
    buf = io.BytesIO()
    write_message(buf, MSG, out_of_band=True)
    cut = io.BytesIO(buf.getvalue()[: -len(OTHER)])
    with pytest.raises(EOFError):
        read_message(cut)


@pytest.mark.parametrize("out_of_band", [False, True])
def test_answer_requests_takes_out_of_band_requests(out_of_band: bool) -> None:
    requests = io.BytesIO()
    write_message(requests, ("echo", BIG), out_of_band=True)
    write_message(requests, ("echo", b"x"), out_of_band=True)
    requests.seek(0)
    answers = io.BytesIO()
    answer_requests(requests, answers, lambda r: (len(r[1]), r[1]), out_of_band=out_of_band)
    answers.seek(0)
    assert answers.read(FRAME.size) == READY
    assert read_message(answers) == ("ok", len(BIG), BIG)
    assert read_message(answers) == ("ok", 1, b"x")
    assert read_message(answers) is None


def test_range_encoder_worker_answers_a_big_range_out_of_band() -> None:
    records = [Record(b"key-%08d" % i, os.urandom(32), os.urandom(100)) for i in range(5000)]
    keys = [r.key for r in records]
    ids = [r.identity for r in records]
    values = [r.value for r in records]
    worker = WorkerProcess("lsmstore.graveler.range_encoder", "test worker")
    try:
        kind, rid, sst = worker.request((keys, ids, values, frozenset()))
    finally:
        worker.close()
    assert len(sst) >= OUT_OF_BAND_BYTES
    assert (kind, rid) == ("ok", encode_range(keys, ids, values)[0])  # type: ignore[arg-type]
    assert list(SSTReader(sst, "r.sst")) == records


def _refuse() -> None:
    raise ValueError("refused while unpickling")


class _Unloadable:
    """Pickles fine; unpickling it raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _refuse, ()


def test_a_request_that_fails_to_unpickle_ends_the_worker_after_its_answer() -> None:
    """Unpickling stopped inside a request: the stream may stand before its remaining
    out-of-band frames, so nothing after it can be told apart from them (one would be
    read as a request, its answer taken for the next request's).  The worker answers
    the error and ends; the parent replaces it."""
    requests = io.BytesIO()
    write_message(requests, ("echo", BIG, _Unloadable(), OTHER), out_of_band=True)
    write_message(requests, ("echo", b"x"), out_of_band=True)
    requests.seek(0)
    answers = io.BytesIO()
    answer_requests(requests, answers, lambda r: (len(r[1]), r[1]))
    answers.seek(0)
    assert answers.read(FRAME.size) == READY
    answer = read_message(answers)
    assert answer is not None and answer[0] == "error" and "refused" in answer[1]
    assert read_message(answers) is None


def test_a_message_the_handler_fails_to_read_ends_the_worker_after_its_answer() -> None:
    """The same for a message a conversation reads inside a request (a chunk's ranges)."""
    requests = io.BytesIO()
    write_message(requests, ("converse",))
    write_message(requests, ("range", BIG, _Unloadable(), OTHER), out_of_band=True)
    write_message(requests, ("echo", b"x"))
    requests.seek(0)
    answers = io.BytesIO()

    def handle(request: tuple[Any, ...]) -> tuple[Any, ...]:
        if request[0] == "converse":
            read_message(requests)
        return ()

    answer_requests(requests, answers, handle)
    answers.seek(0)
    assert answers.read(FRAME.size) == READY
    answer = read_message(answers)
    assert answer is not None and answer[0] == "error"
    assert read_message(answers) is None
