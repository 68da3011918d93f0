"""Who an S3 request is: its SigV4 or SigV2 signature (header or presigned query) checked with
the key's sealed secret (:meth:`Authenticator.signing_secret`).  Roles and repository
scopes are then the REST API's (:meth:`Principal.allows`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import parse_qsl

from lsmstore.server.auth import Authenticator, Principal
from lsmstore.server.gateway import chunked, sigv2, sigv4
from lsmstore.server.gateway.errors import S3Error
from lsmstore.server.http import Request


def carries_s3_auth(headers: dict[str, str], raw_query: bytes) -> bool:
    """Whether a request is signed the S3 way (SigV4 or SigV2, header or query)."""
    header = headers.get("authorization", "")
    if header.startswith((sigv4.ALGORITHM, "AWS ")):
        return True
    return b"X-Amz-Algorithm=" in raw_query or (
        b"AWSAccessKeyId=" in raw_query and b"Signature=" in raw_query
    )


async def authenticate(
    auth: Authenticator,
    request: Request,
    vhost: str = "",
    clock: Callable[[], float] = time.time,
) -> tuple[Principal, chunked.ChunkSigner | None]:
    """The principal and, for a body of signed ``aws-chunked`` chunks, their signer.
    ``vhost``: the bucket the Host header named (SigV2 signs it as part of the path)."""
    scope = request.scope
    headers = request.headers
    raw_query: bytes = scope.get("query_string", b"")
    raw_path: bytes = scope.get("raw_path") or request.path.encode()
    header = headers.get("authorization", "")
    query = dict(parse_qsl(raw_query.decode("latin-1"), keep_blank_values=True))
    v2 = None if header.startswith(sigv4.ALGORITHM) else sigv2.parse(headers, query)
    if v2 is not None:
        sigv2.check_time(v2, headers, clock())
        principal, secret = await _secret(auth, v2.key_id)
        resource = b"/" + vhost.encode() + raw_path if vhost else raw_path
        sigv2.check(v2, secret, request.method, resource, raw_query, headers)
        return principal, None
    if header.startswith(sigv4.ALGORITHM):
        signed = sigv4.parse_header(header, headers)
    else:
        signed = sigv4.parse_query(query)
    sigv4.check_time(signed, clock())
    principal, secret = await _secret(auth, signed.key_id)
    sigv4.check(signed, secret, request.method, raw_path, raw_query, headers)
    if signed.payload_hash not in (chunked.SIGNED, chunked.SIGNED_TRAILER):
        return principal, None
    key = sigv4.signing_key(secret, signed.date, signed.region, signed.service)
    where = f"{signed.date}/{signed.region}/{signed.service}/aws4_request"
    return principal, chunked.ChunkSigner(key, signed.amz_date, where, signed.signature)


async def _secret(auth: Authenticator, key_id: str) -> tuple[Principal, str]:
    found = await auth.signing_secret(key_id)
    if found is None:
        raise S3Error("InvalidAccessKeyId", "The access key id does not exist in our records.")
    return found
