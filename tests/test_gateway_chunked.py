"""aws-chunked bodies: the decoder against AWS's published examples of signed chunks and
signed trailers, signed streaming PUTs against a real server; SigV4 request dates."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import AsyncIterator

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from helpers.server import make_repo

from lsmstore.server.gateway.chunked import (
    SIGNED,
    SIGNED_TRAILER,
    UNSIGNED_TRAILER,
    ChunkSigner,
    decode,
)
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


# AWS's example of the signed-trailer form ("Signature calculations for trailing
# headers"): the same data, a CRC32C trailer and the signatures it documents.
TRAILER_SEED = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"
TRAILER_SIGS = (
    "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
    "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
    "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
)
TRAILER_SIG = "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"
TRAILER_SIGNER = ChunkSigner(
    EXAMPLE_SIGNER.key, EXAMPLE_SIGNER.amz_date, EXAMPLE_SIGNER.scope, TRAILER_SEED
)
CRC32C = "x-amz-checksum-crc32c"


def trailer_body(crc: str = "sOO8/Q==", trailer_sig: str = TRAILER_SIG) -> bytes:
    body = example_body(TRAILER_SIGS)[:-2]  # the final chunk without the empty line
    return body + f"{CRC32C}:{crc}\r\nx-amz-trailer-signature:{trailer_sig}\r\n\r\n".encode()


def example_body(sigs: tuple[str, ...] = SIGS) -> bytes:
    return (
        f"10000;chunk-signature={sigs[0]}\r\n".encode() + b"a" * 65536 + b"\r\n"
        + f"400;chunk-signature={sigs[1]}\r\n".encode() + b"a" * 1024 + b"\r\n"
        + f"0;chunk-signature={sigs[2]}\r\n\r\n".encode()
    )  # fmt: skip


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def decoded(
    data: bytes, form: str, signer: ChunkSigner | None, size: int = 777, announced: str = ""
) -> bytes:
    return b"".join([c async for c in decode(pieces(data, size), form, signer, announced)])


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


def test_signed_trailer_of_the_aws_example_decodes() -> None:
    got = asyncio.run(decoded(trailer_body(), SIGNED_TRAILER, TRAILER_SIGNER, announced=CRC32C))
    assert got == b"a" * 66560


@pytest.mark.parametrize(
    ("body", "announced", "code"),
    [
        (trailer_body(trailer_sig="0" * 64), CRC32C, "SignatureDoesNotMatch"),
        (trailer_body().replace(b"x-amz-trailer-signature", b"x-amz-other"), CRC32C,
         "SignatureDoesNotMatch"),
        # another checksum value: the trailer signature no longer matches it
        (trailer_body(crc="AAAAAA=="), CRC32C, "SignatureDoesNotMatch"),
        (trailer_body(), "", "InvalidRequest"),  # a checksum x-amz-trailer did not announce
        (trailer_body(), f"{CRC32C},x-amz-checksum-sha256", "InvalidRequest"),  # missing
    ],
)  # fmt: skip
def test_a_bad_signed_trailer_is_refused(body: bytes, announced: str, code: str) -> None:
    with pytest.raises(S3Error) as e:
        asyncio.run(decoded(body, SIGNED_TRAILER, TRAILER_SIGNER, announced=announced))
    assert e.value.code == code


def test_a_wrong_trailing_checksum_is_bad_digest() -> None:
    """The checksum is computed as the data streams (signed correctly, wrong value)."""
    sig = TRAILER_SIGNER.sign_trailer(TRAILER_SIGS[2], {CRC32C: "AAAAAA=="})
    with pytest.raises(S3Error) as e:
        asyncio.run(decoded(trailer_body(crc="AAAAAA==", trailer_sig=sig), SIGNED_TRAILER,
                            TRAILER_SIGNER, announced=CRC32C))  # fmt: skip
    assert e.value.code == "BadDigest"


def test_unsigned_trailer_form_and_malformed_frames() -> None:
    body = b"5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n"
    got = asyncio.run(
        decoded(body, UNSIGNED_TRAILER, None, size=3, announced="x-amz-checksum-crc32")
    )
    assert got == b"hello world"
    with pytest.raises(S3Error) as e:
        asyncio.run(decoded(body.replace(b"DUoRhQ", b"AAAAAA"), UNSIGNED_TRAILER, None,
                            announced="x-amz-checksum-crc32"))  # fmt: skip
    assert e.value.code == "BadDigest"
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


def test_signed_trailer_put_through_the_server(server: ServerProcess, admin: httpx.Client) -> None:
    """A hand-signed STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER PUT (botocore signs the
    request; its chunks and trailer are signed as AWS documents) with a SHA-256 trailer."""
    repo = make_repo(admin)
    data = [b"x" * 9000, b"y" * 100]
    whole = b"".join(data)
    headers = {
        "x-amz-content-sha256": SIGNED_TRAILER,
        "content-encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(whole)),
        "x-amz-trailer": "x-amz-checksum-sha256",
    }
    creds = Credentials(server.admin[0], server.admin[1])

    def put(name: str, checksum_of: bytes, trailer_sig: str | None = None) -> httpx.Response:
        url = f"{server.url}/{repo}/main/{name}"
        req = AWSRequest(method="PUT", url=url, headers=headers)
        SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
        amz_date = req.headers["X-Amz-Date"]
        seed = req.headers["Authorization"].rpartition("Signature=")[2]
        signer = ChunkSigner(
            signing_key(server.admin[1], amz_date[:8], "us-east-1", "s3"), amz_date,
            f"{amz_date[:8]}/us-east-1/s3/aws4_request", seed,
        )  # fmt: skip
        out, prev = b"", seed
        for chunk in [*data, b""]:
            sig = signer.sign(prev, chunk)
            out += f"{len(chunk):x};chunk-signature={sig}\r\n".encode() + chunk
            out += b"\r\n" if chunk else b""
            prev = sig
        value = base64.b64encode(hashlib.sha256(checksum_of).digest()).decode()
        sig = trailer_sig or signer.sign_trailer(prev, {"x-amz-checksum-sha256": value})
        out += f"x-amz-checksum-sha256:{value}\r\nx-amz-trailer-signature:{sig}\r\n\r\n".encode()
        return httpx.put(url, content=out, headers=dict(req.headers.items()))

    r = put("trailed.bin", whole)
    assert r.status_code == 200, r.text
    assert r.headers["etag"] == f'"{hashlib.md5(whole).hexdigest()}"'
    got = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "trailed.bin"})
    assert got.content == whole
    bad = put("other", b"not the data")
    assert bad.status_code == 400 and b"<Code>BadDigest</Code>" in bad.content
    forged = put("other", whole, "0" * 64)
    assert forged.status_code == 403 and b"SignatureDoesNotMatch" in forged.content
    missing = admin.get(f"/repositories/{repo}/refs/main/objects/stat", params={"path": "other"})
    assert missing.status_code == 404  # the refused uploads staged nothing


def test_request_dates_are_parsed_and_impossible_ones_refused() -> None:
    from calendar import timegm
    from time import strptime

    from lsmstore.server.gateway.sigv4 import request_time

    for good in ("20130524T000000Z", "20240229T235959Z", "19991231T120000Z"):
        assert request_time(good) == timegm(strptime(good, "%Y%m%dT%H%M%SZ"))
    for bad in ("20131324T000000Z", "20230229T000000Z", "20130500T000000Z",
                "20130524T240000Z", "20130524T006000Z"):  # fmt: skip
        with pytest.raises(S3Error) as e:
            request_time(bad)
        assert e.value.code == "AuthorizationHeaderMalformed"


def test_an_impossible_date_through_the_server(server: ServerProcess) -> None:
    """A request whose X-Amz-Date is impossible answers S3's XML error, not a 500."""
    url = f"{server.url}/x/main/y"
    req = AWSRequest(method="GET", url=url, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    SigV4Auth(Credentials(*server.admin), "s3", "us-east-1").add_auth(req)
    headers = dict(req.headers.items())
    date = headers["X-Amz-Date"]
    headers["X-Amz-Date"] = date[:4] + "13" + date[6:]
    auth = headers["Authorization"].replace(f"/{date[:8]}/", f"/{date[:4]}13{date[6:8]}/")
    headers["Authorization"] = auth
    r = httpx.get(url, headers=headers)
    assert r.status_code == 400 and b"<Code>AuthorizationHeaderMalformed</Code>" in r.content
