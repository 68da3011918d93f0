"""aws-chunked bodies: the decoder against AWS's published example of signed chunks,
and a signed streaming PUT against a real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from helpers.server import make_repo

from lsmstore.server.gateway.chunked import SIGNED, UNSIGNED_TRAILER, ChunkSigner, decode
from lsmstore.server.gateway.errors import S3Error
from lsmstore.server.gateway.sigv4 import signing_key
from lsmstore.testing.server_process import ServerProcess

# AWS's example ("Signature Calculations ... Chunked Upload", Example: PUT Object):
# 65 KiB of "a" in a 64 KiB and a 1 KiB chunk, and the signatures it documents.
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
SIGS = (
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
)
EXAMPLE_SIGNER = ChunkSigner(
    signing_key(SECRET, "20130524", "us-east-1", "s3"), "20130524T000000Z",
    "20130524/us-east-1/s3/aws4_request", SEED,
)  # fmt: skip


def example_body(sigs: tuple[str, ...] = SIGS) -> bytes:
    return (
        f"10000;chunk-signature={sigs[0]}\r\n".encode() + b"a" * 65536 + b"\r\n"
        + f"400;chunk-signature={sigs[1]}\r\n".encode() + b"a" * 1024 + b"\r\n"
        + f"0;chunk-signature={sigs[2]}\r\n\r\n".encode()
    )  # fmt: skip


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def decoded(data: bytes, form: str, signer: ChunkSigner | None, size: int = 777) -> bytes:
    return b"".join([c async for c in decode(pieces(data, size), form, signer)])


def test_signed_chunks_of_the_aws_example_decode() -> None:
    assert asyncio.run(decoded(example_body(), SIGNED, EXAMPLE_SIGNER)) == b"a" * 66560


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_wrong_chunk_signature_is_refused(which: int) -> None:
    sigs = list(SIGS)
    sigs[which] = "0" * 64
    with pytest.raises(S3Error) as e:
        asyncio.run(decoded(example_body(tuple(sigs)), SIGNED, EXAMPLE_SIGNER))
    assert e.value.code == "SignatureDoesNotMatch"


def test_tampered_data_is_refused() -> None:
    body = example_body().replace(b"a" * 1024, b"a" * 1023 + b"b")
    with pytest.raises(S3Error) as e:
        asyncio.run(decoded(body, SIGNED, EXAMPLE_SIGNER))
    assert e.value.code == "SignatureDoesNotMatch"


def test_unsigned_trailer_form_and_malformed_frames() -> None:
    body = b"5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n"
    assert asyncio.run(decoded(body, UNSIGNED_TRAILER, None, size=3)) == b"hello world"
    for bad in (b"zz\r\nhello\r\n", b"5\r\nhel", b"5\r\nhelloXX0\r\n\r\n"):
        with pytest.raises(S3Error) as e:
            asyncio.run(decoded(bad, UNSIGNED_TRAILER, None))
        assert e.value.code == "IncompleteBody"


def test_signed_streaming_put_through_the_server(
    server: ServerProcess, admin: httpx.Client
) -> None:
    repo = make_repo(admin)
    url = f"{server.url}/{repo}/main/streamed.bin"
    data = [b"x" * 9000, b"y" * 100]
    headers = {
        "x-amz-content-sha256": SIGNED,
        "content-encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(sum(map(len, data))),
    }
    creds = Credentials(server.admin[0], server.admin[1])
    req = AWSRequest(method="PUT", url=url, headers=headers)
    SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    auth = req.headers["Authorization"]
    amz_date = req.headers["X-Amz-Date"]
    seed = auth.rpartition("Signature=")[2]
    signer = ChunkSigner(
        signing_key(server.admin[1], amz_date[:8], "us-east-1", "s3"), amz_date,
        f"{amz_date[:8]}/us-east-1/s3/aws4_request", seed,
    )  # fmt: skip

    def body(tamper: bool) -> bytes:
        out, prev = b"", seed
        for chunk in [*data, b""]:
            sig = signer.sign(prev, chunk)
            sent = chunk.replace(b"y", b"z") if tamper else chunk
            out += f"{len(chunk):x};chunk-signature={sig}\r\n".encode() + sent + b"\r\n"
            prev = sig
        return out

    sent = dict(req.headers.items())
    r = httpx.put(url, content=body(tamper=False), headers=sent)
    assert r.status_code == 200, r.text
    got = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "streamed.bin"})
    assert got.content == b"".join(data)
    bad = httpx.put(url, content=body(tamper=True), headers=sent)
    assert bad.status_code == 403 and b"a chunk's signature does not match" in bad.content
    again = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "streamed.bin"})
    assert again.content == b"".join(data)  # the refused upload staged nothing
