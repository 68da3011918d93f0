"""uvicorn's httptools protocol, with one send per response and connection limits.

uvicorn writes a response's head when the app sends ``http.response.start`` and its
body when it sends ``http.response.body``: two ``send`` system calls and two TCP
segments for every small response, which on the server's hot paths (stat, small
writes) cost more than our own handling.  :class:`CoalescingTransport` stands between
the protocol and the socket transport: the writes made in one turn of the event loop
leave together at the start of the next turn (or at once past
:data:`FLUSH_BYTES`, so a streamed body is never held back), and ``close`` sends what
is pending first.  Everything else passes straight through.

:class:`LimitedHttpToolsProtocol` adds what httptools itself does not bound
(:class:`ConnectionLimits`; docs/security.md, "Limits"):

* a request head (request line and headers) past ``max_header_bytes`` → 431 and the
  connection closes; the parser holds at most that plus one read of bytes;
* a head not complete ``header_timeout_s`` after its first byte → 408 and close (a
  client sending one byte at a time cannot keep a connection);
* a connection that sends nothing for ``idle_timeout_s`` -- before its first request
  as after a response -- is closed (uvicorn's keep-alive timer armed at connect too);
* past ``max_connections`` open connections a new one gets 503 and is closed;
* a final answer sent before the request's body was read to its end (a 404 to an
  upload, a 413 on the declared length, an error to an ``Expect: 100-continue``
  request whose ``100 Continue`` was never sent) carries ``Connection: close`` and
  the connection closes after it: the client's unsent or half-sent body can never be
  read as its next request.  ``100 Continue`` goes out only when the application
  reads the body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

#: Pending bytes past which a write goes out at once.
FLUSH_BYTES = 64 * 1024
#: After a refusal, how long what the client still sends is read and dropped before
#: the connection closes (closing with unread bytes would reset it, and the client
#: could lose the answer).
LINGER_S = 2.0


class CoalescingTransport:
    """A transport wrapper that joins the writes of one loop turn (module docstring)."""

    __slots__ = ("_loop", "_pending", "_size", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)
        self._size += len(data)
        if self._size >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending = []
        self._size = 0
        if self._transport.is_closing():
            return  # the connection is gone: nothing can be delivered
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    # Called on every request: spelled out rather than found by __getattr__.
    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol writing through a :class:`CoalescingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        wrapped: Any = CoalescingTransport(transport, self.loop)
        super().connection_made(wrapped)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds :class:`LimitedHttpToolsProtocol` enforces (module docstring)."""

    max_header_bytes: int
    header_timeout_s: float
    idle_timeout_s: float
    max_connections: int
    #: Told the reason of each refusal: "head_too_large", "head_timeout",
    #: "too_many_connections".
    on_refused: Callable[[str], None] = lambda reason: None


class _Cycle(RequestResponseCycle):
    """uvicorn's request cycle, closing the connection after a final answer sent
    before the request body was read to its end (module docstring)."""

    async def send(self, message: Any) -> None:
        if not self.response_started and self.more_body:
            self.keep_alive = False  # uvicorn adds "connection: close" and closes after
        await super().send(message)


class LimitedHttpToolsProtocol(CoalescingHttpToolsProtocol):
    """:class:`CoalescingHttpToolsProtocol` with :class:`ConnectionLimits`; made per
    server by :func:`limited_protocol`."""

    limits: ConnectionLimits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._refused = False
        self._head_bytes = 0
        self._in_head = True
        self._head_started = 0.0  # loop time of the current head's first bytes (0: none)
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, "too many open connections", "too_many_connections")
            return
        # Nothing sent yet: the same idle timer as between requests.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.limits.idle_timeout_s, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered and closing: dropped
        if self._in_head:
            self._head_bytes += len(data)
            if not self._head_started:
                self._head_started = self.loop.time()
                if self._head_timer is None:  # one timer per connection, re-armed lazily
                    self._head_timer = self.loop.call_at(
                        self._head_started + self.limits.header_timeout_s, self._head_timed_out
                    )
        super().data_received(data)
        if self._in_head and self._head_bytes > self.limits.max_header_bytes:
            if not self.transport.is_closing() and not self._refused:
                self._refuse(
                    431,
                    f"request head larger than {self.limits.max_header_bytes} bytes",
                    "head_too_large",
                )

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._head_started = 0.0  # the timer stays: it finds no head when it fires
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and type(cycle) is RequestResponseCycle:
            cycle.__class__ = _Cycle

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True

    def _cancel_head_timer(self) -> None:
        timer = self._head_timer
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        started = self._head_started
        if not started or self.transport.is_closing() or self._refused:
            return  # no head being read (a later one arms the timer again)
        due = started + self.limits.header_timeout_s
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # A pipelined head behind a request still answering: wait for that answer.
            due = self.loop.time() + self.limits.header_timeout_s
        if due > self.loop.time():
            self._head_timer = self.loop.call_at(due, self._head_timed_out)
            return
        self._refuse(408, "timed out reading the request head", "head_timeout")

    def _refuse(self, status: int, message: str, reason: str) -> None:
        """Answer ``status`` outside any request and close the connection (without an
        answer while a request is being answered: it would be read as that answer)."""
        self.limits.on_refused(reason)
        self._cancel_head_timer()
        self._unset_keepalive_if_required()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self.transport.close()
            return
        body = orjson.dumps({"message": message})
        self.transport.write(
            b"".join((
                STATUS_LINE[status],
                b"content-type: application/json\r\n",
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n\r\n",
                body,
            ))
        )  # fmt: skip
        self._refused = True
        transport = self.transport
        if transport.can_write_eof():
            transport.write_eof()  # the answer, then FIN; what follows is dropped
            self.loop.call_later(LINGER_S, transport.close)
        else:
            transport.close()


def limited_protocol(limits: ConnectionLimits) -> type[LimitedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, bound to ``limits``."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})
