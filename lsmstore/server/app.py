"""The ASGI application: routing, authentication, errors, request ids, metrics, logs.

One request: match the route (unknown ``/api/v1`` paths are lakeFS routes we do not
implement: 501 after authentication; other unknown paths 404; a known path with
another method 405), authenticate (401) and authorise (403) unless the route is
open, run the handler, map any exception to lakeFS's error shape and status
(:mod:`lsmstore.server.errors`; unexpected ones are 500 and logged with their
traceback), send the answer with ``X-Request-Id``, count it.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import orjson

from lsmstore.server import openapi
from lsmstore.server.auth import forbidden
from lsmstore.server.context import Context
from lsmstore.server.errors import ApiError, message_of, status_of, type_of
from lsmstore.server.forwarding import HEADER as FORWARDED
from lsmstore.server.gateway import Gateway, carries_s3_auth
from lsmstore.server.http import JSON, Receive, Request, Response, Scope, Send, error_response
from lsmstore.server.routes import (
    actions,
    branches,
    commits,
    config,
    imports,
    lsm,
    objects,
    protection,
    refs,
    repositories,
    service,
    tags,
    users,
    workspaces,
)
from lsmstore.server.routing import Router
from lsmstore.server.throttle import client_address
from lsmstore.service import request_context
from lsmstore.ui import assets as ui_assets
from lsmstore.ui import routes as ui_routes

log = logging.getLogger("lsmstore.server")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_API = "/api/v1/"
_API_ROOT = "/api/"
_JSON_TYPE = (b"content-type", JSON.encode())


def build_router(ctx: Context, version: str) -> Router:
    router = Router()
    for module in (config, repositories, branches, commits, refs, tags, objects, lsm, workspaces,
                   protection, actions, imports, users, ui_routes):  # fmt: skip
        for route in module.routes(ctx):
            router.add(route)
    # The document describes every route, itself and the health routes included.
    placeholder = Response()
    for route in service.routes(ctx, placeholder):
        router.add(route)
    doc = openapi.document(router.routes, version)
    placeholder.body = orjson.dumps(doc)
    placeholder.content_type = JSON
    # The web UI's page and files (``/`` and ``/ui/``): not API operations, left out of
    # the document.
    for route in ui_assets.routes():
        router.add(route)
    return router


class App:
    """The ASGI callable (see the module docstring)."""

    def __init__(self, ctx: Context, version: str = "1") -> None:
        self.ctx = ctx
        self.router = build_router(ctx, version)
        self.gateway = Gateway(ctx)
        self._next_id = 0
        self._prefix = f"{int(time.time()) & 0xFFFFFF:06x}"
        #: Requests being handled: a plain count, read when the metrics are rendered
        #: (a gauge's inc/dec take a lock twice per request).
        self.in_flight = 0
        ctx.metrics.in_flight.set_function(lambda: self.in_flight)

    def _request_id(self, headers: dict[str, str]) -> str:
        text = headers.get("x-request-id")
        if text is not None and _REQUEST_ID.fullmatch(text):
            return text
        self._next_id += 1
        return f"{self._prefix}-{self._next_id:x}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = self.ctx
        metrics = ctx.metrics
        started = time.perf_counter()
        method: str = scope["method"]
        path: str = scope["path"]
        route, params, known = self.router.match(method, path)
        operation = route.operation_id if route is not None else "unmatched"
        self.in_flight += 1
        try:
            request = Request(
                scope,
                receive,
                max_body_bytes=ctx.config.server_max_body_bytes,
                body_timeout_s=ctx.config.server_body_timeout_s,
            )
            rid = request.request_id = self._request_id(request.headers)
            request.params = params
            try:
                if not path.startswith(_API_ROOT) and (
                    carries_s3_auth(request.headers, scope.get("query_string", b""))
                    or (FORWARDED in request.headers and ctx.forwarder is not None)
                ):
                    operation = "s3"
                    with request_context(rid):
                        response = await self.gateway.handle(request)
                elif route is None:
                    if known:
                        raise ApiError(405, f"method {method} not allowed on {path}")
                    if path.startswith(_API):
                        request.auth = await ctx.auth.authenticate(
                            request.headers.get("authorization"), client_address(scope)
                        )
                        why = users.unimplemented_reason(path)
                        raise ApiError(
                            501, f"{method} {path} is not implemented" + (f": {why}" if why else "")
                        )
                    raise ApiError(404, f"no route {method} {path}")
                else:
                    forwarder = ctx.forwarder
                    answer = None
                    if route.permission is not None:
                        signed = request.headers.get(FORWARDED)
                        if signed is not None and forwarder is not None:
                            who = await forwarder.received(request, signed)
                        else:
                            who = await ctx.auth.authenticate(
                                request.headers.get("authorization"), client_address(scope)
                            )
                        repo = params.get("repository")
                        if not who.allows(route.permission, repo):
                            raise forbidden(who, route.permission, repo)
                        request.auth = who
                        if route.forward and forwarder is not None:
                            owner = forwarder.owner_elsewhere(request)
                            if owner is not None and forwarder.redirect:
                                answer = forwarder.redirect_to(request, owner)
                            elif owner is not None:
                                answer = await forwarder.forward(request, owner, who)
                    with request_context(rid):
                        response = answer or await route.handler(request)
            except Exception as e:
                status = status_of(e)
                if status >= 500 and status != 501 and status != 503:
                    log.exception(
                        "request failed",
                        extra={"fields": {"event": "request_failed", "request_id": rid,
                                          "operation": operation, "method": method,
                                          "path": path}},
                    )  # fmt: skip
                elif status == 503:
                    log.warning(
                        "backend unavailable: %s", e,
                        extra={"fields": {"event": "unavailable", "request_id": rid,
                                          "operation": operation}},
                    )  # fmt: skip
                headers = e.headers if isinstance(e, ApiError) else {}
                response = error_response(status, message_of(e), headers, type_of(e))
            await self._send(send, response, rid, method == "HEAD")
        finally:
            self.in_flight -= 1
        status = response.status
        elapsed = time.perf_counter() - started
        metrics.requests.observe(operation, status, elapsed)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s %s %d", method, path, status,
                extra={"fields": {"event": "request", "request_id": rid, "operation": operation,
                                  "status": status, "ms": round(elapsed * 1000, 3)}},
            )  # fmt: skip

    async def _send(self, send: Send, response: Response, rid: str, head: bool) -> None:
        headers: list[tuple[bytes, bytes]] = [(b"x-request-id", rid.encode())]
        ctype = response.content_type
        if ctype is not None:
            headers.append(_JSON_TYPE if ctype == JSON else (b"content-type", ctype.encode()))
        for k, v in response.headers.items():
            headers.append((k.lower().encode("latin-1"), v.encode("latin-1")))
        body = response.body
        if isinstance(body, bytes):
            has_length = any(k.lower() == "content-length" for k in response.headers)
            if not has_length and response.status not in (204, 304):
                headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": response.status,
                        "headers": headers})  # fmt: skip
            await send({"type": "http.response.body", "body": b"" if head else body})
            return
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        if head:
            aclose: Any = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()
            await send({"type": "http.response.body", "body": b""})
            return
        try:
            async for chunk in body:
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()
        await send({"type": "http.response.body", "body": b""})
