"""The pipe protocol of the project's worker processes (the staging encoder, the commit
range encoder, the compaction merge worker), child side; the parent side is
:mod:`lsmstore.workerproc`.

Each worker is ``python -c`` on a pair of pipes.  Every message is a pickled tuple
after its length (8 bytes, little-endian); the child first writes a zero length
("ready") and ends when its input closes.  A message written with ``out_of_band`` sends
its big byte strings (ranges, SSTs: megabytes) after the pickle, each as a frame of its
own (pickle protocol 5's out-of-band buffers), so neither side copies them into or out
of a pickle; the blocking readers here take both forms (the asyncio side of
:mod:`lsmstore.workerproc` only the in-band one: its children write in-band).
Request/answer workers answer ``("ok", *result)`` or ``("error", "Type: text")`` for
each request, so one bad request never ends the worker -- unless a message could not be
read whole (:func:`answer_requests`): then nothing after it can be found.
"""

from __future__ import annotations

import contextlib
import pickle
import struct
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, BinaryIO

#: The length prefix of every message.
FRAME = struct.Struct("<Q")
#: What a child writes once it is ready for requests.
READY = FRAME.pack(0)
#: Byte strings at least this long go out of band (when a message is written so).
OUT_OF_BAND_BYTES = 1 << 16


#: The most one read asks for: memory follows the bytes that arrive, never a length
#: a frame claims (a broken peer's huge length ends in None at the stream's end).
READ_CHUNK = 1 << 24


def read_exactly(f: IO[bytes], n: int) -> bytes | None:
    """``n`` bytes from ``f``, or None when it ends first."""
    parts = []
    while n:
        chunk = f.read(min(n, READ_CHUNK))
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def read_frame(f: IO[bytes]) -> bytes | None:
    """The next message's bytes, or None at the end of the stream."""
    head = read_exactly(f, FRAME.size)
    if head is None:
        return None
    return read_exactly(f, FRAME.unpack(head)[0])


def _buffers(f: IO[bytes]) -> Iterator[bytes]:
    """The out-of-band buffers of the message just read, read as the unpickler asks."""
    while True:
        data = read_frame(f)
        if data is None:
            raise EOFError("the stream ended inside a message")
        yield data


class BrokenStream(EOFError):
    """A message could not be read whole: the stream may stand inside it (before some
    of its out-of-band frames), so no later message can be found."""


def _loads(body: bytes, f: IO[bytes]) -> tuple[Any, ...]:
    try:
        msg: tuple[Any, ...] = pickle.loads(body, buffers=_buffers(f))
    except Exception as e:
        raise BrokenStream(f"{type(e).__name__}: {e}") from e
    return msg


def read_message(f: IO[bytes]) -> tuple[Any, ...] | None:
    """The next message, unpickled, or None at the end of the stream."""
    body = read_frame(f)
    if body is None:
        return None
    return _loads(body, f)


def write_message(f: IO[bytes], msg: tuple[Any, ...], *, out_of_band: bool = False) -> None:
    """Write ``msg``; with ``out_of_band``, its byte strings of at least
    :data:`OUT_OF_BAND_BYTES` (elements of the tuple itself) follow the pickle as frames
    of their own (module docstring): only a blocking reader of this module reads them."""
    buffers: list[pickle.PickleBuffer] = []
    if out_of_band:
        msg = tuple(
            pickle.PickleBuffer(x) if type(x) is bytes and len(x) >= OUT_OF_BAND_BYTES else x
            for x in msg
        )
        data = pickle.dumps(msg, protocol=5, buffer_callback=buffers.append)
    else:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(FRAME.pack(len(data)))
    f.write(data)
    for buf in buffers:
        raw = buf.raw()
        f.write(FRAME.pack(raw.nbytes))
        f.write(raw)
    f.flush()


def answer_requests(
    inp: BinaryIO,
    out: BinaryIO,
    handle: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    *,
    out_of_band: bool = False,
) -> None:
    """Say ready, then answer each request of ``inp`` with ``("ok", *handle(request))``
    or ``("error", text)`` until ``inp`` closes (``out_of_band``: as
    :func:`write_message`, for a parent that reads with this module).  A message of
    ``inp`` that cannot be read whole (:class:`BrokenStream`: the request, or one
    ``handle`` reads) is answered as an error, then the worker ends: what follows on
    ``inp`` may be the rest of that message, and its answers would be taken for the
    next requests'."""
    out.write(READY)
    out.flush()
    while (body := read_frame(inp)) is not None:
        answer: tuple[Any, ...]
        broken = False
        try:
            request = _loads(body, inp)
            del body  # the request may be large: hold one copy, not two
            answer = ("ok", *handle(request))
        except Exception as e:
            broken = isinstance(e, BrokenStream)
            answer = ("error", f"{type(e).__name__}: {e}")
        write_message(out, answer, out_of_band=out_of_band)
        if broken:
            return


def child_main(serve: Callable[[BinaryIO, BinaryIO], None]) -> None:
    """The ``main()`` of a worker process: ``serve`` on stdin/stdout; nothing else may
    write to the answer pipe, and a parent that goes away ends the child quietly."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        serve(inp, out)
