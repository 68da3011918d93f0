"""The S3 store's hot requests -- GetObject (whole or a range), HeadObject, PutObject,
DeleteObject -- sent straight over aiohttp and signed with :mod:`lsmstore.sigv4`.

Why: through botocore, the fixed work of one small request (its event hooks, endpoint
rules, signing and response parsing) was about half of a small GET's CPU, more than
aiohttp's; these four requests are simple enough to build by hand (docs/decisions.md).
Every other request (listing, multipart uploads, pre-signed URLs) stays on the
aiobotocore client, and this path takes everything it must agree with from that client
once, at :meth:`S3Direct.bind`:

* **endpoint, addressing style and signing region**: from a URL the client pre-signs
  for a probe key (made locally, nothing is sent), so botocore's own resolution decides
  (custom endpoint or AWS, path or virtual-hosted style);
* **credentials**: the same (refreshing) credentials object as the client's session,
  frozen per request;
* **proxy**: botocore's proxy configuration for that URL;
* **TLS**: the certificates botocore verifies with (the session's ``ca_bundle``, else
  botocore's default bundle).

Per request, as the client does: timeouts (``connect_timeout``, ``read_timeout`` per
socket read), ``max_attempts`` attempts in total with full-jitter exponential back-off
(at most :data:`MAX_BACKOFF_S`) on connection failures, timeouts, 5xx, 429 and S3's
throttling and transient error codes; a CRC32 of every PUT's body
(``x-amz-checksum-crc32``) and, on a whole-object GET, the object's checksum checked
when S3 sends one.  An answer S3 refuses with is raised as botocore's ``ClientError``
with botocore's fields (``Error.Code``, ``Error.Message``,
``ResponseMetadata.HTTPStatusCode``), so the store maps both paths' errors with one
function; an answer that breaks the protocol (a body larger than the range asked, a
checksum mismatch) is :class:`BadAnswerError`.  A redirect (the bucket lives in
another region) is :class:`RedirectedError`: the store then leaves this path for
botocore, which follows it.

Sizes are bounded before anything is allocated: a body's ``Content-Length`` is checked
against the range asked for, or the caller's limit for a whole object, and a body
without one is read up to that bound; an error body is read up to
:data:`ERROR_BODY_LIMIT` bytes.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
import re
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
from botocore.exceptions import ClientError, NoCredentialsError
from botocore.httpsession import ProxyConfiguration, get_cert_path
from google_crc32c import value as crc32c
from yarl import URL

from lsmstore import sigv4

#: The most bytes of an error answer's body read (S3's are well under 1 KiB).
ERROR_BODY_LIMIT = 64 << 10
#: The longest back-off between two attempts (botocore's "standard" mode bound).
MAX_BACKOFF_S = 20.0
#: Statuses worth another attempt (botocore "standard": transient and throttled).
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Error codes worth another attempt whatever the status (botocore "standard").
RETRY_CODES = frozenset({
    "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete", "Throttling",
    "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "ProvisionedThroughputExceededException",
    "TransactionInProgressException", "RequestLimitExceeded", "BandwidthLimitExceeded",
    "LimitExceededException", "RequestThrottled", "SlowDown", "EC2ThrottledException",
})  # fmt: skip
#: A redirect to the bucket's region (S3 answers 301, or 400 naming the region).
_REDIRECT_STATUSES = frozenset({301, 302, 307})
_REDIRECT_CODES = frozenset({"PermanentRedirect", "AuthorizationHeaderMalformed"})
_CODE = re.compile(rb"<Code>([^<]{0,256})</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]{0,2048})</Message>")
_PROBE = "p"
_T = TypeVar("_T")


class BadAnswerError(Exception):
    """An answer that breaks the protocol: more bytes than asked for, a body shorter
    than it claimed, a checksum that does not match."""


class RedirectedError(Exception):
    """S3 sent the request elsewhere (another region): botocore knows how to follow."""


def _crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def _crc32c(data: bytes) -> str:
    return base64.b64encode(crc32c(data).to_bytes(4, "big")).decode()


def _sha1(data: bytes) -> str:
    return base64.b64encode(hashlib.sha1(data, usedforsecurity=False).digest()).decode()


def _sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


#: Checksums of a whole object S3 may answer with, and how to compute them here.
CHECKSUMS: dict[str, Callable[[bytes], str]] = {
    "x-amz-checksum-crc32": _crc32,
    "x-amz-checksum-crc32c": _crc32c,
    "x-amz-checksum-sha1": _sha1,
    "x-amz-checksum-sha256": _sha256,
}


@dataclass(frozen=True, slots=True)
class _Target:
    """Where the bucket's objects are: ``{base}/{encoded key}``, signed for ``region``."""

    base: str  # scheme://host[:port][/bucket], no trailing slash
    path: str  # the base's path ("" or "/bucket")
    host: str  # the Host header
    region: str
    proxy: str | None


