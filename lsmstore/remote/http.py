"""The HTTP transport of the remote client: one aiohttp session per store.

Keep-alive connections in a bounded pool (``remote_max_connections``), Basic
credentials on every request, a total timeout per request, and every answer that is
not the expected success turned into the client's typed errors: an lsmstore server's
error body names the error's type (``{"message": ..., "type": "RefNotFoundError"}``,
:mod:`lsmstore.error_types`), and the client raises that very class; the message is
only shown.  An answer without a known type (a HEAD, a proxy's page, a newer server's
new type) is typed by its status alone:

=======  ==========================================================================
status   exception
=======  ==========================================================================
400      ``InvalidInputError``
401/403  ``PermissionDeniedError`` (``status`` tells which)
404      ``ObjectNotFoundError``, ``RepositoryNotFoundError``, ``RefNotFoundError``,
         ``WorkspaceNotFoundError`` by what the request was about, else ``NotFoundError``
409      ``MergeConflictError`` (merges), ``RefExistsError`` (creations),
         ``WorkspaceExistsError`` (stash), else ``ConflictError``
412      ``ObjectExistsError`` for a create-only write, else ``PreconditionFailedError``
413      ``EntryTooLargeError``
405/416/501  ``InvalidInputError``
429      ``UnavailableError`` (too many failed authentications: nothing was done)
5xx      ``UnavailableError`` (``outcome_unknown`` for writes)
=======  ==========================================================================

A server that cannot be reached, resets the connection or times out raises
``UnavailableError`` (``outcome_unknown=True`` when a write may have been applied); a
success whose body is not the JSON expected raises ``UnavailableError`` too ("answered
garbage").  Reads (GET/HEAD) are retried a few times on connection errors and 502-504.

A ``307`` (a daemon with ``server_forward_mode = redirect`` naming the owner of the
branch written: docs/server.md, "Forwarding writes") is followed once, with the
credentials, to an absolute URL of the server's own scheme, marked
``X-Lsm-Redirected`` so that it is applied where it lands.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp

from lsmstore import validate
from lsmstore.error_types import error_from
from lsmstore.errors import (
    ConflictError,
    EntryTooLargeError,
    ImportNotFoundError,
    InvalidInputError,
    InvalidURLError,
    LsmError,
    MergeConflictError,
    NotFoundError,
    ObjectExistsError,
    ObjectNotFoundError,
    PermissionDeniedError,
    PreconditionFailedError,
    RefExistsError,
    RefNotFoundError,
    RepositoryNotFoundError,
    UnavailableError,
    WorkspaceExistsError,
    WorkspaceNotFoundError,
)

API = "/api/v1"
READ_ATTEMPTS = 3


def seg(value: str) -> str:
    """One URL path segment (``main~1``, ``v1^2`` ... percent-encoded); a name that is
    not valid text is refused here, before any request."""
    validate.check_str(value, "name", max_bytes=4096)
    return quote(value, safe="")


def check_server_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidURLError(f"server URL {url!r} must be http(s)://host[:port]")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as e:
        raise InvalidURLError(f"server URL {url!r}: {e}") from e
    return url.rstrip("/")


class Response:
    """A finished answer: status, headers, body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise UnavailableError(
                f"the server answered garbage (status {self.status}, not JSON: {self.body[:80]!r})"
            ) from e


