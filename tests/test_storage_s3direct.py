"""The S3 store's direct request path (lsmstore.storage.s3direct) where it differs from
botocore's: its signature, its retries (through the fault proxy in front of moto), the
bounds on what an answer claims, checksums, and the hand-over to botocore on a
redirect.  The object-store contract itself runs in test_storage_s3.py (moto) and
test_storage_seaweedfs.py (SeaweedFS, which checks every signature)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from lsmstore import sigv4
from lsmstore.errors import ObjectNotFoundError, UnavailableError
from lsmstore.storage.base import PutMode
from lsmstore.storage.s3 import S3Store
from lsmstore.storage.url import open_object_store
from lsmstore.testing.faultproxy import FaultPlan, FaultProxy, fault_proxy
from lsmstore.testing.servers import MOTO_ENV, MotoServer, new_bucket

FAST = {"connect_timeout": 2.0, "read_timeout": 2.0}


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in MOTO_ENV.items():  # signed requests even where no moto server runs
        monkeypatch.setenv(k, v)


def test_signature_is_aws_example() -> None:
    """AWS's published SigV4 example for S3 (GET Object with a Range header)."""
    headers = {
        "host": "examplebucket.s3.amazonaws.com",
        "range": "bytes=0-9",
        "x-amz-content-sha256": sigv4.EMPTY_SHA256,
        "x-amz-date": "20130524T000000Z",
    }
    auth = sigv4.authorization(
        "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1", "s3",
        "20130524T000000Z", "GET", "/test.txt", "", headers, sigv4.EMPTY_SHA256,
    )  # fmt: skip
    assert auth == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


def test_keys_are_encoded_once() -> None:
    assert sigv4.encode_path("/b/a b/é+~x") == "/b/a%20b/%C3%A9%2B~x"
    assert sigv4.canonical_uri(b"/b/a%20b/%C3%A9%2B~x") == "/b/a%20b/%C3%A9%2B~x"


@pytest.fixture
async def bucket(moto: MotoServer) -> str:
    return await new_bucket(moto.endpoint, "direct")


@pytest.fixture
async def proxy(moto: MotoServer) -> AsyncIterator[FaultProxy]:
    async with fault_proxy(moto.endpoint, seed=3) as p:
        yield p


async def test_odd_keys_round_trip(moto: MotoServer, bucket: str) -> None:
    """Keys that need encoding reach the same object on both paths."""
    keys = ["a b/c+d", "é/ü~", "x/%41", "q?x=1&y", "semi;colon,comma"]
    async with (
        S3Store(bucket, "p r", endpoint_url=moto.endpoint) as direct,
        S3Store(bucket, "p r", endpoint_url=moto.endpoint, direct=False) as botocore,
    ):
        for i, key in enumerate(keys):
            await direct.put(key, f"v{i}".encode())
            assert await botocore.get(key) == f"v{i}".encode()
            assert await direct.get(key) == f"v{i}".encode()
            assert (await direct.head(key)).size == 2
        assert sorted([m.key async for m in direct.list()]) == sorted(keys)
        for key in keys:
            await direct.delete(key, missing_ok=False)
            with pytest.raises(ObjectNotFoundError):
                await botocore.head(key)


async def test_slow_down_is_retried_up_to_max_attempts(proxy: FaultProxy, bucket: str) -> None:
    """503 SlowDown and reset connections are retried (back-off from the injected
    randomness: none here); ``max_attempts`` requests in all, then UnavailableError."""
    async with S3Store(
        bucket, "r", endpoint_url=proxy.endpoint, max_attempts=3, rand=lambda: 0.0, **FAST
    ) as store:
        await store.put("k", b"v")
        proxy.plan = FaultPlan(error=1.0)
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.get("k"), lambda: store.get_range("k", 0, 1),
            lambda: store.head("k"), lambda: store.put("k2", b"v"), lambda: store.delete("k"),
        ]  # fmt: skip
        for call in calls:
            before = proxy.counts["error"]
            with pytest.raises(UnavailableError):
                await call()
            assert proxy.counts["error"] - before == 3
        # A third of the requests fail (errors, resets): ten attempts get every call
        # through (the proxy's draws are seeded: the same run every time).
        proxy.plan = FaultPlan(error=0.2, reset_before=0.1)
        store_many = S3Store(
            bucket, "r", endpoint_url=proxy.endpoint, max_attempts=10, rand=lambda: 0.0, **FAST
        )
        async with store_many:
            for i in range(20):
                await store_many.put(f"m/{i}", b"x" * i, PutMode.OVERWRITE)
                assert await store_many.get(f"m/{i}") == b"x" * i
                assert (await store_many.head(f"m/{i}")).size == i
        assert proxy.counts["error"] > 15 + 5 and proxy.counts["reset_before"] > 0


