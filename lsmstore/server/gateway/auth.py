"""Who an S3 request is: its SigV4 signature (header or presigned query) checked with
the key's sealed secret (:meth:`Authenticator.signing_secret`).  Roles and repository
scopes are then the REST API's (:meth:`Principal.allows`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import parse_qsl

from lsmstore.server.auth import Authenticator, Principal
from lsmstore.server.gateway import sigv4
from lsmstore.server.gateway.errors import S3Error
from lsmstore.server.http import Request


def carries_s3_auth(headers: dict[str, str], raw_query: bytes) -> bool:
    """Whether a request is signed the S3 way (SigV4 header or presigned query)."""
    header = headers.get("authorization", "")
    if header.startswith(sigv4.ALGORITHM):
        return True
    return b"X-Amz-Algorithm=" in raw_query or b"X-Amz-Credential=" in raw_query


async def authenticate(
    auth: Authenticator, request: Request, clock: Callable[[], float] = time.time
) -> tuple[Principal, sigv4.Signed]:
    scope = request.scope
    raw_query: bytes = scope.get("query_string", b"")
    header = request.headers.get("authorization", "")
    if header.startswith(sigv4.ALGORITHM):
        signed = sigv4.parse_header(header, request.headers)
    else:
        query = dict(parse_qsl(raw_query.decode("latin-1"), keep_blank_values=True))
        signed = sigv4.parse_query(query)
    sigv4.check_time(signed, clock())
    found = await auth.signing_secret(signed.key_id)
    if found is None:
        raise S3Error("InvalidAccessKeyId", "The access key id does not exist in our records.")
    principal, secret = found
    raw_path: bytes = scope.get("raw_path") or request.path.encode()
    sigv4.check(signed, secret, request.method, raw_path, raw_query, request.headers)
    return principal, signed