class HttpTransport:
    """Requests to one lsmstore server (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        *,
        access_key_id: str,
        secret_access_key: str,
        max_connections: int = 64,
        timeout_s: float = 60.0,
    ) -> None:
        self.base_url = check_server_url(base_url)
        token = base64.b64encode(f"{access_key_id}:{secret_access_key}".encode()).decode()
        self._headers = {"Authorization": f"Basic {token}", "User-Agent": "lsmstore-client"}
        self._max_connections = max_connections
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(10, timeout_s))
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, keepalive_timeout=4.0, enable_cleanup_closed=True
            )
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._headers, timeout=self._timeout
            )
        return self._session

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        data: Any = None,
        headers: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (200,),
        what: str = "",
        kind: str = "",
    ) -> Response:
        """``method`` on ``/api/v1`` + ``path``; the answer if its status is in ``ok``,
        else the typed error (``what`` names the thing for messages, ``kind`` --
        "object", "repository", "ref", "merge", "create", "upload" -- guides the
        mapping)."""
        if self._closed:
            from lsmstore.errors import ClosedError

            raise ClosedError("store is closed")
        url = self.base_url + API + path
        q = None
        if params:
            q = {k: _param(v) for k, v in params.items() if v is not None}
        body: Any = data
        hdrs = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        idempotent = method in ("GET", "HEAD")
        attempts = READ_ATTEMPTS if idempotent else 1
        redirected = False
        attempt = 0
        while attempt < attempts:
            attempt += 1
            try:
                async with self._client().request(
                    method, url, params=q, data=body, headers=hdrs, allow_redirects=False
                ) as resp:
                    raw = await resp.read()
                    answer = Response(resp.status, resp.headers, raw)
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
                if attempt < attempts:
                    await asyncio.sleep(0.05 * 2**attempt)
                    continue
                sent = not isinstance(e, aiohttp.ClientConnectorError)
                raise UnavailableError(
                    f"server {self.base_url} unreachable ({method} {path}): {e}",
                    outcome_unknown=sent and not idempotent,
                ) from e
            except TimeoutError as e:
                if attempt < attempts:
                    continue
                raise UnavailableError(
                    f"server {self.base_url} timed out ({method} {path})",
                    outcome_unknown=not idempotent,
                ) from e
            except aiohttp.ClientError as e:
                raise UnavailableError(f"server {self.base_url}: {method} {path}: {e}") from e
            if answer.status in ok:
                return answer
            if answer.status == 307 and not redirected and isinstance(body, bytes | None):
                target = self._owner_url(answer.headers.get("Location", ""))
                if target is not None:  # a write sent to its branch's owner: once
                    url, q, redirected = target, None, True
                    hdrs["X-Lsm-Redirected"] = "1"
                    attempt -= 1
                    continue
            if answer.status in (502, 503, 504) and attempt < attempts:
                await asyncio.sleep(0.05 * 2**attempt)
                continue
            raise error_for(answer, method, what or path, kind)
        raise AssertionError("unreachable")  # pragma: no cover

    def _owner_url(self, location: str) -> str | None:
        """Where a 307 from the server sends a write (docs/server.md, "Forwarding
        writes"): followed once, with the credentials, only to an absolute URL of the
        server's own scheme."""
        parts = urlsplit(location)
        if parts.scheme != urlsplit(self.base_url).scheme or not parts.hostname:
            return None
        return location


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _body(answer: Response) -> tuple[str, str | None]:
    """The error body's message and type (None when it names none)."""
    try:
        body = json.loads(answer.body)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        kind = body.get("type")
        return str(body["message"]), kind if isinstance(kind, str) else None
    text = answer.body[:200].decode("utf-8", "replace").strip()
    return text or f"HTTP {answer.status}", None


#: The error of a 404 / 409 without a type, by what the request was about.
_NOT_FOUND: dict[str, type[NotFoundError]] = {
    "repository": RepositoryNotFoundError,
    "ref": RefNotFoundError,
    "merge": RefNotFoundError,
    "workspace": WorkspaceNotFoundError,
    "import": ImportNotFoundError,
}
_EXISTS: dict[str, type[LsmError]] = {
    "create": RefExistsError,
    "workspace": WorkspaceExistsError,
}


def error_for(answer: Response, method: str, what: str, kind: str) -> LsmError:
    """The typed error of an unexpected answer (module docstring); ``kind`` ("object",
    "upload" ...) only types an answer whose body names no type."""
    status = answer.status
    write = method not in ("GET", "HEAD")
    msg, type_name = _body(answer) if method != "HEAD" else (f"HTTP {status}", None)
    if status == 401:
        msg += " (check access_key_id / secret_access_key)"
    if type_name is not None and (status < 500 or status == 503):  # 500: a server bug
        found = error_from(
            type_name, msg, status=status, what=what, outcome_unknown=write and status >= 500
        )
        if found is not None:
            return found
    if status == 400:
        return InvalidInputError(msg)
    if status in (401, 403):
        return PermissionDeniedError(msg, status=status)
    if status == 404:
        if kind == "object":
            return ObjectNotFoundError(what, msg if method != "HEAD" else f"{what}: not found")
        return _NOT_FOUND.get(kind, NotFoundError)(msg)
    if status == 409:
        if kind == "merge":
            return MergeConflictError(msg, [])
        return _EXISTS.get(kind, ConflictError)(msg)
    if status == 412:
        if kind in ("upload", "object"):
            return ObjectExistsError(what)
        return PreconditionFailedError(msg)
    if status == 413:
        return EntryTooLargeError(msg)
    if status in (416, 405, 501):
        return InvalidInputError(f"{msg} (HTTP {status})")
    if status == 429:  # refused before anything ran (lsmstore.server.throttle)
        return UnavailableError(f"server refused (429): {msg}")
    if status >= 500:
        return UnavailableError(f"server error {status}: {msg}", outcome_unknown=write)
    return UnavailableError(f"unexpected answer {status} from the server: {msg}")
