"""The pipe protocol of the project's worker processes (the staging encoder, the commit
range encoder, the compaction merge worker), child side; the parent side is
:mod:`lsmstore.workerproc`.

Each worker is ``python -c`` on a pair of pipes.  Every message is a pickled tuple
after its length (8 bytes, little-endian); the child first writes a zero length
("ready") and ends when its input closes.  Request/answer workers answer
``("ok", *result)`` or ``("error", "Type: text")`` for each request, so one bad
request never ends the worker.
"""

from __future__ import annotations

import contextlib
import pickle
import struct
import sys
from collections.abc import Callable
from typing import IO, Any, BinaryIO

#: The length prefix of every message.
FRAME = struct.Struct("<Q")
#: What a child writes once it is ready for requests.
READY = FRAME.pack(0)


def read_exactly(f: IO[bytes], n: int) -> bytes | None:
    """``n`` bytes from ``f``, or None when it ends first."""
    parts = []
    while n:
        chunk = f.read(n)
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


def read_message(f: IO[bytes]) -> tuple[Any, ...] | None:
    """The next message, unpickled, or None at the end of the stream."""
    body = read_frame(f)
    if body is None:
        return None
    msg: tuple[Any, ...] = pickle.loads(body)
    return msg


def write_message(f: IO[bytes], msg: tuple[Any, ...]) -> None:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(FRAME.pack(len(data)))
    f.write(data)
    f.flush()


def answer_requests(
    inp: BinaryIO, out: BinaryIO, handle: Callable[[tuple[Any, ...]], tuple[Any, ...]]
) -> None:
    """Say ready, then answer each request of ``inp`` with ``("ok", *handle(request))``
    or ``("error", text)`` until ``inp`` closes."""
    out.write(READY)
    out.flush()
    while (body := read_frame(inp)) is not None:
        answer: tuple[Any, ...]
        try:
            request = pickle.loads(body)
            del body  # the request may be large: hold one copy, not two
            answer = ("ok", *handle(request))
        except Exception as e:
            answer = ("error", f"{type(e).__name__}: {e}")
        write_message(out, answer)


def child_main(serve: Callable[[BinaryIO, BinaryIO], None]) -> None:
    """The ``main()`` of a worker process: ``serve`` on stdin/stdout; nothing else may
    write to the answer pipe, and a parent that goes away ends the child quietly."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        serve(inp, out)
