"""``aws-chunked`` request bodies: SigV4's streaming form, decoded as they arrive.

Each chunk is ``<hex size>[;chunk-signature=<64 hex>]\\r\\n<bytes>\\r\\n``; a chunk of size
0 ends the data, then trailer lines (``x-amz-checksum-crc32:...``) and an empty line.
``x-amz-content-sha256`` names the form:

* ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``: every chunk is signed; its signature chains
  from the previous one (the first from the request's own signature) and is checked
  before the chunk's bytes are passed on (SignatureDoesNotMatch otherwise);
* ``STREAMING-UNSIGNED-PAYLOAD-TRAILER`` (what newer SDKs send, e.g. the C++ SDK under
  pyarrow): unsigned chunks and a trailing checksum.  The trailer is read and not
  checked (the upload's own MD5 is the object's ETag).

``STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`` (signed chunks and a signed trailer) is
not served (NotImplemented).  A chunk header longer than :data:`MAX_LINE` bytes or a
malformed frame is IncompleteBody; nothing is staged then (the upload fails).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass

from lsmstore.server.gateway.errors import S3Error, not_implemented

SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
MAX_LINE = 4096
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True, slots=True)
class ChunkSigner:
    """What a signed chunk's signature is computed from."""

    key: bytes  # the SigV4 signing key
    amz_date: str
    scope: str
    seed: str  # the request's signature

    def sign(self, previous: str, chunk: bytes) -> str:
        text = "\n".join(("AWS4-HMAC-SHA256-PAYLOAD", self.amz_date, self.scope, previous,
                          _EMPTY_SHA256, hashlib.sha256(chunk).hexdigest()))  # fmt: skip
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()


def is_streaming(payload_hash: str) -> bool:
    return payload_hash.startswith("STREAMING-")


class _Buffer:
    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self.source = source
        self.data = bytearray()
        self.done = False

    async def fill(self, n: int) -> bool:
        while len(self.data) < n and not self.done:
            chunk = await anext(self.source, None)
            if chunk is None:
                self.done = True
            else:
                self.data += chunk
        return len(self.data) >= n

    async def line(self) -> bytes:
        while True:
            i = self.data.find(b"\r\n")
            if i >= 0:
                out = bytes(self.data[:i])
                del self.data[: i + 2]
                return out
            if len(self.data) > MAX_LINE or self.done:
                raise S3Error("IncompleteBody", "malformed aws-chunked body")
            await self.fill(len(self.data) + 1)

    async def take(self, n: int) -> bytes:
        if not await self.fill(n):
            raise S3Error("IncompleteBody", "the aws-chunked body ended inside a chunk")
        out = bytes(self.data[:n])
        del self.data[:n]
        return out


async def decode(
    source: AsyncIterator[bytes], payload_hash: str, signer: ChunkSigner | None
) -> AsyncIterator[bytes]:
    """The data of an ``aws-chunked`` body (module docstring)."""
    if payload_hash == SIGNED_TRAILER:
        raise not_implemented("signed aws-chunked trailers")
    if payload_hash not in (SIGNED, UNSIGNED_TRAILER):
        raise S3Error("InvalidArgument", f"unknown x-amz-content-sha256 {payload_hash!r}")
    signed = payload_hash == SIGNED
    if signed and signer is None:
        raise S3Error("InvalidRequest", "signed chunks need a SigV4 Authorization header")
    buf = _Buffer(source)
    previous = signer.seed if signer is not None else ""
    while True:
        header = (await buf.line()).decode("latin-1")
        size_text, _, ext = header.partition(";")
        try:
            size = int(size_text.strip(), 16)
        except ValueError:
            raise S3Error("IncompleteBody", "malformed aws-chunked chunk size") from None
        if size < 0:
            raise S3Error("IncompleteBody", "malformed aws-chunked chunk size")
        data = await buf.take(size) if size else b""
        if signed:
            name, _, sig = ext.partition("=")
            assert signer is not None
            want = signer.sign(previous, data)
            if name.strip() != "chunk-signature" or not hmac.compare_digest(want, sig.strip()):
                raise S3Error("SignatureDoesNotMatch", "a chunk's signature does not match")
            previous = want
        if size == 0:
            break
        if await buf.take(2) != b"\r\n":
            raise S3Error("IncompleteBody", "an aws-chunked chunk lacks its CRLF")
        yield data
    # The trailer (checksums) up to an empty line; a signed body ends with CRLF.
    while await buf.line():
        pass
