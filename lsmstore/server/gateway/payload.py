"""The body of an S3 write, checked as it streams: ``Content-MD5`` (BadDigest) and a
hex ``x-amz-content-sha256`` the signature covers (XAmzContentSHA256Mismatch).  The
check fails the stream at its end, so the upload it feeds stages nothing (the
operations layer deletes the data it wrote, docs/objects.md "Crashes")."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import AsyncIterator

from lsmstore.server.gateway.errors import S3Error

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def expected_md5(header: str | None) -> bytes | None:
    if header is None:
        return None
    try:
        digest = base64.b64decode(header.strip(), validate=True)
    except binascii.Error:
        digest = b""
    if len(digest) != 16:
        raise S3Error("InvalidDigest", "Content-MD5 is not the base64 of an MD5 digest")
    return digest


def needs_check(md5: bytes | None, sha256_hex: str) -> bool:
    return md5 is not None or bool(_HEX64.match(sha256_hex))


def verify(data: bytes, md5: bytes | None, sha256_hex: str) -> None:
    if md5 is not None and hashlib.md5(data).digest() != md5:
        raise S3Error("BadDigest", "the Content-MD5 you specified did not match what we received")
    if _HEX64.match(sha256_hex) and hashlib.sha256(data).hexdigest() != sha256_hex:
        raise S3Error("XAmzContentSHA256Mismatch",
                      "the x-amz-content-sha256 does not match the body")  # fmt: skip


async def checked(
    chunks: AsyncIterator[bytes], md5: bytes | None, sha256_hex: str
) -> AsyncIterator[bytes]:
    m = hashlib.md5() if md5 is not None else None
    h = hashlib.sha256() if _HEX64.match(sha256_hex) else None
    async for chunk in chunks:
        if m is not None:
            m.update(chunk)
        if h is not None:
            h.update(chunk)
        yield chunk
    if m is not None and m.digest() != md5:
        raise S3Error("BadDigest", "the Content-MD5 you specified did not match what we received")
    if h is not None and h.hexdigest() != sha256_hex:
        raise S3Error("XAmzContentSHA256Mismatch",
                      "the x-amz-content-sha256 does not match the body")  # fmt: skip
