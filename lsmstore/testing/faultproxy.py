"""A fault-injecting HTTP proxy on loopback, in front of an S3 server (moto, SeaweedFS).

Faults happen at the network level, where a real S3 endpoint fails: the client's own
retries, timeouts and "did my PUT land?" logic run for real.  Per request, drawn from
the injectable ``rng`` with the rates of the current :class:`FaultPlan`:

* ``error``: answer ``503 SlowDown`` without forwarding (nothing happened);
* ``reset_before``: reset the connection (TCP RST) without forwarding;
* ``reset_after``: forward the request, wait for the answer, then reset the client's
  connection instead of answering (the request *did* happen; the client cannot know);
* ``delay``: hold the request up to ``max_delay_s`` before forwarding.

And one deterministic fault: :meth:`FaultProxy.hold` holds every request whose request
line contains a given text (e.g. ``continuation-token``: an S3 listing's second page)
until :meth:`FaultProxy.release` -- a store that stops answering part way, at a known
point.  Held requests are counted in ``counts["held"]``.

Each request goes to the upstream server on its own connection (``Connection:
close``); the answer goes back on the client's keep-alive connection with its framing
made explicit.  ``Expect: 100-continue`` is answered by the proxy.  Counters of what
was done are in :attr:`FaultProxy.counts`; with ``classify`` (method and target of a
request -> a name), the requests are also counted by that name in
:attr:`FaultProxy.requests` (a counting proxy: S3 requests per write, in bench/).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024

_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>injected by the fault proxy</Message></Error>"
)


@dataclass(slots=True)
class FaultPlan:
    error: float = 0.0
    reset_before: float = 0.0
    reset_after: float = 0.0
    delay: float = 0.0
    max_delay_s: float = 0.5

    @classmethod
    def none(cls) -> FaultPlan:
        return cls()


def _headers(head: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    lines = head.split(b"\r\n")
    out: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(b":")
        out.append((name.strip(), value.strip()))
    return lines[0], out


def _get(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _without(headers: list[tuple[bytes, bytes]], *names: bytes) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in headers if k.lower() not in names]


def _render(first: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    return first + b"\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body, re-encoded as plain bytes."""
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)


class FaultProxy:
    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        rng: random.Random | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        classify: Callable[[str, str], str] | None = None,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.classify = classify
        self.requests: Counter[str] = Counter()
        self.rng = rng or random.Random(0)
        self.host = host
        self.port = port
        self.plan = FaultPlan()
        self.counts: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self._hold: bytes | None = None
        self._released = asyncio.Event()

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._conns):
                task.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    def hold(self, text: str) -> None:
        """Hold requests whose request line contains ``text`` until :meth:`release`."""
        self._hold = text.encode()
        self._released.clear()

    def release(self) -> None:
        """Forward the held requests, and hold no more."""
        self._hold = None
        self._released.set()

    def _draw(self) -> str:
        plan, r = self.plan, self.rng.random()
        for name, rate in (
            ("error", plan.error),
            ("reset_before", plan.reset_before),
            ("reset_after", plan.reset_after),
            ("delay", plan.delay),
        ):
            if r < rate:
                return name
            r -= rate
        return "forward"

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while await self._one(reader, writer):
                pass
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ValueError,
        ):
            pass
        finally:
            self._conns.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        first, headers = _headers(head)
        method = first.split(b" ", 1)[0]
        if self.classify is not None:
            target = first.split(b" ", 2)[1] if first.count(b" ") >= 1 else b""
            self.requests[self.classify(method.decode("latin-1"), target.decode("latin-1"))] += 1
        if (_get(headers, b"expect") or b"").lower() == b"100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        if (_get(headers, b"transfer-encoding") or b"").lower() == b"chunked":
            body = await _read_chunked(reader)
        else:
            body = await reader.readexactly(int(_get(headers, b"content-length") or b"0"))
        close_after = (_get(headers, b"connection") or b"").lower() == b"close"
        if self._hold is not None and self._hold in first:
            self.counts["held"] += 1
            await self._released.wait()
        fault = self._draw()
        self.counts[fault] += 1
        if fault == "delay":
            await asyncio.sleep(self.rng.uniform(0, self.plan.max_delay_s))
        if fault == "error":
            writer.write(
                b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                + f"Content-Length: {len(_SLOW_DOWN)}\r\n\r\n".encode()
                + _SLOW_DOWN
            )
            await writer.drain()
            return not close_after
        if fault == "reset_before":
            self._reset(writer)
            return False
        upstream_headers = _without(
            headers, b"connection", b"expect", b"transfer-encoding", b"content-length"
        )
        upstream_headers.append((b"Content-Length", str(len(body)).encode()))
        upstream_headers.append((b"Connection", b"close"))
        ur, uw = await asyncio.open_connection(*self.upstream)
        try:
            uw.write(_render(first, upstream_headers) + body)
            await uw.drain()
            answer = await ur.read()
        finally:
            uw.close()
        if fault == "reset_after":
            self._reset(writer)
            return False
        writer.write(self._reframe(method, answer))
        await writer.drain()
        return not close_after

    @staticmethod
    def _reframe(method: bytes, answer: bytes) -> bytes:
        """The upstream's answer (read to EOF), with explicit framing for keep-alive."""
        head, sep, body = answer.partition(b"\r\n\r\n")
        if not sep:
            raise ConnectionError("upstream sent no complete answer")
        first, headers = _headers(head + b"\r\n")
        parts = first.split(b" ", 2)
        status = int(parts[1])
        first = b"HTTP/1.1 " + b" ".join(parts[1:])
        headers = _without(headers, b"connection", b"keep-alive")
        no_body = method == b"HEAD" or status in (204, 304) or status < 200
        if (
            not no_body
            and _get(headers, b"content-length") is None
            and _get(headers, b"transfer-encoding") is None
        ):
            headers.append((b"Content-Length", str(len(body)).encode()))
        return _render(first, headers) + body


@contextlib.asynccontextmanager
async def fault_proxy(endpoint: str, seed: int = 0) -> AsyncIterator[FaultProxy]:
    """A started :class:`FaultProxy` in front of the server at ``endpoint``
    (``http://host:port``), its draws seeded with ``seed``; closed afterwards."""
    url = urlsplit(endpoint)
    if url.hostname is None or url.port is None:
        raise ValueError(f"not an http://host:port endpoint: {endpoint!r}")
    proxy = FaultProxy(url.hostname, url.port, rng=random.Random(seed))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.aclose()
