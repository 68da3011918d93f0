"""lakeFS's S3 gateway on the server's port (docs/gateway.md).

A request outside ``/api/`` that carries S3 authentication comes here
(:func:`~lsmstore.server.gateway.auth.carries_s3_auth`); every other request goes to
the REST API's router, so ``/`` and the web UI's paths are untouched.  Path style:
``/<bucket>/<key>`` with bucket = repository and key = ``<ref>/<path>``; virtual-host
style (``Host: <bucket>.<server_s3_domain>``) when a domain is configured.

========================  ===============================================================
module                    what it owns
========================  ===============================================================
``auth``                  who a request is (SigV4 / SigV2, header or presigned query)
``sigv4``                 the SigV4 canonical request and signature
``sigv2``                 the SigV2 string to sign and signature
``payload``               Content-MD5 and x-amz-content-sha256 checks of a body
``chunked``               ``aws-chunked`` bodies (signed chunks and trailers, checksums)
``multipart``             multipart uploads (state in RefStore records)
``operations``            every S3 operation, over the library and the operations layer
``xml``                   S3's XML answers and the DeleteObjects body
``errors``                S3's error codes and the mapping of typed errors onto them
========================  ===============================================================
"""

from __future__ import annotations

import logging
from urllib.parse import quote, unquote

from lsmstore.server.auth import Principal
from lsmstore.server.context import Context
from lsmstore.server.forwarding import HEADER as FORWARDED
from lsmstore.server.forwarding import Forwarder, wire_target
from lsmstore.server.gateway import xml
from lsmstore.server.gateway.auth import authenticate, carries_s3_auth
from lsmstore.server.gateway.errors import S3Error, s3_error_of
from lsmstore.server.gateway.operations import NotModified, Operations
from lsmstore.server.http import Request, Response

__all__ = ["Gateway", "carries_s3_auth"]

log = logging.getLogger("lsmstore.server.gateway")


def virtual_host_bucket(host: str, domain: str) -> str:
    """The bucket a ``Host`` of ``<bucket>.<domain>[:port]`` names; "" for path style."""
    if not domain:
        return ""
    name = host.rpartition(":")[0] if host.count(":") == 1 else host
    suffix = "." + domain.lower()
    name = name.lower()
    return name[: -len(suffix)] if name.endswith(suffix) and len(name) > len(suffix) else ""


def _forwardable(request: Request, key: str) -> bool:
    """A PutObject of a ``<branch>/<path>`` key (not a copy, not a multipart part):
    the owner of the branch batches it (docs/server.md, "Forwarding writes")."""
    query = request.query
    return (
        request.method == "PUT"
        and "/" in key
        and "x-amz-copy-source" not in request.headers
        and "uploadId" not in query
        and "uploads" not in query
    )


class Gateway:
    """Answers one S3 request (module docstring); never raises."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.operations = Operations(ctx)

    async def _forward(
        self, forwarder: Forwarder, request: Request, who: Principal, bucket: str, key: str,
        vhost: str,
    ) -> Response | None:  # fmt: skip
        """The owner's answer to a PutObject of a branch another daemon owns (None:
        apply it here).  Sent path-style, checked by the owner with the member
        signature in place of the S3 one; a body of signed chunks is never forwarded
        (its chunk signatures are checked where it arrives)."""
        if not who.allows("write", bucket) or forwarder.redirect:
            return None
        owner = forwarder.owner_elsewhere(request, bucket, key.partition("/")[0])
        if owner is None:
            return None
        target = wire_target(request)
        if vhost:
            target = "/" + quote(bucket, safe="") + target
        return await forwarder.forward(request, owner, who, target)

    async def handle(self, request: Request) -> Response:
        path = unquote(request.path)
        vhost = virtual_host_bucket(
            request.headers.get("host", ""), self.ctx.config.server_s3_domain
        )
        if vhost:
            bucket, key = vhost, path.lstrip("/")
        else:
            bucket, _, key = path.lstrip("/").partition("/")
        resource = request.path
        forwarder = self.ctx.forwarder
        try:
            signed = request.headers.get(FORWARDED)
            if signed is not None and forwarder is not None:
                who, signer = await forwarder.received(request, signed), None
            else:
                who, signer = await authenticate(
                    self.ctx.auth, request, vhost, clock=self.ctx.store.clock
                )
            request.auth = who
            if forwarder is not None and signer is None and _forwardable(request, key):
                answer = await self._forward(forwarder, request, who, bucket, key, vhost)
                if answer is not None:
                    return answer
            return await self.operations.dispatch(request, who, bucket, key, signer)
        except NotModified as e:
            return Response(304, b"", None, e.headers)
        except Exception as e:
            err = s3_error_of(e)
            if err.status >= 500 and not isinstance(e, S3Error) and err.status != 503:
                log.exception("S3 request failed",
                              extra={"fields": {"event": "request_failed",
                                                "request_id": request.request_id,
                                                "method": request.method,
                                                "path": request.path}})  # fmt: skip
            headers = dict(err.headers)
            headers["x-amz-request-id"] = request.request_id
            h = request.headers
            if h.get("content-length", "0") != "0" or "transfer-encoding" in h:
                # The body may be unread (an error before it, or a client that skipped
                # it after Expect: 100-continue): never read it as the next request.
                headers["Connection"] = "close"
            body = b"" if request.method == "HEAD" else xml.error(err, resource, request.request_id)
            return Response(err.status, body, xml.XML_TYPE if body else None, headers)
