"""S3Store against moto's S3 server over real HTTP: the shared contract plus failures."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator

import pytest
from aiobotocore.session import get_session

from lsmstore.errors import (
    InvalidInputError,
    ObjectExistsError,
    ObjectNotFoundError,
    UnavailableError,
)
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.storage.s3 import MIN_PART_SIZE, S3Store
from lsmstore.testing.servers import MotoServer, free_port, new_bucket
from lsmstore.testing.store_contract import StoreContract, aiter_of, collect

FAST_FAIL = {"max_attempts": 1, "connect_timeout": 0.5, "read_timeout": 0.5}


_session = get_session()


@pytest.fixture
async def bucket(moto: MotoServer) -> str:
    return await new_bucket(moto.endpoint)


class TestS3Store(StoreContract):
    # Every key costs a PUT to moto (~5 ms of its CPU): page by 100 keys so that a few
    # hundred keys cross pages (ContinuationToken) as 1100 keys would at S3's 1000.
    MANY = 250
    PRESIGNS = True
    # Two parts of the smallest size S3 accepts and a short last one: a multipart upload.
    STREAM_SIZE = 2 * MIN_PART_SIZE + 1000

    @pytest.fixture
    async def store(self, moto: MotoServer, bucket: str) -> AsyncIterator[ObjectStore]:
        # An object beside the prefix must stay invisible to the store.
        async with S3Store(bucket, endpoint_url=moto.endpoint) as outside:
            await outside.put("ns/repo1-sibling", b"not mine")
            await outside.put("a", b"not mine")
        async with S3Store(
            bucket, "ns/repo1", endpoint_url=moto.endpoint, page_size=100, part_size=MIN_PART_SIZE
        ) as s:
            yield s
        # Nothing a test did leaves an incomplete multipart upload behind.
        async with _session.create_client(
            "s3", endpoint_url=moto.endpoint, region_name="us-east-1"
        ) as client:
            uploads = await client.list_multipart_uploads(Bucket=bucket)
        assert uploads.get("Uploads", []) == []


class TestS3StoreThroughBotocore(TestS3Store):
    """The same contract with every request through botocore (``direct=False``, and
    where a store lands after a redirect)."""

    @pytest.fixture
    async def store(self, moto: MotoServer, bucket: str) -> AsyncIterator[ObjectStore]:
        async with S3Store(
            bucket, "ns/repo1", endpoint_url=moto.endpoint, page_size=100,
            part_size=MIN_PART_SIZE, direct=False,
        ) as s:  # fmt: skip
            yield s


async def test_streamed_put_is_multipart_past_the_part_size(moto: MotoServer, bucket: str) -> None:
    """A streamed object of three parts gets S3's multipart ETag, which the store
    predicts; one within a part is a single PutObject (its ETag is the MD5)."""
    import hashlib

    data = os.urandom(2 * MIN_PART_SIZE + 5)
    async with S3Store(bucket, endpoint_url=moto.endpoint, part_size=MIN_PART_SIZE) as s:
        meta = await s.put_stream("big", aiter_of([data[:100], data[100:]]))
        head = await s.head("big")
        assert meta.etag == head.etag and head.etag is not None and head.etag.endswith("-3")
        md5s = b"".join(
            hashlib.md5(data[i : i + MIN_PART_SIZE]).digest()
            for i in range(0, len(data), MIN_PART_SIZE)
        )
        assert head.etag == hashlib.md5(md5s).hexdigest() + "-3"
        small = await s.put_stream("small", aiter_of([b"abc"]))
        assert small.etag == (await s.head("small")).etag == hashlib.md5(b"abc").hexdigest()
        assert b"".join([c async for c in s.get_stream("big", chunk_size=1 << 20)]) == data


async def test_part_size_bounds() -> None:
    for bad in (MIN_PART_SIZE - 1, (5 << 30) + 1):
        with pytest.raises(InvalidInputError):
            S3Store("bucket", part_size=bad)
    for bad in (0, 65):
        with pytest.raises(InvalidInputError):
            S3Store("bucket", part_concurrency=bad)


@pytest.mark.parametrize("concurrency", [1, 2])
async def test_parts_go_part_concurrency_at_a_time(
    moto: MotoServer, bucket: str, concurrency: int
) -> None:
    """A streamed upload keeps up to ``part_concurrency`` UploadParts in flight (never
    more), and the object is still the parts in order with S3's multipart ETag."""
    import hashlib

    data = os.urandom(5 * MIN_PART_SIZE + 7)
    in_flight = 0
    most = 0

    def started(**_: object) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)

    def ended(**_: object) -> None:
        nonlocal in_flight
        in_flight -= 1

    async with S3Store(
        bucket, endpoint_url=moto.endpoint, part_size=MIN_PART_SIZE, part_concurrency=concurrency
    ) as s:
        client = await s._connect()
        client.meta.events.register("before-call.s3.UploadPart", started)
        client.meta.events.register("after-call.s3.UploadPart", ended)
        chunks = [data[i : i + 1_000_000] for i in range(0, len(data), 1_000_000)]
        meta = await s.put_stream("big", aiter_of(chunks))
        assert most == concurrency and in_flight == 0
        md5s = b"".join(
            hashlib.md5(data[i : i + MIN_PART_SIZE]).digest()
            for i in range(0, len(data), MIN_PART_SIZE)
        )
        assert meta.etag == (await s.head("big")).etag == hashlib.md5(md5s).hexdigest() + "-6"
        assert await s.get("big") == data


