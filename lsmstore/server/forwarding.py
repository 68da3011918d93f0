"""Forwarding a write to its branch's owner (docs/server.md, "Forwarding writes").

With ``server_affinity = on``, a daemon that receives a write for a branch another live
member owns (:mod:`lsmstore.affinity`) authenticates and authorises the caller as
usual, then sends the request to the owner over a pooled keep-alive connection and
passes the owner's answer back: the owner batches every write of its branches into
its one writer, as a single daemon would.

**Member signature.**  The forwarded request carries no caller credentials.  Its
``X-Lsm-Forwarded`` header names the sending member, the caller's access key id and
key generation and the time, with an HMAC-SHA256 under the *member key* -- derived
from the token signing secret (``server_auth_secret_key``, the same on every daemon;
never RefStore data) -- over those fields, the method, the path with its query and
the SHA-256 of the body.  The owner checks the signature and the time (within
:data:`VALIDITY_S` either way), then re-checks the caller: the key must still exist at
that generation (:meth:`~lsmstore.server.auth.Authenticator.check_generation`, as a
token) and its current role must allow the route.  A request signed otherwise is
refused (401) and never applied.

**Rules.**

* A forwarded request is never forwarded again (no loops, whatever the owner's own
  view of the members says).
* Only bodies declared by ``Content-Length`` and at most ``server_forward_max_bytes``
  are forwarded (read whole here first); larger or chunked ones are applied where they
  arrive.
* Correctness never depends on ownership: an owner that cannot be reached or does not
  answer within ``server_forward_timeout_s``, or refuses the member signature, is
  passed over and the write applied locally (the RefStore orders appends from any
  daemon).  When the owner received the request but its answer was lost, applying it
  here too is what a client's retry would do: writes are idempotent by path (the same
  content is the same entry), and a create-only write (``If-None-Match: *``) decided
  by the owner's append answers 412 here, exactly as that retry would.
* Create-only writes (``If-None-Match: *``) are checked by the daemon that applies
  them, serialised per path in that process only (the RefStore's append has no path
  condition).  Forwarding sends racing ones to one owner, where exactly one wins; while
  daemons disagree on the members, or after a fallback, the guarantee is per daemon,
  as without forwarding.

A forwarded request can be replayed within its validity by whoever captured it on the
wire (like a client's retry: it carries its own body); run the daemons' traffic over
TLS (``server_advertise_url`` with ``https``) where the network is not trusted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from lsmstore.affinity import Membership
from lsmstore.refstore.base import Member
from lsmstore.server.auth import Authenticator, Principal
from lsmstore.server.errors import ApiError
from lsmstore.server.http import Request, Response

log = logging.getLogger("lsmstore.server")

#: The request header of a forwarded write.
HEADER = "x-lsm-forwarded"
#: The request header of a write sent again after a redirect to its owner: applied
#: where it lands (it only asks for what any daemon may do).
REDIRECTED = "x-lsm-redirected"
#: The answer header of a refused member signature (whatever the status an S3 error
#: maps it to): the sender applies the write itself.
REFUSED = "x-lsm-forward-refused"
#: How far a forwarded request's time may be from the owner's clock (seconds).
VALIDITY_S = 30.0
#: The largest answer taken back from an owner (answers to writes are small JSON).
MAX_ANSWER_BYTES = 1 << 20
_LABEL = b"lsmstore member forwarding v1"
#: Request headers not passed on: the caller's credentials, hop-by-hop headers, and
#: those the forwarding request sets itself.
_DROP_REQUEST = frozenset({
    "authorization", "cookie", "host", "connection", "keep-alive", "content-length",
    "transfer-encoding", "te", "upgrade", "expect", "proxy-authorization", HEADER,
})  # fmt: skip
_DROP_ANSWER = frozenset({
    "content-length", "content-type", "transfer-encoding", "connection", "keep-alive",
    "date", "server", "x-request-id",
})  # fmt: skip


def member_key(signing_key: bytes) -> bytes:
    """The key members sign forwarded requests with: derived from the token signing
    secret, so that a forwarded request's signature is no token and no token is one."""
    return hmac.new(signing_key, _LABEL, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class Forwarded:
    """What a forwarded request's header says: who sent it, for which caller."""

    member: str
    key_id: str
    generation: str
    issued: int


def _mac(key: bytes, method: str, target: str, f: Forwarded, body: bytes) -> bytes:
    text = "\n".join((
        "v1", method, target, f.member, f.key_id, f.generation, str(f.issued),
        hashlib.sha256(body).hexdigest(),
    ))  # fmt: skip
    return hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()


def sign(key: bytes, method: str, target: str, f: Forwarded, body: bytes) -> str:
    """The header value of a forwarded request (``target``: its path and query, as
    sent on the wire)."""
    mac = base64.urlsafe_b64encode(_mac(key, method, target, f, body)).rstrip(b"=").decode()
    return f"v1 {f.member} {f.key_id} {f.generation} {f.issued} {mac}"


def verify(key: bytes, value: str, method: str, target: str, body: bytes, now: float) -> Forwarded:
    """The caller a forwarded request names, once its signature and time are checked;
    ApiError(401) otherwise."""
    parts = value.split(" ")
    if len(parts) != 6 or parts[0] != "v1" or not parts[4].isdigit():
        raise _refused("malformed member signature")
    f = Forwarded(parts[1], parts[2], parts[3], int(parts[4]))
    try:
        got = base64.urlsafe_b64decode(parts[5] + "=" * (-len(parts[5]) % 4))
    except (binascii.Error, ValueError):
        raise _refused("malformed member signature") from None
    if not hmac.compare_digest(got, _mac(key, method, target, f, body)):
        raise _refused("invalid member signature")
    if abs(now - f.issued) > VALIDITY_S:
        raise _refused("expired member signature")
    return f


def _refused(message: str) -> ApiError:
    return ApiError(
        401, f"forwarded request refused: {message}", {REFUSED: "1"}, kind="PermissionDeniedError"
    )


def wire_target(request: Request) -> str:
    """The request's path and query as they came on the wire."""
    scope = request.scope
    raw = scope.get("raw_path") or scope["path"].encode("utf-8")
    target = raw.decode("latin-1")
    query = scope.get("query_string", b"")
    return f"{target}?{query.decode('latin-1')}" if query else target


class Forwarder:
    """Forwards writes to their branch's owner and checks forwarded ones (module
    docstring).  One per daemon, on its event loop; :meth:`aclose` closes its pool."""

    def __init__(
        self,
        membership: Membership,
        auth: Authenticator,
        signing_key: bytes,
        *,
        max_body_bytes: int,
        timeout_s: float,
        connect_timeout_s: float,
        max_connections: int = 256,
        redirect: bool = False,
        outcomes: Callable[[str], Any] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.membership = membership
        self.auth = auth
        self._key = member_key(signing_key)
        self.max_body_bytes = max_body_bytes
        # The connect bound is on the TCP (and TLS) connect alone: waiting for a free
        # pooled connection under load is backpressure, not an unreachable owner.
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
        self._max_connections = max_connections
        self.redirect = redirect
        self._session: aiohttp.ClientSession | None = None
        self._count = outcomes or (lambda outcome: None)
        self._wall_clock = wall_clock

    def _pool(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections),
                timeout=self._timeout,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Content-Type"),
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def owner_elsewhere(
        self, request: Request, repo: str | None = None, branch: str | None = None
    ) -> Member | None:
        """The owner to forward this write to, or None to apply it here (this daemon
        owns the branch, the request was forwarded already, or its body is not declared
        small enough).  The branch: ``repo`` and ``branch``, else the route's
        ``repository`` and ``branch`` parameters."""
        headers = request.headers
        if self.max_body_bytes <= 0 or HEADER in headers or REDIRECTED in headers:
            return None
        declared = request.headers.get("content-length", "0" if request.method == "DELETE" else "")
        if not declared.isdigit() or int(declared) > self.max_body_bytes:
            return None
        repo = repo or request.params.get("repository")
        branch = branch or request.params.get("branch")
        if not repo or not branch:
            return None
        owner = self.membership.owner(repo, branch)
        return None if owner.name == self.membership.name else owner

    def redirect_to(self, request: Request, owner: Member) -> Response:
        """307 to the same path and query on the owner (``server_forward_mode =
        redirect``); the body is left unread."""
        self._count("redirected")
        location = owner.address.rstrip("/") + wire_target(request)
        return Response(307, b"", None, {"Location": location, "X-Lsm-Owner": owner.name})

    async def forward(
        self, request: Request, owner: Member, caller: Principal, target: str | None = None
    ) -> Response | None:
        """The owner's answer to the request, or None when the owner could not be
        reached, did not answer or refused the member signature: the caller then
        applies the write itself (its body is readable again).  ``target``: the path
        and query to send (default: the request's own)."""
        body = await request.body(self.max_body_bytes)
        request.replay(body)
        generation = await self.auth.key_generation(caller)
        target = target or wire_target(request)
        f = Forwarded(
            self.membership.name, caller.access_key_id, generation, int(self._wall_clock())
        )
        headers = {k: v for k, v in request.headers.items() if k not in _DROP_REQUEST}
        headers[HEADER] = sign(self._key, request.method, target, f, body)
        headers["x-request-id"] = request.request_id
        url = URL(owner.address.rstrip("/") + target, encoded=True)
        try:
            async with self._pool().request(
                request.method, url, data=body, headers=headers, allow_redirects=False
            ) as answer:
                data = await answer.content.read(MAX_ANSWER_BYTES + 1)
                if len(data) > MAX_ANSWER_BYTES:
                    raise aiohttp.ClientPayloadError("answer too large")
                if answer.status == 401 or answer.headers.get(REFUSED):
                    log.warning(
                        "the owner %s refused a forwarded write (is server_auth_secret_key "
                        "the same on every daemon?): applied here", owner.address,
                        extra={"fields": {"event": "forward_refused", "owner": owner.name,
                                          "request_id": request.request_id}},
                    )  # fmt: skip
                    self._count("fallback")
                    return None
                ctype = answer.headers.get("content-type")
                passed = {k: v for k, v in answer.headers.items() if k.lower() not in _DROP_ANSWER}
                self._count("forwarded")
                return Response(answer.status, data, ctype, passed)
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning(
                "the owner %s of %s/%s did not answer (%s): the write is applied here",
                owner.address, request.params.get("repository"), request.params.get("branch"),
                type(e).__name__,
                extra={"fields": {"event": "forward_failed", "owner": owner.name,
                                  "request_id": request.request_id}},
            )  # fmt: skip
            self._count("fallback")
            return None

    async def received(self, request: Request, value: str) -> Principal:
        """The caller of a forwarded request, once the member signature, its time and
        the caller's key generation are checked (ApiError(401) otherwise; 413 for a body
        over both ``server_forward_max_bytes`` and ``server_max_body_bytes``).  The body
        stays readable for the route."""
        body = await request.body(max(self.max_body_bytes, request.max_body_bytes))
        request.replay(body)
        f = verify(self._key, value, request.method, wire_target(request), body, self._wall_clock())
        caller = await self.auth.check_generation(f.key_id, f.generation)
        self._count("received")
        return caller
