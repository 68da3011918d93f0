"""AWS Signature Version 2, which older clients (and boto3's default presigned URLs)
still use: ``Authorization: AWS <key id>:<signature>`` or the query parameters
``AWSAccessKeyId``, ``Signature`` and ``Expires``.

The signature is base64(HMAC-SHA1(secret, string to sign)), the string being the
method, Content-MD5, Content-Type, the date (the ``Expires`` epoch for a URL; empty
when ``x-amz-date`` is sent), the ``x-amz-*`` headers sorted, and the resource: the
path as sent (``/<bucket>/`` for a bucket) plus the sub-resources S3 names, sorted.
A header-signed request must be within
:data:`~lsmstore.server.gateway.sigv4.MAX_SKEW_S` of the server's clock; a URL is
refused after its ``Expires``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qsl

from lsmstore.server.gateway.errors import S3Error
from lsmstore.server.gateway.sigv4 import MAX_PRESIGN_S, MAX_SKEW_S

#: Query parameters that are part of the signed resource.
SUBRESOURCES = frozenset({
    "acl", "delete", "lifecycle", "location", "logging", "notification", "partNumber",
    "policy", "requestPayment", "tagging", "torrent", "uploadId", "uploads", "versionId",
    "versioning", "versions", "website", "cors", "restore", "response-cache-control",
    "response-content-disposition", "response-content-encoding", "response-content-language",
    "response-content-type", "response-expires",
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Signed:
    key_id: str
    signature: str
    expires: int | None  # a URL's expiry (epoch seconds); None for a header


def parse(headers: dict[str, str], query: dict[str, str]) -> Signed | None:
    """The SigV2 claim of a request, or None when it carries none."""
    header = headers.get("authorization", "")
    if header.startswith("AWS "):
        key_id, sep, sig = header[4:].strip().rpartition(":")
        if not sep or not key_id or not sig:
            raise S3Error("AuthorizationHeaderMalformed", "malformed AWS signature header")
        return Signed(key_id, sig, None)
    if "AWSAccessKeyId" in query and "Signature" in query:
        try:
            expires = int(query.get("Expires", ""))
        except ValueError:
            raise S3Error("AuthorizationQueryParametersError",
                          "Expires must be epoch seconds") from None  # fmt: skip
        return Signed(query["AWSAccessKeyId"], query["Signature"], expires)
    return None


def check_time(s: Signed, headers: dict[str, str], now: float) -> None:
    if s.expires is not None:
        if now > s.expires:
            raise S3Error("AccessDenied", "Request has expired")
        if s.expires - now > MAX_PRESIGN_S:
            raise S3Error("AccessDenied", "Expires is too far in the future")
        return
    text = headers.get("x-amz-date") or headers.get("date") or ""
    try:
        at = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        raise S3Error("AccessDenied", "a SigV2 request needs a Date or x-amz-date") from None
    if abs(now - at) > MAX_SKEW_S:
        raise S3Error("RequestTimeTooSkewed",
                      "the difference between the request time and the server's time is "
                      "too large")  # fmt: skip


def string_to_sign(s: Signed, method: str, raw_path: bytes, raw_query: bytes,
                   headers: dict[str, str]) -> str:  # fmt: skip
    amz = sorted((k, " ".join(v.split())) for k, v in headers.items() if k.startswith("x-amz-"))
    if s.expires is not None:
        date = str(s.expires)
    else:
        date = "" if "x-amz-date" in headers else headers.get("date", "")
    subs = sorted(
        (k, v)
        for k, v in parse_qsl(raw_query.decode("latin-1"), keep_blank_values=True)
        if k in SUBRESOURCES
    )
    resource = raw_path.decode("latin-1")
    if resource.count("/") == 1 and resource != "/":
        resource += "/"  # a bucket's resource is "/<bucket>/", as S3 signs it
    if subs:
        resource += "?" + "&".join(f"{k}={v}" if v else k for k, v in subs)
    lines = [method, headers.get("content-md5", ""), headers.get("content-type", ""), date]
    return "\n".join(lines) + "\n" + "".join(f"{k}:{v}\n" for k, v in amz) + resource


def check(s: Signed, secret: str, method: str, raw_path: bytes, raw_query: bytes,
          headers: dict[str, str]) -> None:  # fmt: skip
    text = string_to_sign(s, method, raw_path, raw_query, headers)
    want = base64.b64encode(
        hmac.new(secret.encode("utf-8"), text.encode("utf-8"), hashlib.sha1).digest()
    ).decode()
    if not hmac.compare_digest(want, s.signature):
        raise S3Error(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your key and signing method.",
        )