async def test_prefix_maps_keys(moto: MotoServer, bucket: str) -> None:
    async with (
        S3Store(bucket, "/ns/", endpoint_url=moto.endpoint) as inner,
        S3Store(bucket, endpoint_url=moto.endpoint) as root,
    ):
        assert inner.url == f"s3://{bucket}/ns" and root.url == f"s3://{bucket}/"
        await inner.put("k/1", b"v")
        assert await root.get("ns/k/1") == b"v"
        assert [(m.key, m.size) async for m in root.list()] == [("ns/k/1", 1)]
        meta = await inner.head("k/1")
        assert meta.etag == "9e3669d19b675bd57058fd4664205d2a"  # MD5 of b"v"


async def test_open_creates_the_client_once(moto: MotoServer, bucket: str) -> None:
    store = await S3Store(bucket, endpoint_url=moto.endpoint).open()
    client = store._client
    await asyncio.gather(*(store.put(f"k{i}", b"") for i in range(10)))
    assert store._client is client
    await store.aclose()
    assert store._client is None


async def test_missing_bucket_is_a_clear_error(moto: MotoServer) -> None:
    async with S3Store("no-such-bucket-here", endpoint_url=moto.endpoint) as store:
        for call in (store.get("k"), store.put("k", b"v"), collect(store)):
            with pytest.raises(
                UnavailableError, match="bucket 'no-such-bucket-here' does not exist"
            ):
                await call
        with pytest.raises(UnavailableError) as e:
            await store.put("k", b"v")
        assert not e.value.outcome_unknown  # S3 answered: nothing was written


