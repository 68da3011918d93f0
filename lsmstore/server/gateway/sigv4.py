"""AWS Signature Version 4 as S3 checks it: in the ``Authorization`` header or in a
presigned URL's query (``X-Amz-Algorithm=AWS4-HMAC-SHA256``).

The server rebuilds the canonical request from what it received -- method, the path
URI-encoded once per segment (S3 does not double-encode), the sorted query, the signed
headers, the payload hash the client declared (``x-amz-content-sha256``, or
``UNSIGNED-PAYLOAD``) -- derives the signing key from the key's secret, date, region and
service, and compares signatures in constant time.  The request's time must be within
:data:`MAX_SKEW_S` of the server's clock; a presigned URL also expires after its
``X-Amz-Expires`` (at most 7 days, as S3).  A declared payload hash is checked against
the body as it streams (:mod:`lsmstore.server.gateway.payload`).  The canonical form
and the signature itself are :mod:`lsmstore.sigv4`, which the S3 object store signs
its requests with.
"""

from __future__ import annotations

import hmac
import re
from calendar import monthrange, timegm
from dataclasses import dataclass, replace

from lsmstore.server.gateway.errors import S3Error
from lsmstore.sigv4 import ALGORITHM as ALGORITHM
from lsmstore.sigv4 import UNSIGNED as UNSIGNED
from lsmstore.sigv4 import canonical_query, canonical_request, canonical_uri
from lsmstore.sigv4 import signature as _signature
from lsmstore.sigv4 import signing_key as signing_key

MAX_SKEW_S = 15 * 60
MAX_PRESIGN_S = 7 * 24 * 3600
_CRED = re.compile(r"^([^/]{1,128})/(\d{8})/([^/]{1,64})/([^/]{1,32})/aws4_request$")


@dataclass(frozen=True, slots=True)
class Signed:
    """A request's claimed signature, before the secret is known."""

    key_id: str
    date: str  # YYYYMMDD of the scope
    region: str
    service: str
    amz_date: str  # YYYYMMDDTHHMMSSZ
    signed_headers: tuple[str, ...]
    signature: str
    payload_hash: str
    presigned: bool
    expires_s: int = 0


def parse_header(value: str, headers: dict[str, str]) -> Signed:
    """The parts of an ``AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...``
    header; AuthorizationHeaderMalformed otherwise."""
    fields: dict[str, str] = {}
    for part in value[len(ALGORITHM) :].split(","):
        k, eq, v = part.strip().partition("=")
        if eq:
            fields[k] = v
    amz_date = headers.get("x-amz-date") or ""
    payload = headers.get("x-amz-content-sha256") or ""
    return _signed(fields.get("Credential", ""), fields.get("SignedHeaders", ""),
                   fields.get("Signature", ""), amz_date, payload, presigned=False)  # fmt: skip


def parse_query(query: dict[str, str]) -> Signed:
    if query.get("X-Amz-Algorithm") != ALGORITHM:
        raise S3Error("AuthorizationQueryParametersError", "X-Amz-Algorithm must be "
                      + ALGORITHM)  # fmt: skip
    try:
        expires = int(query.get("X-Amz-Expires", ""))
    except ValueError:
        raise S3Error("AuthorizationQueryParametersError",
                      "X-Amz-Expires must be a number of seconds") from None  # fmt: skip
    if not 0 < expires <= MAX_PRESIGN_S:
        raise S3Error("AuthorizationQueryParametersError",
                      f"X-Amz-Expires must be 1..{MAX_PRESIGN_S} seconds")  # fmt: skip
    s = _signed(query.get("X-Amz-Credential", ""), query.get("X-Amz-SignedHeaders", ""),
                query.get("X-Amz-Signature", ""), query.get("X-Amz-Date", ""), UNSIGNED,
                presigned=True)  # fmt: skip
    return replace(s, expires_s=expires)


def _signed(credential: str, signed_headers: str, signature: str, amz_date: str,
            payload: str, *, presigned: bool) -> Signed:  # fmt: skip
    m = _CRED.match(credential)
    if m is None or not signed_headers or not re.fullmatch(r"[0-9a-f]{64}", signature):
        raise S3Error("AuthorizationHeaderMalformed", "malformed AWS4-HMAC-SHA256 credentials")
    if not re.fullmatch(r"\d{8}T\d{6}Z", amz_date) or amz_date[:8] != m.group(2):
        raise S3Error("AuthorizationHeaderMalformed",
                      "X-Amz-Date is missing or does not match the credential's date")  # fmt: skip
    if not payload:
        raise S3Error("InvalidRequest", "missing x-amz-content-sha256")
    names = tuple(signed_headers.split(";"))
    if "host" not in names:
        raise S3Error("AuthorizationHeaderMalformed", "the host header must be signed")
    return Signed(m.group(1), m.group(2), m.group(3), m.group(4), amz_date, names, signature,
                  payload, presigned)  # fmt: skip


def request_time(amz_date: str) -> int:
    """Seconds since the epoch of a ``YYYYMMDDTHHMMSSZ`` date (its digits checked by
    :func:`_signed`); AuthorizationHeaderMalformed for an impossible one.  Parsed by
    hand: ``strptime`` was a visible share of a small PUT's time."""
    d = amz_date
    year, month, day = int(d[0:4]), int(d[4:6]), int(d[6:8])
    hour, minute, second = int(d[9:11]), int(d[11:13]), int(d[13:15])
    if not (1 <= month <= 12 and 1 <= day <= monthrange(year, month)[1] and hour < 24
            and minute < 60 and second < 61):  # fmt: skip
        raise S3Error("AuthorizationHeaderMalformed", f"invalid X-Amz-Date {amz_date!r}")
    return timegm((year, month, day, hour, minute, second))


def check_time(s: Signed, now: float) -> None:
    """RequestTimeTooSkewed / AccessDenied (expired) by the server's clock ``now``."""
    at = request_time(s.amz_date)
    if s.presigned:
        if now > at + s.expires_s:
            raise S3Error("AccessDenied", "Request has expired")
        if at - now > MAX_SKEW_S:
            raise S3Error("AccessDenied", "Request is not valid yet")
    elif abs(now - at) > MAX_SKEW_S:
        raise S3Error("RequestTimeTooSkewed",
                      "the difference between the request time and the server's time is "
                      "too large")  # fmt: skip


def signature(s: Signed, secret: str, method: str, raw_path: bytes, raw_query: bytes,
              headers: dict[str, str]) -> str:  # fmt: skip
    """The signature of the request as the server received it (its scope's date is
    X-Amz-Date's day: :func:`_signed` checks that)."""
    canonical = canonical_request(
        method,
        canonical_uri(raw_path),
        canonical_query(raw_query, "X-Amz-Signature" if s.presigned else None),
        headers,
        s.signed_headers,
        s.payload_hash,
    )
    return _signature(secret, s.amz_date, s.region, s.service, canonical)


def check(s: Signed, secret: str, method: str, raw_path: bytes, raw_query: bytes,
          headers: dict[str, str]) -> None:  # fmt: skip
    want = signature(s, secret, method, raw_path, raw_query, headers)
    if not hmac.compare_digest(want, s.signature):
        raise S3Error(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your key and signing method.",
        )
