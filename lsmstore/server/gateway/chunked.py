"""``aws-chunked`` request bodies: SigV4's streaming form, decoded as they arrive.

Each chunk is ``<hex size>[;chunk-signature=<64 hex>]\\r\\n<bytes>\\r\\n``; a chunk of size
0 ends the data, then trailer lines (``x-amz-checksum-crc32:...``) and an empty line.
``x-amz-content-sha256`` names the form:

* ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``: every chunk is signed; its signature chains
  from the previous one (the first from the request's own signature) and is checked
  before the chunk's bytes are passed on (SignatureDoesNotMatch otherwise);
* ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER``: signed chunks as above, then the
  trailer, signed by ``x-amz-trailer-signature``: HMAC of ``AWS4-HMAC-SHA256-TRAILER``,
  the request's date and scope, the final (empty) chunk's signature and the SHA-256 of
  the trailer lines as ``name:value\\n`` (names lower-case, sorted); a missing or wrong
  one is SignatureDoesNotMatch;
* ``STREAMING-UNSIGNED-PAYLOAD-TRAILER`` (what newer SDKs send, e.g. the C++ SDK under
  pyarrow): unsigned chunks and a trailing checksum.

Trailing checksums: the checksum the request's ``x-amz-trailer`` header announces
(``x-amz-checksum-crc32``, ``-crc32c``, ``-sha1``, ``-sha256``) is computed as the data
streams and compared with the trailer's value (BadDigest); ``-crc64nvme`` is read and
not checked (no implementation here).  A checksum trailer the header did not announce,
or an announced one that does not arrive, is InvalidRequest.  Every error is raised
before the generator ends, so the upload reading it fails and nothing is staged.  A
chunk header or trailer line longer than :data:`MAX_LINE` bytes or a malformed frame is
IncompleteBody.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import google_crc32c

from lsmstore.server.gateway.errors import S3Error

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

    def sign_trailer(self, previous: str, trailers: dict[str, str]) -> str:
        """The signature of the trailer lines ``trailers`` after the final chunk's."""
        canonical = "".join(f"{k}:{v}\n" for k, v in sorted(trailers.items()))
        text = "\n".join(("AWS4-HMAC-SHA256-TRAILER", self.amz_date, self.scope, previous,
                          hashlib.sha256(canonical.encode()).hexdigest()))  # fmt: skip
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()


class _Crc:
    """A CRC as a digest: ``update`` / ``digest`` (4 bytes, big-endian)."""

    def __init__(self, extend: Callable[[int, bytes], int]) -> None:
        self.extend = extend
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = self.extend(self.value, data)

    def digest(self) -> bytes:
        return (self.value & 0xFFFFFFFF).to_bytes(4, "big")


def _digest(name: str) -> _Crc | hashlib._Hash | None:
    """The running checksum of trailer ``x-amz-checksum-<name>``; None: not checked."""
    if name == "crc32":
        return _Crc(lambda crc, data: zlib.crc32(data, crc))
    if name == "crc32c":
        return _Crc(google_crc32c.extend)
    if name in ("sha1", "sha256"):
        return hashlib.new(name)
    return None


CHECKSUM = "x-amz-checksum-"
TRAILER_SIGNATURE = "x-amz-trailer-signature"


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
    source: AsyncIterator[bytes], payload_hash: str, signer: ChunkSigner | None,
    announced: str = "",
) -> AsyncIterator[bytes]:  # fmt: skip
    """The data of an ``aws-chunked`` body (module docstring); ``announced``: the
    request's ``x-amz-trailer`` header."""
    if payload_hash not in (SIGNED, SIGNED_TRAILER, UNSIGNED_TRAILER):
        raise S3Error("InvalidArgument", f"unknown x-amz-content-sha256 {payload_hash!r}")
    signed = payload_hash != UNSIGNED_TRAILER
    if signed and signer is None:
        raise S3Error("InvalidRequest", "signed chunks need a SigV4 Authorization header")
    expected = {n.strip().lower() for n in announced.split(",") if n.strip()}
    digests = {n: d for n in expected if n.startswith(CHECKSUM)
               and (d := _digest(n[len(CHECKSUM) :])) is not None}  # fmt: skip
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
        for d in digests.values():
            d.update(data)
        yield data
    # The trailer (checksums, its signature) up to an empty line; a signed body without
    # a trailer ends with that empty line alone.
    trailers: dict[str, str] = {}
    while line := (await buf.line()).decode("latin-1"):
        name, colon, value = line.partition(":")
        if not colon:
            raise S3Error("IncompleteBody", "malformed aws-chunked trailer line")
        trailers[name.strip().lower()] = value.strip()
    trailer_sig = trailers.pop(TRAILER_SIGNATURE, None)
    if payload_hash == SIGNED_TRAILER:
        assert signer is not None
        want = signer.sign_trailer(previous, trailers)
        if trailer_sig is None or not hmac.compare_digest(want, trailer_sig):
            raise S3Error("SignatureDoesNotMatch", "the trailer's signature does not match")
    for name in trailers:
        if name.startswith(CHECKSUM) and name not in expected:
            raise S3Error("InvalidRequest", f"trailer {name} not announced by x-amz-trailer")
    for name in expected:
        if name not in trailers:
            raise S3Error("InvalidRequest", f"the announced trailer {name} did not arrive")
    for name, d in digests.items():
        try:
            claimed = base64.b64decode(trailers[name], validate=True)
        except ValueError:
            claimed = b""
        if not hmac.compare_digest(claimed, d.digest()):
            raise S3Error("BadDigest", f"the {name} you specified did not match the "
                          "calculated checksum")  # fmt: skip
