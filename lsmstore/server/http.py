"""The request and response primitives of the plain ASGI server.

:class:`Request` wraps an ASGI scope: path parameters, query values (parsed once),
headers (lower-cased), and a body that is read with a hard bound (413 past it) and a
per-chunk timeout (408 for a client that stops sending).  :class:`Response` is what a
handler returns: a status, headers and either bytes or an async iterator of chunks.
JSON bodies are encoded with orjson; every error body is lakeFS's ``{"message": ...}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import orjson

from lsmstore.error_types import TYPE_OF_STATUS
from lsmstore.server.errors import ApiError, bad_request

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = "application/json"
_TRUE = {"1", "t", "true", "yes", "on"}
_FALSE = {"0", "f", "false", "no", "off", ""}


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes | AsyncIterator[bytes] = b""
    content_type: str | None = JSON
    headers: dict[str, str] = field(default_factory=dict)
    #: Operation name for metrics (set by the router).
    operation: str = ""


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status, orjson.dumps(data), JSON, headers or {})


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None, kind: str | None = None
) -> Response:
    """lakeFS's error body, ``{"message": ...}``, with the machine-readable ``type``
    (:mod:`lsmstore.error_types`; by default the one of the status)."""
    body = {"message": message, "type": kind or TYPE_OF_STATUS.get(status, "LsmError")}
    return Response(status, orjson.dumps(body), JSON, headers or {})


def empty(status: int = 204) -> Response:
    return Response(status, b"", None)


def text_response(text: str, status: int = 200) -> Response:
    return Response(status, text.encode(), "text/html")


def receive_once(body: bytes) -> Receive:
    """An ASGI ``receive`` handing out ``body`` whole, then a disconnect."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _plain_pairs(text: str) -> list[tuple[str, str]]:
    """``parse_qsl(text, keep_blank_values=True)`` for a text with nothing to unescape
    (no ``%``, no ``+``): the common query (``path=a/b``) at a fraction of its cost."""
    pairs = []
    for item in text.split("&"):
        if item:
            name, _, value = item.partition("=")
            pairs.append((name, value))
    return pairs


def _expire(task: asyncio.Task[Any] | None, expired: list[bool]) -> None:
    """The body timer of :meth:`Request._next_chunk` fired: cancel the waiting task."""
    expired.append(True)
    if task is not None:
        task.cancel()


class Request:
    """One HTTP request (see the module docstring)."""

    __slots__ = (
        "_body_read",
        "_query",
        "auth",
        "body_timeout_s",
        "headers",
        "max_body_bytes",
        "method",
        "params",
        "path",
        "receive",
        "request_id",
        "scope",
    )

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        *,
        max_body_bytes: int,
        body_timeout_s: float,
        request_id: str = "",
    ) -> None:
        self.scope = scope
        self.receive = receive
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.headers: dict[str, str] = {
            k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
        }
        self.params: dict[str, str] = {}
        self._query: dict[str, list[str]] | None = None
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self._body_read = False
        self.request_id = request_id
        self.auth: Any = None  # the authenticated principal (auth.Principal)

    # --- query -----------------------------------------------------------------------

    @property
    def query(self) -> dict[str, list[str]]:
        q = self._query
        if q is None:
            q = {}
            raw = self.scope.get("query_string", b"")
            if raw:
                try:  # the raw text, then each %-escaped value, must be UTF-8
                    text = raw.decode("utf-8")
                    pairs = (
                        parse_qsl(text, keep_blank_values=True, errors="strict")
                        if "%" in text or "+" in text
                        else _plain_pairs(text)
                    )
                except UnicodeDecodeError as e:
                    raise bad_request("query string is not valid UTF-8") from e
                for k, v in pairs:
                    q.setdefault(k, []).append(v)
            self._query = q
        return q

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    def required_arg(self, name: str) -> str:
        value = self.arg(name)
        if value is None:
            raise bad_request(f"missing query parameter {name!r}")
        return value

    def bool_arg(self, name: str, default: bool = False) -> bool:
        """Go ``strconv.ParseBool`` values and Python's ``True``/``False``, any case."""
        value = self.arg(name)
        if value is None:
            return default
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
        raise bad_request(f"query parameter {name!r}: expected a boolean, got {value!r}")

    def int_arg(self, name: str, default: int) -> int:
        value = self.arg(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except ValueError:
            raise bad_request(
                f"query parameter {name!r}: expected an integer, got {value!r}"
            ) from None

    # --- body ------------------------------------------------------------------------

    async def stream(self, limit: int | None = None) -> AsyncIterator[bytes]:
        """The body's chunks; 413 once more than ``limit`` (default: the server's
        bound) bytes arrived, 408 when the client sends nothing for the timeout."""
        bound = self._bound(limit)
        total, more = 0, True
        while more:
            chunk, more = await self._next_chunk(total, bound)
            if chunk:
                total += len(chunk)
                yield chunk

    async def body(self, limit: int | None = None) -> bytes:
        """The whole body, as :meth:`stream` reads it (without an async generator:
        every write request with a JSON or small body comes this way)."""
        bound = self._bound(limit)
        parts: list[bytes] = []
        total, more = 0, True
        while more:
            chunk, more = await self._next_chunk(total, bound)
            if chunk:
                total += len(chunk)
                parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def replay(self, body: bytes) -> None:
        """Make the body, already read in whole, readable once more (a forwarded
        request checked before its handler, a write that could not be forwarded)."""
        self.receive = receive_once(body)
        self._body_read = False

    def _bound(self, limit: int | None) -> int:
        """Start reading the body (once only): its bound in bytes, 413 when the
        declared length is over it."""
        if self._body_read:
            raise RuntimeError("request body already consumed")
        self._body_read = True
        bound = self.max_body_bytes if limit is None else limit
        declared = self.headers.get("content-length")
        if declared is not None:
            try:
                if int(declared) > bound:
                    raise ApiError(413, f"request body larger than {bound} bytes")
            except ValueError:
                raise bad_request("invalid Content-Length") from None
        return bound

    async def _next_chunk(self, total: int, bound: int) -> tuple[bytes, bool]:
        """The next message's bytes (``total`` read so far) and whether more follow."""
        # A bare timer that cancels this task (asyncio.timeout's own way, without its
        # object and context manager: ~5 µs of every write request, measured).
        task = asyncio.current_task()
        expired: list[bool] = []
        timer = asyncio.get_running_loop().call_later(self.body_timeout_s, _expire, task, expired)
        try:
            msg = await self.receive()
        except asyncio.CancelledError:
            # Ours when the timer fired and nothing else cancelled the task meanwhile.
            if expired and task is not None and task.uncancel() == 0:
                raise ApiError(408, "timed out reading the request body") from None
            raise
        finally:
            timer.cancel()
        if msg["type"] == "http.disconnect":
            raise ApiError(400, "client disconnected before the body was complete")
        chunk: bytes = msg.get("body", b"")
        if chunk and total + len(chunk) > bound:
            raise ApiError(413, f"request body larger than {bound} bytes")
        return chunk, bool(msg.get("more_body", False))

    async def json(self, limit: int | None = None) -> Any:
        data = await self.body(limit)
        if not data:
            raise bad_request("request body must be a JSON document")
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise bad_request(f"malformed JSON body: {e}") from None

    async def json_object(self, limit: int | None = None) -> dict[str, Any]:
        doc = await self.json(limit)
        if not isinstance(doc, dict):
            raise bad_request("request body must be a JSON object")
        return doc