class S3Direct:
    """The four hot requests of one bucket.  Safe for concurrent use by many tasks of
    one event loop; :meth:`aclose` closes its connections.  ``clock`` (seconds since
    the epoch: the signature's time), ``rand`` (in [0, 1): the back-off's jitter) and
    ``sleep`` are injected."""

    def __init__(
        self,
        *,
        max_attempts: int,
        connect_timeout: float,
        read_timeout: float,
        max_pool_connections: int,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._max_attempts = max_attempts
        self._timeout = aiohttp.ClientTimeout(sock_connect=connect_timeout, sock_read=read_timeout)
        self._pool = max_pool_connections
        self._clock = clock
        self._rand = rand
        self._sleep = sleep
        self._target: _Target | None = None
        self._credentials: Any = None
        self._session: aiohttp.ClientSession | None = None
        self._date = (-1, "")

    async def bind(
        self, client: Any, credentials: Any, bucket: str, ca_bundle: str | None = None
    ) -> None:
        """Take the endpoint, addressing style, signing region and proxy of ``client``
        (an aiobotocore S3 client) for ``bucket``, ``credentials`` and ``ca_bundle``
        (its session's).  Raises ``NoCredentialsError`` when there are none, as botocore
        would."""
        if credentials is None:
            raise NoCredentialsError()
        url: str = await client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": _PROBE}, ExpiresIn=60
        )
        split = urlsplit(url)
        path = split.path[: -len(_PROBE) - 1]
        query = dict(p.partition("=")[::2] for p in split.query.split("&"))
        scope = query.get("X-Amz-Credential", "").split("%2F")
        if not split.path.endswith("/" + _PROBE) or len(scope) != 5:
            raise BadAnswerError(f"unexpected pre-signed URL shape: {url}")
        host = split.netloc
        default = {"http": ":80", "https": ":443"}.get(split.scheme, "")
        if default and host.endswith(default):
            host = host[: -len(default)]
        base = f"{split.scheme}://{split.netloc}{path}"
        proxy = ProxyConfiguration().proxy_url_for(base + "/")
        self._target = _Target(base, path, host, scope[2], proxy)
        self._credentials = credentials
        if self._session is None:
            tls: ssl.SSLContext | bool = True  # (no TLS on an http endpoint)
            if split.scheme == "https":
                cafile = get_cert_path(ca_bundle or True)
                tls = await asyncio.to_thread(ssl.create_default_context, cafile=cafile)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool, ssl=tls),
                timeout=self._timeout,
                skip_auto_headers={"Content-Type", "User-Agent"},
                auto_decompress=False,
            )

    @property
    def bound(self) -> bool:
        return self._target is not None

    async def aclose(self) -> None:
        session, self._session = self._session, None
        self._target = None
        if session is not None:
            await session.close()

    # --- the four requests -----------------------------------------------------------

    async def get(self, key: str, limit: int, start: int = 0, end: int | None = None) -> bytes:
        """The object ``key`` (the bucket's full key), or bytes ``[start, end)`` of it.
        Raises ``ClientError`` (InvalidRange when ``start`` is at or past the end),
        :class:`BadAnswerError` when the answer claims more than ``limit`` bytes for a
        whole object (also the whole object a server that ignores Range sends), or
        more than the range for a part."""
        ranged = start > 0 or end is not None
        headers = {}
        part = limit  # the most a 206 may carry
        if ranged:
            headers["range"] = f"bytes={start}-{'' if end is None else end - 1}"
            if end is not None:
                part = min(limit, end - start)
        else:
            headers["x-amz-checksum-mode"] = "ENABLED"

        async def body(response: aiohttp.ClientResponse) -> bytes:
            if response.status == 200 and ranged:
                # A server that ignores Range answers with the whole object (bounded
                # like any whole object), of which the range is taken.
                return (await _read(response, limit))[start:end]
            data = await _read(response, part)
            if response.status == 200:
                _check_sum(response, data)
            return data

        return await self._send("GET", "GetObject", key, headers, b"", body)

    async def head(self, key: str) -> tuple[int, str]:
        """``(size, etag)`` of ``key``; ``ClientError`` with code ``404`` when missing."""

        async def meta(response: aiohttp.ClientResponse) -> tuple[int, str]:
            try:
                size = int(response.headers.get("Content-Length", ""))
            except ValueError:
                size = -1
            if size < 0:
                raise BadAnswerError(f"HEAD {key}: no valid Content-Length")
            return size, response.headers.get("ETag", "").strip('"')

        return await self._send("HEAD", "HeadObject", key, {}, b"", meta)

    async def put(self, key: str, data: bytes, *, if_none_match: bool) -> None:
        """PutObject; ``if_none_match`` sends ``If-None-Match: *`` (412 when present)."""
        headers = {"x-amz-checksum-crc32": _crc32(data)}
        if if_none_match:
            headers["if-none-match"] = "*"
        await self._send("PUT", "PutObject", key, headers, data, _drain)

    async def delete(self, key: str) -> None:
        await self._send("DELETE", "DeleteObject", key, {}, b"", _drain)

    # --- one request, its attempts -----------------------------------------------------

    async def _send(
        self,
        method: str,
        operation: str,
        key: str,
        extra: dict[str, str],
        body: bytes,
        answer: Callable[[aiohttp.ClientResponse], Awaitable[_T]],
    ) -> _T:
        target, session = self._target, self._session
        if target is None or session is None:
            raise BadAnswerError("S3 requests before bind()")  # a bug of the caller
        encoded = sigv4.encode_path(key)
        url = URL(f"{target.base}/{encoded}", encoded=True)
        uri = f"{target.path}/{encoded}"
        https = target.base.startswith("https:")
        # Over TLS the body is protected in transit and carries its CRC32: it is not
        # hashed for the signature (as botocore does); in clear it is.
        payload = (
            sigv4.EMPTY_SHA256 if not body
            else sigv4.UNSIGNED if https
            else hashlib.sha256(body).hexdigest()
        )  # fmt: skip
        attempt = 0
        while True:
            attempt += 1
            headers = await self._sign(method, uri, target, extra, payload)
            try:
                async with session.request(
                    method, url, headers=headers, data=body if method == "PUT" else None,
                    proxy=target.proxy,
                    allow_redirects=False,
                ) as response:  # fmt: skip
                    status = response.status
                    if status < 300:
                        return await answer(response)
                    region = response.headers.get("x-amz-bucket-region", target.region)
                    error = await _client_error(response, operation, method)
            except (aiohttp.ClientError, OSError):
                if attempt >= self._max_attempts:
                    raise
                await self._backoff(attempt)
                continue
            code = error.response["Error"]["Code"]
            # A HEAD has no body to name the error: a 400 with S3's region header tells.
            elsewhere = status == 400 and region != target.region
            if status in _REDIRECT_STATUSES or code in _REDIRECT_CODES or elsewhere:
                raise RedirectedError(f"{operation} {key}: {status} {code}") from error
            if (status in RETRY_STATUSES or code in RETRY_CODES) and attempt < self._max_attempts:
                await self._backoff(attempt)
                continue
            raise error

    async def _sign(self, method: str, uri: str, target: _Target, extra: dict[str, str],
                    payload: str) -> dict[str, str]:  # fmt: skip
        frozen = await self._credentials.get_frozen_credentials()
        now = int(self._clock())
        if self._date[0] != now:
            self._date = (now, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)))
        amz_date = self._date[1]
        headers = {"host": target.host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
        headers.update(extra)
        if frozen.token:
            headers["x-amz-security-token"] = frozen.token
        headers["authorization"] = sigv4.authorization(
            frozen.access_key, frozen.secret_key, target.region, "s3", amz_date, method, uri,
            "", headers, payload,
        )  # fmt: skip
        headers["accept-encoding"] = "identity"
        headers["user-agent"] = "lsmstore"
        return headers

    async def _backoff(self, attempt: int) -> None:
        await self._sleep(self._rand() * min(MAX_BACKOFF_S, 2.0 ** (attempt - 1)))


async def _drain(response: aiohttp.ClientResponse) -> None:
    await _read(response, ERROR_BODY_LIMIT)


async def _read(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body, refused (before reading) when it claims more than ``limit`` bytes."""
    claimed = response.content_length
    if claimed is not None:
        if claimed > limit:
            raise BadAnswerError(
                f"{response.method} {response.url.path}: the answer claims {claimed} bytes, "
                f"more than the {limit} expected"
            )
        data = await response.read()
        if len(data) != claimed:
            raise BadAnswerError(f"{response.url.path}: {len(data)} bytes, not {claimed}")
        return data
    parts: list[bytes] = []
    got = 0
    async for chunk in response.content.iter_any():
        got += len(chunk)
        if got > limit:
            raise BadAnswerError(
                f"{response.method} {response.url.path}: more than the {limit} bytes expected"
            )
        parts.append(chunk)
    return b"".join(parts)


def _check_sum(response: aiohttp.ClientResponse, data: bytes) -> None:
    """A whole object's checksum, when S3 sent one for it (not a multipart object's
    checksum of checksums, ``...-N``)."""
    for header, compute in CHECKSUMS.items():
        claimed = response.headers.get(header)
        if claimed and "-" not in claimed:
            if compute(data) != claimed:
                raise BadAnswerError(f"{response.url.path}: {header} does not match the body")
            return


async def _client_error(response: aiohttp.ClientResponse, operation: str,
                        method: str) -> ClientError:  # fmt: skip
    """S3's refusal as botocore raises it (a HEAD answer has no body: the status is
    the code, as botocore makes it)."""
    code, message = str(response.status), response.reason or ""
    if method != "HEAD":
        try:
            body = await _read(response, ERROR_BODY_LIMIT)
        except BadAnswerError:
            body = b""
        if m := _CODE.search(body):
            code = m.group(1).decode("utf-8", "replace")
        if m := _MESSAGE.search(body):
            message = m.group(1).decode("utf-8", "replace")
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": response.status},
        },
        operation,
    )