@contextlib.asynccontextmanager
async def answering(
    answer: Callable[[bytes], bytes],
) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A loopback HTTP server that answers each request with ``answer(request head)``
    and closes: a misbehaving S3 endpoint.  Yields its URL and the request heads."""
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            seen.append(head)
            writer.write(answer(head))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen
    finally:
        server.close()


def _fixed(status: str, headers: dict[str, str], body: bytes = b"") -> Callable[[bytes], bytes]:
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return lambda head: f"HTTP/1.1 {status}\r\n{lines}\r\n".encode() + body


@pytest.mark.parametrize("direct", [True, False])
async def test_claimed_size_is_bounded_before_reading(direct: bool) -> None:
    """An answer claiming a terabyte for a whole object (beyond ``max_read``) or more
    than the range asked for is refused from its header: nothing that size is read."""
    huge = _fixed("200 OK", {"Content-Length": str(1 << 40)}, b"abc")
    async with (
        answering(huge) as (endpoint, _),
        S3Store(
            "bucket", endpoint_url=endpoint, max_attempts=1, max_read=1 << 20, direct=direct, **FAST
        ) as store,  # fmt: skip
    ):
        with pytest.raises(UnavailableError, match="claims 1099511627776 bytes"):
            await store.get("k")
    ranged = _fixed("206 Partial Content", {"Content-Length": "100"}, b"x" * 100)
    async with (
        answering(ranged) as (endpoint, _),
        S3Store("bucket", endpoint_url=endpoint, max_attempts=1, direct=direct, **FAST) as store,
    ):
        with pytest.raises(UnavailableError, match="claims 100 bytes, more than the 10"):
            await store.get_range("k", 0, 10)


async def test_unframed_body_is_bounded_while_read() -> None:
    """A body without Content-Length (read to the close) stops at the bound."""
    endless = _fixed("206 Partial Content", {"Connection": "close"}, b"y" * 100_000)
    async with (
        answering(endless) as (endpoint, _),
        S3Store("bucket", endpoint_url=endpoint, max_attempts=1, **FAST) as store,
    ):
        with pytest.raises(UnavailableError, match="more than the 10 bytes expected"):
            await store.get_range("k", 0, 10)


async def test_checksum_mismatch_is_refused() -> None:
    body = b"not what was stored"
    wrong = _fixed(
        "200 OK", {"Content-Length": str(len(body)), "x-amz-checksum-crc32": "AAAAAA=="}, body
    )
    async with (
        answering(wrong) as (endpoint, seen),
        S3Store("bucket", endpoint_url=endpoint, max_attempts=1, **FAST) as store,
    ):
        with pytest.raises(UnavailableError, match="x-amz-checksum-crc32 does not match"):
            await store.get("k")
    assert b"x-amz-checksum-mode: ENABLED" in seen[0]


async def test_head_without_a_size_is_refused() -> None:
    nothing = _fixed("200 OK", {"ETag": '"abc"', "Connection": "close"})
    async with (
        answering(nothing) as (endpoint, _),
        S3Store("bucket", endpoint_url=endpoint, max_attempts=1, **FAST) as store,
    ):
        with pytest.raises(UnavailableError, match="no valid Content-Length"):
            await store.head("k")


async def test_redirect_hands_over_to_botocore() -> None:
    """A 301 (the bucket is in another region) makes the store send this and later
    requests through botocore, which follows S3's redirects."""
    body = b"<Error><Code>PermanentRedirect</Code><Message>elsewhere</Message></Error>"
    moved = _fixed(
        "301 Moved Permanently",
        {"Content-Length": str(len(body)), "Content-Type": "application/xml"},
        body,
    )
    async with (
        answering(moved) as (endpoint, seen),
        S3Store("bucket", endpoint_url=endpoint, max_attempts=1, **FAST) as store,
    ):
        with pytest.raises(UnavailableError):
            await store.get("k")
        assert b"user-agent: lsmstore" in seen[0].lower()
        assert all(b"botocore" in head.lower() for head in seen[1:]) and len(seen) > 1
        assert store._direct is None


def test_url_options() -> None:
    store = open_object_store("s3://bkt/p?direct=false&max_read=1000")
    assert isinstance(store, S3Store) and store._direct is None and store.max_read == 1000
    assert isinstance(open_object_store("s3://bkt/p"), S3Store)


async def test_a_server_ignoring_range_gives_the_range() -> None:
    """A 200 with the whole object to a ranged GET (a server that ignores Range): the
    range is taken from it, the whole bounded like any whole object."""
    whole = bytes(range(100))
    ignoring = _fixed("200 OK", {"Content-Length": str(len(whole))}, whole)
    async with (
        answering(ignoring) as (endpoint, seen),
        S3Store("bucket", endpoint_url=endpoint, max_attempts=1, **FAST) as store,
    ):
        assert await store.get_range("k", 5, 10) == whole[5:10]
    assert b"range: bytes=5-9" in seen[0].lower()


async def test_a_head_in_another_region_hands_over_to_botocore() -> None:
    """A HEAD answered 400 with S3's region header naming another region (no body to
    say PermanentRedirect) moves the store to botocore, as a 301 does."""
    elsewhere = _fixed(
        "400 Bad Request", {"x-amz-bucket-region": "eu-west-3", "Content-Length": "0"}
    )
    async with (
        answering(elsewhere) as (endpoint, seen),
        S3Store("bucket", endpoint_url=endpoint, max_attempts=1, **FAST) as store,
    ):
        with pytest.raises(UnavailableError):
            await store.head("k")
        assert store._direct is None
        assert any(b"botocore" in head.lower() for head in seen[1:])