async def test_closed_port_is_unavailable_quickly() -> None:
    port = free_port()  # nothing listens here: connection refused
    async with S3Store("bucket", endpoint_url=f"http://127.0.0.1:{port}", **FAST_FAIL) as store:
        started = time.monotonic()
        with pytest.raises(UnavailableError, match=f"127.0.0.1:{port}"):
            await store.get("k")
        with pytest.raises(UnavailableError):
            await store.head("k")
        with pytest.raises(UnavailableError):
            await collect(store)
        with pytest.raises(UnavailableError) as e:
            await store.put("k", b"v")
        assert e.value.outcome_unknown  # a transport failure never proves a put did not land
        assert isinstance(e.value, ConnectionError)
        assert time.monotonic() - started < 10


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    """Accepts connections and never answers: every request times out."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()


async def test_read_timeout_is_unavailable() -> None:
    async with (
        silent_server() as endpoint,
        S3Store("bucket", endpoint_url=endpoint, **FAST_FAIL) as store,
    ):
        with pytest.raises(UnavailableError):
            await store.get("k")
        with pytest.raises(UnavailableError) as e:
            await store.put("k", b"v")
        assert e.value.outcome_unknown


class DroppingProxy:
    """A loopback TCP proxy to moto that can swallow the responses to the next PUTs.

    The request reaches moto (the object lands); the client sees its connection close
    before any response: the failure an S3 client must treat as "outcome unknown".
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.drop_puts = 0  # responses to swallow
        self.dropped = 0
        self.endpoint = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> DroppingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.endpoint = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        s_reader, s_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        saw_put = False

        async def upstream() -> None:
            nonlocal saw_put
            while data := await c_reader.read(65536):
                saw_put = saw_put or data.startswith(b"PUT ")
                s_writer.write(data)
                await s_writer.drain()

        async def downstream() -> None:
            while data := await s_reader.read(65536):
                if saw_put and self.drop_puts:
                    self.drop_puts -= 1
                    self.dropped += 1
                    return
                c_writer.write(data)
                await c_writer.drain()

        up = asyncio.create_task(upstream())
        with contextlib.suppress(ConnectionError):
            await downstream()
        up.cancel()
        for w in (c_writer, s_writer):
            w.close()


async def test_lost_responses_to_a_put_are_outcome_unknown(moto: MotoServer, bucket: str) -> None:
    port = int(moto.endpoint.rsplit(":", 1)[1])
    async with (
        DroppingProxy(port) as proxy,
        S3Store(bucket, endpoint_url=proxy.endpoint, **FAST_FAIL) as store,
    ):
        proxy.drop_puts = 2  # aiohttp itself re-sends a PUT once on a lost connection
        with pytest.raises(UnavailableError) as e:
            await store.put("k", b"landed", PutMode.OVERWRITE)
        assert e.value.outcome_unknown and proxy.dropped == 2
        assert await store.get("k") == b"landed"


async def test_create_whose_response_was_lost_succeeds(moto: MotoServer, bucket: str) -> None:
    port = int(moto.endpoint.rsplit(":", 1)[1])
    async with (
        DroppingProxy(port) as proxy,
        S3Store(bucket, endpoint_url=proxy.endpoint, max_attempts=3) as store,
    ):
        proxy.drop_puts = 1
        await store.put("k", b"mine")  # attempt 1 lands unanswered; the re-send gets 412
        assert proxy.dropped == 1
        assert await store.get("k") == b"mine"
        proxy.drop_puts = 1
        with pytest.raises(ObjectExistsError):  # re-sent too, but the object is not ours
            await store.put("k", b"someone else's")
        assert await store.get("k") == b"mine"


async def test_create_of_identical_bytes_succeeds(moto: MotoServer, bucket: str) -> None:
    """Documented S3 behaviour (base.PutMode): equal bytes are taken as our own retry."""
    async with S3Store(bucket, endpoint_url=moto.endpoint) as store:
        await store.put("k", b"same")
        await store.put("k", b"same")
        with pytest.raises(ObjectExistsError):
            await store.put("k", b"different")


async def test_overwrite_and_delete_missing_strict(moto: MotoServer, bucket: str) -> None:
    async with S3Store(bucket, endpoint_url=moto.endpoint) as store:
        await store.put("k", b"1", PutMode.OVERWRITE)
        await store.put("k", b"22", PutMode.OVERWRITE)
        assert (await store.head("k")).size == 2
        with pytest.raises(ObjectNotFoundError):
            await store.delete("missing", missing_ok=False)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bucket": "a/b"},
        {"bucket": ""},
        {"bucket": "b", "prefix": "x/../y"},
        {"bucket": "b", "page_size": 0},
    ],
)
def test_invalid_configuration(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        S3Store(**kwargs)  # type: ignore[arg-type]


def test_free_port_is_closed() -> None:
    """The closed-port test relies on nothing listening on a port free_port() returns."""
    port = free_port()
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))
