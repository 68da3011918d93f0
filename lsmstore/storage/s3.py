"""An object store on S3 (or any S3-compatible endpoint) through aiobotocore.

One long-lived client per store, created on first use (or by ``await store.open()``) and
closed by ``aclose()``.  Credentials and, unless given, the region come from the usual
AWS sources (environment, ``~/.aws/config``, instance metadata).

Guarantees come from S3 itself: a PutObject is atomic and, since 2020, strongly
consistent (read-after-write and list-after-write).  CREATE sends ``If-None-Match: *``;
S3 answers 412 when the key exists, which is :class:`ObjectExistsError` -- unless the
object present has our content's MD5 ETag.  Then the put succeeds: both botocore and
aiohttp re-send a PUT whose response was lost, so a 412 may answer our own earlier
attempt, and the two cases cannot be told apart (see ``PutMode.CREATE``).  ``put``
sends one PutObject (up to 5 GiB).  ``put_stream`` sends an object that fits in one part
(``part_size``, default 8 MiB) as one PutObject, a larger one as a multipart upload whose
parts go up to ``part_concurrency`` at a time (default 4) while the next part is gathered
(memory: about ``part_concurrency + 1`` parts); CREATE sends ``If-None-Match: *`` with
the CompleteMultipartUpload.  A failure, cancellation or exception from the source
aborts the multipart upload; a crash leaves an incomplete upload, invisible to reads and
listings (S3 bills its parts until a bucket lifecycle rule aborts it).

GetObject (whole or ranged), HeadObject, PutObject and DeleteObject go straight over
aiohttp, signed here (:mod:`lsmstore.storage.s3direct`, which takes endpoint,
addressing style, region and credentials from the aiobotocore client); everything else
goes through that client.  ``direct=False`` sends everything through botocore.  A whole
object read by ``get`` is at most ``max_read`` bytes (default 5 GiB, the largest single
PutObject; a larger one is read with ``get_stream``), and no answer is allocated before
its claimed size is checked against that or the range asked for.

Errors: 404 ``NoSuchKey`` -> :class:`ObjectNotFoundError`; a missing bucket, denied
access, connection failures, timeouts and 5xx/throttling after botocore's retries
(``max_attempts`` in total, "standard" mode) -> :class:`UnavailableError`.  A failed
put is ``outcome_unknown`` unless S3 gave a definite 4xx answer.  HEAD answers carry no
error code, so ``head`` on a missing bucket reports the object as not found.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import re
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal, Self, TypeVar

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session
from botocore.exceptions import BotoCoreError, ClientError
from botocore.handlers import add_expect_header

from lsmstore.errors import (
    InvalidInputError,
    ObjectExistsError,
    ObjectNotFoundError,
    UnavailableError,
)
from lsmstore.storage.base import STREAM_CHUNK, ObjectMeta, ObjectStore, PutMode, check_key
from lsmstore.storage.s3direct import BadAnswerError, RedirectedError, S3Direct

BUCKET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")

#: Failures to get an answer (OSError includes TimeoutError) and S3's error answers.
_TRANSPORT = (BotoCoreError, aiohttp.ClientError, OSError, BadAnswerError)
_FAILURES = (ClientError, *_TRANSPORT)

#: Smallest part of a multipart upload S3 accepts (all but the last part).
MIN_PART_SIZE = 5 << 20
#: At most this many parts per multipart upload (S3's limit).
MAX_PARTS = 10_000
#: The largest part S3 copies with UploadPartCopy (5 GiB).
MAX_COPY_PART = 5 << 30
_MD5 = re.compile("[0-9a-f]{32}")

#: Times a CREATE is re-sent after 409 ConditionalRequestConflict (a concurrent
#: conditional write on the same key was in flight; S3 asks the client to retry).
CONFLICT_RETRIES = 5


_SESSION: AioSession | None = None
_T = TypeVar("_T")


def _session() -> AioSession:
    """One botocore session per process: it caches the (large) S3 service model.

    Its clients leave timestamps in answers as the strings S3 sent: nothing here reads
    one, and parsing them (dateutil) was a tenth of the CPU of a small GET."""
    global _SESSION
    if _SESSION is None:
        session = get_session()
        session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
        _SESSION = session
    return _SESSION


class S3Store(ObjectStore):
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        path_style: bool = False,
        max_attempts: int = 5,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_pool_connections: int = 64,
        page_size: int = 1000,
        part_size: int = 8 << 20,
        part_concurrency: int = 4,
        direct: bool = True,
        max_read: int = 5 << 30,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if not BUCKET_NAME.match(bucket):
            raise InvalidInputError(f"invalid S3 bucket name {bucket!r}")
        prefix = prefix.strip("/")
        if prefix:
            check_key(prefix)
        if max_attempts < 1 or not 1 <= page_size <= 1000:
            raise InvalidInputError("S3 max_attempts must be >= 1 and page_size in 1..1000")
        if not MIN_PART_SIZE <= part_size <= 5 << 30:
            raise InvalidInputError(
                f"S3 part_size must be in {MIN_PART_SIZE}..5GiB, not {part_size}"
            )
        if not 1 <= part_concurrency <= 64:
            raise InvalidInputError(f"S3 part_concurrency must be in 1..64, not {part_concurrency}")
        if max_read < 0:
            raise InvalidInputError(f"S3 max_read must be >= 0, not {max_read}")
        self.max_read = max_read
        #: The hot requests' own path (None: through botocore); bound on first use.
        self._direct: S3Direct | None = None
        if direct:
            self._direct = S3Direct(
                max_attempts=max_attempts, connect_timeout=connect_timeout,
                read_timeout=read_timeout, max_pool_connections=max_pool_connections,
                clock=clock, rand=rand,
            )  # fmt: skip
        self.part_size = part_size
        self.part_concurrency = part_concurrency
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self._root = f"{prefix}/" if prefix else ""
        self.url = f"s3://{bucket}/{prefix}"
        self._page_size = page_size
        self._region = region or (None if endpoint_url is None else "us-east-1")
        self._config = AioConfig(
            retries={"total_max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_pool_connections=max_pool_connections,
            # Every request is built here from typed values: botocore's per-request
            # validation of them only costs CPU.
            parameter_validation=False,
            s3={"addressing_style": "path" if path_style else "auto"},
            # Requests are SigV4 signed either way; this makes pre-signed URLs SigV4
            # too (botocore presigns with SigV2 otherwise, which signs Content-Type:
            # a client PUTting with its own content type would be refused).
            signature_version="s3v4",
        )
        self._client: Any = None
        self._stack = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()

    async def open(self) -> Self:
        """Create the client now rather than on first use."""
        await self._connect()
        return self

    async def _connect(self) -> Any:
        self._check_open()
        if self._client is None:
            async with self._lock:
                if self._client is None:
                    ctx = _session().create_client(
                        "s3",
                        endpoint_url=self.endpoint_url,
                        region_name=self._region,
                        config=self._config,
                    )
                    client = await self._stack.enter_async_context(ctx)
                    # Without "Expect: 100-continue" a put costs one round trip less, and
                    # a server that stops answering hits read_timeout instead of hanging
                    # (aiohttp waits for the "100 Continue" with no timeout).
                    client.meta.events.unregister("before-call.s3", add_expect_header)
                    # The User-Agent set when the request is built is kept: rebuilding
                    # it again before sending cost about 5% of a small GET's CPU.  The
                    # handler is botocore's private one: a release without it keeps
                    # its default (correct, only slower).
                    creator = getattr(client, "_user_agent_creator", None)
                    rebuild = getattr(creator, "rebuild_and_replace_user_agent_handler", None)
                    if rebuild is not None:
                        client.meta.events.unregister("request-created.s3", rebuild)
                    self._client = client
        return self._client

    async def aclose(self) -> None:
        await super().aclose()
        self._client = None
        if self._direct is not None:
            await self._direct.aclose()
        await self._stack.aclose()

    async def _lean(self) -> S3Direct | None:
        """The direct path, bound to the client's endpoint and credentials on first use
        (None when this store sends everything through botocore)."""
        direct = self._direct
        if direct is not None and not direct.bound:
            client = await self._connect()
            async with self._lock:
                if not direct.bound:
                    session = _session()
                    credentials = await session.get_credentials()
                    ca_bundle = session.get_config_variable("ca_bundle")
                    await direct.bind(client, credentials, self.bucket, ca_bundle)
        return direct

    def _leave_direct(self) -> None:
        """Send everything through botocore from now on (it follows redirects)."""
        direct, self._direct = self._direct, None
        if direct is not None:
            self._stack.push_async_callback(direct.aclose)

    def _error(self, e: Exception, op: str, key: str, *, put: bool = False) -> Exception:
        where = f"{self.url} ({self.endpoint_url or 'AWS'}): {op} {key}"
        if isinstance(e, ClientError):
            error = e.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if code == "NoSuchBucket":
                return UnavailableError(f"{where}: bucket {self.bucket!r} does not exist")
            if code in ("NoSuchKey", "NotFound", "404") or status == 404:
                return ObjectNotFoundError(key)
            if status in (401, 403):
                return UnavailableError(f"{where}: access denied ({code})")
            definite = 400 <= status < 500 and status not in (408, 429)
            return UnavailableError(
                f"{where}: {code or status} {error.get('Message', '')}".rstrip(),
                outcome_unknown=put and not definite,
            )
        return UnavailableError(f"{where}: {e}", outcome_unknown=put)

    # --- reads -----------------------------------------------------------------------

    async def _hot(
        self,
        direct_call: Callable[[S3Direct], Awaitable[_T]],
        botocore_call: Callable[[Any], Awaitable[_T]],
    ) -> _T:
        """One of the hot requests: on the direct path unless this store has none (or
        left it after a redirect), else through the aiobotocore client."""
        direct = await self._lean()
        if direct is not None:
            try:
                return await direct_call(direct)
            except RedirectedError:
                self._leave_direct()
        return await botocore_call(await self._connect())

    async def _read(self, key: str, op: str, start: int = 0, end: int | None = None) -> bytes:
        """The object, or bytes ``[start, end)`` of it (b"" when ``start`` is at or past
        its end); at most ``max_read`` bytes, or the range's length."""
        full = self._root + key
        limit = self.max_read if end is None else min(self.max_read, end - start)

        async def botocore(client: Any) -> bytes:
            extra = {}
            if start or end is not None:
                extra["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
            response = await client.get_object(Bucket=self.bucket, Key=full, **extra)
            async with response["Body"] as body:
                if int(response.get("ContentLength") or 0) > limit:
                    raise BadAnswerError(
                        f"the answer claims {response['ContentLength']} bytes, more than "
                        f"the {limit} expected"
                    )
                data: bytes = await body.read()
            return data

        try:
            return await self._hot(lambda d: d.get(full, self.max_read, start, end), botocore)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "InvalidRange":
                return b""  # the range starts at or past the end (or the object is empty)
            raise self._error(e, op, key) from e
        except _TRANSPORT as e:
            raise self._error(e, op, key) from e

    async def get(self, key: str) -> bytes:
        check_key(key)
        return await self._read(key, "get")

    #: The longest a pre-signed URL lives (SigV4's bound: 7 days).
    MAX_PRESIGN_S = 7 * 86_400

    async def presigned_url(self, key: str, method: Literal["GET", "PUT"], expires_s: int) -> str:
        """A SigV4 query-signed URL of ``key`` at this store's endpoint, signed with the
        credentials this process uses (made locally: no request is sent)."""
        check_key(key)
        if method not in ("GET", "PUT"):
            raise InvalidInputError(f"pre-signed URLs are for GET or PUT, not {method!r}")
        if isinstance(expires_s, bool) or not 1 <= expires_s <= self.MAX_PRESIGN_S:
            raise InvalidInputError(
                f"a pre-signed URL lives 1..{self.MAX_PRESIGN_S} s, not {expires_s!r}"
            )
        client = await self._connect()
        operation = "get_object" if method == "GET" else "put_object"
        try:
            url: str = await client.generate_presigned_url(
                operation, Params={"Bucket": self.bucket, "Key": self._root + key},
                ExpiresIn=expires_s,
            )  # fmt: skip
        except (BotoCoreError, ClientError) as e:
            raise self._error(e, "presign", key) from e
        return url

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        check_key(key)
        if start < 0:
            raise InvalidInputError(f"get_range of {key!r}: negative start {start}")
        if end <= start:
            await self.head(key)  # a missing key still raises ObjectNotFoundError
            return b""
        return await self._read(key, "get_range", start, end)

    async def head(self, key: str) -> ObjectMeta:
        check_key(key)
        full = self._root + key

        async def botocore(client: Any) -> tuple[int, str]:
            response = await client.head_object(Bucket=self.bucket, Key=full)
            return int(response["ContentLength"]), str(response.get("ETag", "")).strip('"')

        try:
            size, etag = await self._hot(lambda d: d.head(full), botocore)
        except _FAILURES as e:
            raise self._error(e, "head", key) from e
        return ObjectMeta(key, size, etag)

    # --- writes ----------------------------------------------------------------------

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        check_key(key)
        full = self._root + key
        create = mode is PutMode.CREATE
        conditions = {"IfNoneMatch": "*"} if create else {}

        async def botocore(client: Any) -> None:
            await client.put_object(Bucket=self.bucket, Key=full, Body=data, **conditions)

        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                await self._hot(lambda d: d.put(full, data, if_none_match=create), botocore)
                return
            except ClientError as e:
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status == 412 and mode is PutMode.CREATE:
                    if await self._holds(key, data):
                        return  # most likely an earlier, unanswered attempt of this put
                    raise ObjectExistsError(key) from None
                if status == 409 and attempt < CONFLICT_RETRIES:
                    continue
                raise self._error(e, "put", key, put=True) from e
            except _TRANSPORT as e:
                raise self._error(e, "put", key, put=True) from e

    async def put_stream(
        self, key: str, chunks: AsyncIterable[bytes], mode: PutMode = PutMode.CREATE
    ) -> ObjectMeta:
        check_key(key)
        part_size = self.part_size
        pending: list[bytes] = []
        gathered = 0
        size = 0
        upload: _Multipart | None = None
        try:
            async for chunk in chunks:
                if not chunk:
                    continue
                pending.append(bytes(chunk))
                gathered += len(chunk)
                size += len(chunk)
                while gathered >= part_size:
                    data = b"".join(pending)
                    pending = [data[part_size:]] if gathered > part_size else []
                    gathered -= part_size
                    if upload is None:
                        upload = await self._start_multipart(key)
                    await upload.send(data[:part_size] if len(data) > part_size else data)
                    del data
            last = b"".join(pending)
            pending = []
            if upload is None:
                await self.put(key, last, mode)
                return ObjectMeta(key, size, hashlib.md5(last, usedforsecurity=False).hexdigest())
            if last:
                await upload.send(last)
            del last
            etag = await upload.complete(mode)
            upload = None
            return ObjectMeta(key, size, etag)
        finally:
            if upload is not None:
                await asyncio.shield(upload.abort())

    async def compose(self, key: str, sources: Sequence[str]) -> ObjectMeta:
        """A server-side multipart copy (one UploadPartCopy per source: no bytes through
        this process) when S3's part rules allow it -- every source but the last at least
        :data:`MIN_PART_SIZE`, none over :data:`MAX_COPY_PART` bytes, at most
        :data:`MAX_PARTS` of them; otherwise the streamed default."""
        check_key(key)
        metas = [await self.head(check_key(source)) for source in sources]
        fits = 0 < len(metas) <= MAX_PARTS and all(m.size <= MAX_COPY_PART for m in metas)
        if not fits or any(m.size < MIN_PART_SIZE for m in metas[:-1]):
            return await super().compose(key, sources)
        upload = await self._start_multipart(key)
        done = False
        try:
            for meta in metas:
                await upload.copy(meta.key, meta.etag)
            etag = await upload.complete(PutMode.CREATE)
            done = True
        finally:
            if not done:
                await asyncio.shield(upload.abort())
        return ObjectMeta(key, sum(m.size for m in metas), etag or None)

    async def _start_multipart(self, key: str) -> _Multipart:
        client = await self._connect()
        try:
            response = await client.create_multipart_upload(
                Bucket=self.bucket, Key=self._root + key
            )
        except _FAILURES as e:
            raise self._error(e, "put", key) from e
        return _Multipart(self, client, key, str(response["UploadId"]))

    async def get_stream(
        self, key: str, start: int = 0, end: int | None = None, *, chunk_size: int = STREAM_CHUNK
    ) -> AsyncIterator[bytes]:
        """One GET (ranged unless the whole object), read ``chunk_size`` at a time."""
        check_key(key)
        if start < 0 or chunk_size < 1:
            raise InvalidInputError(
                f"get_stream of {key!r}: start {start} must be >= 0 and chunk_size >= 1"
            )
        if end is not None and end <= start:
            await self.head(key)
            return
        if end is not None and end - start <= chunk_size and self._direct is not None:
            # A span that is one chunk anyway (a small object through the gateway): one
            # ranged GET on the direct path, no streamed body to keep open.
            if data := await self._read(key, "get", start, end):
                yield data
            return
        extra: dict[str, Any] = {}
        if start or end is not None:
            extra["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        client = await self._connect()
        try:
            response = await client.get_object(Bucket=self.bucket, Key=self._root + key, **extra)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "InvalidRange":
                return
            raise self._error(e, "get", key) from e
        except _TRANSPORT as e:
            raise self._error(e, "get", key) from e
        async with response["Body"] as body:
            while True:
                try:
                    chunk: bytes = await body.read(chunk_size)
                except _FAILURES as e:
                    raise self._error(e, "get", key) from e
                if not chunk:
                    return
                yield chunk

    async def _holds(self, key: str, data: bytes) -> bool:
        """Whether the stored object's ETag is the MD5 of ``data`` (a single-part upload)."""
        try:
            meta = await self.head(key)
        except ObjectNotFoundError:
            return False
        return meta.etag == hashlib.md5(data, usedforsecurity=False).hexdigest()

    async def delete(self, key: str, *, missing_ok: bool = True) -> None:
        check_key(key)
        if not missing_ok:
            await self.head(key)  # S3 deletes are silent about missing keys
        full = self._root + key

        async def botocore(client: Any) -> None:
            await client.delete_object(Bucket=self.bucket, Key=full)

        try:
            await self._hot(lambda d: d.delete(full), botocore)
        except _FAILURES as e:
            raise self._error(e, "delete", key) from e

    # --- listing ---------------------------------------------------------------------

    async def list(
        self, prefix: str = "", *, after: str | None = None
    ) -> AsyncIterator[ObjectMeta]:
        client = await self._connect()
        request: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self._root + prefix,
            "MaxKeys": self._page_size,
        }
        if after is not None:
            request["StartAfter"] = self._root + after
        skip = len(self._root)
        while True:
            try:
                response = await client.list_objects_v2(**request)
            except _FAILURES as e:
                raise self._error(e, "list", prefix or "/") from e
            for obj in response.get("Contents", ()):
                yield ObjectMeta(
                    obj["Key"][skip:], int(obj["Size"]), obj.get("ETag", "").strip('"')
                )
            if not response.get("IsTruncated"):
                return
            request["ContinuationToken"] = response["NextContinuationToken"]
            self._check_open()


class _Multipart:
    """One multipart upload of :meth:`S3Store.put_stream`: parts numbered in order and
    sent up to the store's ``part_concurrency`` at a time, then complete (or abort)."""

    def __init__(self, store: S3Store, client: Any, key: str, upload_id: str) -> None:
        self.store = store
        self.client = client
        self.key = key
        self.upload_id = upload_id
        self._count = 0
        self._parts: dict[int, dict[str, Any]] = {}
        self._md5s: dict[int, bytes] = {}
        self._sending: set[asyncio.Task[None]] = set()

    @property
    def parts(self) -> list[dict[str, Any]]:
        return [self._parts[n] for n in sorted(self._parts)]

    def _number(self) -> int:
        if self._count >= MAX_PARTS:
            raise InvalidInputError(
                f"put_stream of {self.key!r}: more than {MAX_PARTS} parts of "
                f"{self.store.part_size} bytes; raise the store's part_size"
            )
        self._count += 1
        return self._count

    async def send(self, data: bytes) -> None:
        """Start sending the next part; returns once fewer than ``part_concurrency``
        parts are in flight.  A failed part raises here or from :meth:`complete`."""
        number = self._number()
        await self._settle(self.store.part_concurrency - 1)
        self._sending.add(asyncio.ensure_future(self._upload(number, data)))

    async def _settle(self, most: int) -> None:
        """Wait until at most ``most`` parts are in flight; raise a failed part's error."""
        while len(self._sending) > most:
            done, self._sending = await asyncio.wait(
                self._sending, return_when=asyncio.FIRST_COMPLETED
            )
            failed = [task.exception() for task in done if task.exception() is not None]
            if failed:
                raise failed[0]  # type: ignore[misc]

    async def _upload(self, number: int, data: bytes) -> None:
        store = self.store
        try:
            response = await self.client.upload_part(
                Bucket=store.bucket,
                Key=store._root + self.key,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=data,
            )
        except _FAILURES as e:
            raise store._error(e, "put", self.key) from e
        self._parts[number] = {"PartNumber": number, "ETag": response["ETag"]}
        self._md5s[number] = hashlib.md5(data, usedforsecurity=False).digest()

    async def copy(self, source: str, source_etag: str | None) -> None:
        """The next part: the whole object ``source`` of the same store, copied by S3.
        The part's MD5 (for :meth:`etag`) is the ETag S3 answers, or else the source's
        own when that is an MD5 (a single-part object)."""
        store = self.store
        number = self._number()
        try:
            response = await self.client.upload_part_copy(
                Bucket=store.bucket,
                Key=store._root + self.key,
                UploadId=self.upload_id,
                PartNumber=number,
                CopySource={"Bucket": store.bucket, "Key": store._root + source},
            )
        except _FAILURES as e:
            raise store._error(e, "get", source) from e
        etag = str(response["CopyPartResult"]["ETag"])
        self._parts[number] = {"PartNumber": number, "ETag": etag}
        md5 = next((e for e in (etag.strip('"'), source_etag or "") if _MD5.fullmatch(e)), "")
        self._md5s[number] = bytes.fromhex(md5)

    def etag(self) -> str:
        """S3's ETag of the completed object: MD5 of the parts' MD5s, dash, part count
        ("" when a copied part's MD5 is unknown)."""
        md5s = [self._md5s[n] for n in sorted(self._md5s)]
        if b"" in md5s:
            return ""
        digest = hashlib.md5(b"".join(md5s), usedforsecurity=False).hexdigest()
        return f"{digest}-{len(self._md5s)}"

    async def complete(self, mode: PutMode) -> str:
        """Wait for the parts in flight, then complete the upload."""
        await self._settle(0)
        store = self.store
        conditions = {"IfNoneMatch": "*"} if mode is PutMode.CREATE else {}
        expected = self.etag()
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                await self.client.complete_multipart_upload(
                    Bucket=store.bucket,
                    Key=store._root + self.key,
                    UploadId=self.upload_id,
                    MultipartUpload={"Parts": self.parts},
                    **conditions,
                )
                return expected
            except ClientError as e:
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                code = e.response.get("Error", {}).get("Code")
                if (status == 412 and mode is PutMode.CREATE) or code == "NoSuchUpload":
                    # 412: the key exists; NoSuchUpload: this upload is gone -- maybe
                    # completed by an earlier attempt whose answer was lost.
                    if await self._landed(expected):
                        return expected
                    if status == 412:
                        raise ObjectExistsError(self.key) from None
                if status == 409 and attempt < CONFLICT_RETRIES:
                    continue
                raise store._error(e, "put", self.key, put=True) from e
            except _TRANSPORT as e:
                raise store._error(e, "put", self.key, put=True) from e
        raise AssertionError("unreachable")  # pragma: no cover

    async def _landed(self, expected: str) -> bool:
        try:
            meta = await self.store.head(self.key)
        except ObjectNotFoundError:
            return False
        return meta.etag == expected

    async def abort(self) -> None:
        """Stop the parts in flight and abort the upload.  Best effort: a failed abort
        leaves parts that only a lifecycle rule removes."""
        sending, self._sending = self._sending, set()
        for task in sending:
            task.cancel()
        if sending:
            await asyncio.wait(sending)
            for task in sending:
                if not task.cancelled():
                    task.exception()  # retrieved: the error that matters is raised already
        with contextlib.suppress(*_FAILURES):
            await self.client.abort_multipart_upload(
                Bucket=self.store.bucket, Key=self.store._root + self.key, UploadId=self.upload_id
            )
