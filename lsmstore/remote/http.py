"""The HTTP transport of the remote client: one aiohttp session per store.

Keep-alive connections in a bounded pool (``remote_max_connections``), Basic
credentials on every request, a total timeout per request, and every answer that is
not the expected success turned into the client's typed errors:

=======  ==========================================================================
status   exception
=======  ==========================================================================
400      ``NothingToCommitError`` (nothing to commit / stash), else ``InvalidInputError``
401/403  ``PermissionDeniedError`` (``status`` tells which)
404      ``ObjectNotFoundError`` for object paths, ``RepositoryNotFoundError``,
         ``RefNotFoundError``, ``WorkspaceNotFoundError``, else ``NotFoundError`` --
         from the request and message
409      ``MergeConflictError`` (merges), ``NamespaceInUseError``, ``RefExistsError`` (creations),
         ``WorkspaceExistsError`` (stash), else ``ConflictError``
412      ``ObjectExistsError`` (create-only uploads), else ``PreconditionFailedError``
413      ``EntryTooLargeError``
416      ``InvalidInputError``
501      ``InvalidInputError`` (the server does not implement it)
429      ``UnavailableError`` (too many failed authentications: nothing was done)
5xx      ``UnavailableError`` (``outcome_unknown`` for writes)
=======  ==========================================================================

A server that cannot be reached, resets the connection or times out raises
``UnavailableError`` (``outcome_unknown=True`` when a write may have been applied); a
success whose body is not the JSON expected raises ``UnavailableError`` too ("answered
garbage").  Reads (GET/HEAD) are retried a few times on connection errors and 502-504.
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
from lsmstore.errors import (
    ConflictError,
    EntryTooLargeError,
    InvalidInputError,
    InvalidURLError,
    LsmError,
    MergeConflictError,
    NamespaceInUseError,
    NotFoundError,
    NothingToCommitError,
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
        for attempt in range(1, attempts + 1):
            try:
                async with self._client().request(
                    method, url, params=q, data=body, headers=hdrs
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
            if answer.status in (502, 503, 504) and attempt < attempts:
                await asyncio.sleep(0.05 * 2**attempt)
                continue
            raise error_for(answer, method, what or path, kind)
        raise AssertionError("unreachable")  # pragma: no cover


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _message(answer: Response) -> str:
    try:
        body = json.loads(answer.body)
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            return str(body["message"])
    except ValueError:
        pass
    text = answer.body[:200].decode("utf-8", "replace").strip()
    return text or f"HTTP {answer.status}"


#: How the server words a missing branch, tag or commit (lsmstore.refexpr and the
#: RefStores), told apart from a missing object on an existing ref.
_REF_MISSING = (
    "no branch, tag or commit named",
    "ref not found:",
    "has no commit",
    "no tag named",
)


#: How the server words "nothing to commit" (commits, merges, reverts, stashes).
_NOTHING = ("nothing to commit", "no changes", "nothing staged", "no uncommitted changes")


def error_for(answer: Response, method: str, what: str, kind: str) -> LsmError:
    """The typed error of an unexpected answer (module docstring)."""
    status = answer.status
    msg = _message(answer) if method != "HEAD" else f"HTTP {status}"
    low = msg.lower()
    if status == 400:
        if any(m in low for m in _NOTHING):
            return NothingToCommitError(msg)
        return InvalidInputError(msg)
    if status in (401, 403):
        hint = "" if status == 403 else " (check access_key_id / secret_access_key)"
        return PermissionDeniedError(f"{msg}{hint}", status=status)
    if status == 404:
        if low.startswith("repository not found"):
            return RepositoryNotFoundError(msg)
        if low.startswith("workspace not found"):
            return WorkspaceNotFoundError(msg)
        ref_missing = any(m in low for m in _REF_MISSING) or low.startswith("commit ")
        if ref_missing or (kind in ("ref", "merge") and method != "HEAD"):
            return RefNotFoundError(msg)
        if kind == "object":
            return ObjectNotFoundError(what, msg if method != "HEAD" else f"{what}: not found")
        if kind == "repository":
            return RepositoryNotFoundError(msg)
        return NotFoundError(msg)
    if status == 409:
        if kind == "merge" or ("conflict" in low and "merge" in low):
            return MergeConflictError(msg, [])
        if low.startswith("workspace already exists"):
            return WorkspaceExistsError(msg)
        if low.startswith("storage namespace "):  # lsmstore.namespace's refusals
            return NamespaceInUseError(msg)
        if kind == "create" or "exists" in low:
            return RefExistsError(msg)
        return ConflictError(msg)
    if status == 412:
        if kind == "upload":
            return ObjectExistsError(what)
        return PreconditionFailedError(msg)
    if status == 413:
        return EntryTooLargeError(msg)
    if status in (416, 405, 501):
        return InvalidInputError(f"{msg} (HTTP {status})")
    if status == 429:  # refused before anything ran (lsmstore.server.throttle)
        return UnavailableError(f"server refused (429): {msg}")
    if status >= 500:
        return UnavailableError(
            f"server error {status}: {msg}", outcome_unknown=method not in ("GET", "HEAD")
        )
    return UnavailableError(f"unexpected answer {status} from the server: {msg}")
