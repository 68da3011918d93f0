"""AWS Signature Version 4 (``AWS4-HMAC-SHA256``): the one computation both sides share.

A signature is an HMAC chain over a canonical form of the request: the canonical
request (method, URI-encoded path, sorted query, the signed headers with their values,
the payload's SHA-256 or ``UNSIGNED-PAYLOAD``), hashed into a string to sign with the
time and the credential scope (``date/region/service/aws4_request``), signed with a key
derived from the secret and that scope.

The S3 gateway checks requests with it (:mod:`lsmstore.server.gateway.sigv4` parses
what a client claims and compares); the S3 object store signs its own requests with
:func:`authorization` (:mod:`lsmstore.storage.s3direct`).  Pure functions: the time
is always given by the caller.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from urllib.parse import parse_qsl, quote, unquote

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED = "UNSIGNED-PAYLOAD"
#: SHA-256 of no bytes: the payload hash of a request without a body.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
#: Signing keys kept (one per secret, day, region and service in use).
SIGNING_KEYS = 256
_SPACES = re.compile(r"\s+")


@functools.lru_cache(maxsize=SIGNING_KEYS)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The SigV4 signing key (four HMACs, a third of a signature's time), kept for
    the last :data:`SIGNING_KEYS` ``(secret, date, region, service)``: keyed by the
    secret itself, valid for its scope's day, and never deciding anything -- a server
    looks the secret up (and refuses a deleted key) before a key is derived."""
    k = hmac.new(("AWS4" + secret).encode("utf-8"), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def encode_path(path: str) -> str:
    """A path as S3 signs and receives it: every byte but unreserved ones and ``/``
    percent-encoded, once (S3 does not double-encode)."""
    return quote(path, safe="/~", errors="surrogateescape")


def canonical_uri(raw_path: bytes) -> str:
    """The canonical URI of a path as received (decoded once, then encoded)."""
    return encode_path(unquote(raw_path.decode("latin-1"), errors="surrogateescape"))


def canonical_query(raw_query: bytes, drop: str | None = None) -> str:
    """The sorted, encoded query string without the parameter ``drop`` (a pre-signed
    URL's own signature)."""
    pairs = parse_qsl(raw_query.decode("latin-1"), keep_blank_values=True)
    enc = [(quote(k, safe="~"), quote(v, safe="~")) for k, v in pairs if k != drop]
    return "&".join(f"{k}={v}" for k, v in sorted(enc))


def canonical_request(method: str, uri: str, query: str, headers: Mapping[str, str],
                      signed_headers: Sequence[str], payload_hash: str) -> str:  # fmt: skip
    """``headers`` maps lower-case names to values; ``signed_headers`` names the ones
    signed, in order (sorted, as every client sends them)."""
    canon_headers = "".join(
        f"{n}:{_SPACES.sub(' ', headers.get(n, '').strip())}\n" for n in signed_headers
    )
    return "\n".join((method, uri, query, canon_headers, ";".join(signed_headers), payload_hash))


def signature(secret: str, amz_date: str, region: str, service: str, canonical: str) -> str:
    """The hex signature of a canonical request made at ``amz_date``
    (``YYYYMMDDTHHMMSSZ``) in the scope of its day, ``region`` and ``service``."""
    date = amz_date[:8]
    to_sign = "\n".join((
        ALGORITHM,
        amz_date,
        f"{date}/{region}/{service}/aws4_request",
        hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
    ))  # fmt: skip
    key = signing_key(secret, date, region, service)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def authorization(access_key: str, secret: str, region: str, service: str, amz_date: str,
                  method: str, uri: str, query: str, headers: Mapping[str, str],
                  payload_hash: str) -> str:  # fmt: skip
    """The ``Authorization`` header of a request signing every header in ``headers``
    (lower-case names; ``host`` and ``x-amz-date`` among them).  ``uri`` is already
    encoded (:func:`encode_path`), ``query`` canonical."""
    names = sorted(headers)
    canonical = canonical_request(method, uri, query, headers, names, payload_hash)
    sig = signature(secret, amz_date, region, service, canonical)
    return (
        f"{ALGORITHM} Credential={access_key}/{amz_date[:8]}/{region}/{service}/aws4_request, "
        f"SignedHeaders={';'.join(names)}, Signature={sig}"
    )
