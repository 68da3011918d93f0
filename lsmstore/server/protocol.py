"""uvicorn's httptools protocol, with one send per response.

uvicorn writes a response's head when the app sends ``http.response.start`` and its
body when it sends ``http.response.body``: two ``send`` system calls and two TCP
segments for every small response, which on the server's hot paths (stat, small
writes) cost more than our own handling.  :class:`CoalescingTransport` stands between
the protocol and the socket transport: the writes made in one turn of the event loop
leave together at the start of the next turn (or at once past
:data:`FLUSH_BYTES`, so a streamed body is never held back), and ``close`` sends what
is pending first.  Everything else passes straight through.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: Pending bytes past which a write goes out at once.
FLUSH_BYTES = 64 * 1024


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
