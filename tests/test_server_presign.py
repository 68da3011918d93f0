"""Pre-signed URLs: the official SDK's ``reader(pre_sign=True)`` / ``writer(pre_sign=True)``
against a real server whose repository lives on a real S3 server (SeaweedFS on
loopback): the data goes between the client and S3 directly."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import lakefs
import lakefs_sdk
import pytest
from helpers.server import unique
from lakefs.client import Client

from lsmstore.storage.s3 import S3Store
from lsmstore.testing.server_process import ServerProcess, start_server
from lsmstore.testing.servers import MOTO_ENV, WeedServer, new_bucket


@pytest.fixture(scope="module", autouse=True)
def _credentials() -> Iterator[None]:
    """This process talks to SeaweedFS too (buckets, direct reads): weed's identity."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in MOTO_ENV.items():
            mp.setenv(k, v)
        yield


@pytest.fixture(scope="module")
def bucket(seaweed: WeedServer) -> str:
    return asyncio.run(new_bucket(seaweed.endpoint))


@pytest.fixture(scope="module")
def s3_server(
    tmp_path_factory: pytest.TempPathFactory, seaweed: WeedServer
) -> Iterator[ServerProcess]:
    env = {**MOTO_ENV, "LSMSTORE_SERVER_NAMESPACE_ENDPOINTS": seaweed.endpoint}
    proc = start_server(Path(tmp_path_factory.mktemp("presign")) / "home", env=env)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def client(s3_server: ServerProcess) -> Client:
    return Client(host=s3_server.url, username=s3_server.admin[0], password=s3_server.admin[1])


def _s3_repo(client: Client, seaweed: WeedServer, bucket: str) -> lakefs.Repository:
    name = unique()
    ns = f"s3://{bucket}/{name}?endpoint_url={quote(seaweed.endpoint, safe='')}"
    return lakefs.Repository(name, client=client).create(storage_namespace=ns)


def test_sdk_reads_and_writes_through_presigned_urls(
    client: Client, seaweed: WeedServer, bucket: str
) -> None:
    repo = _s3_repo(client, seaweed, bucket)
    main = repo.branch("main")
    data = bytes(range(256)) * 4000
    obj = main.object("dir/data.bin")
    with obj.writer(mode="wb", pre_sign=True, content_type="application/x-test") as w:
        w.write(data)
    # The server staged what was written to S3 directly.
    stats = obj.stat()
    assert stats.size_bytes == len(data) and stats.content_type == "application/x-test"
    assert stats.physical_address.startswith(f"s3://{bucket}/{repo.id}/data/")
    with obj.reader(pre_sign=True) as r:
        assert r.read() == data
        r.seek(1000)
        assert r.read(24) == data[1000:1024]
    # stat(pre_sign=True) answers the data's URL at the S3 endpoint; it needs no
    # other credentials.
    signed = obj.stat(pre_sign=True).physical_address
    assert signed.startswith(seaweed.endpoint + "/")
    assert httpx.get(signed, timeout=30).content == data
    # Committed data reads the same way.
    commit = main.commit(message="presigned")
    with repo.ref(commit.get_commit().id).object("dir/data.bin").reader(pre_sign=True) as r:
        assert r.read() == data
    # What S3 holds under the address is the data (it never passed the server).
    key = stats.physical_address.removeprefix(f"s3://{bucket}/")

    async def direct() -> bytes:
        async with S3Store(bucket, endpoint_url=seaweed.endpoint) as s3:
            return await s3.get(key)

    assert asyncio.run(direct()) == data


def test_presigned_get_redirects_and_stat_expires(
    s3_server: ServerProcess, client: Client, seaweed: WeedServer, bucket: str
) -> None:
    repo = _s3_repo(client, seaweed, bucket)
    repo.branch("main").object("a.txt").upload(b"hello")
    base = f"{s3_server.api}/repositories/{repo.id}/refs/main/objects"
    with httpx.Client(auth=s3_server.admin, timeout=30) as c:
        r = c.get(base, params={"path": "a.txt", "presign": "true"})
        assert r.status_code == 302 and r.headers["location"].startswith(seaweed.endpoint)
        assert httpx.get(r.headers["location"], timeout=30).content == b"hello"
        st = c.get(base + "/stat", params={"path": "a.txt", "presign": "true"}).json()
        assert st["physical_address"].startswith(seaweed.endpoint)
        assert st["physical_address_expiry"] > 0
        # Without presign: the address as stored, and the data through the server.
        assert (
            c.get(base + "/stat", params={"path": "a.txt"})
            .json()["physical_address"]
            .startswith("s3://")
        )
        assert c.get(base, params={"path": "a.txt"}).content == b"hello"


def test_presigned_upload_links_only_into_its_own_repository(
    s3_server: ServerProcess, client: Client, seaweed: WeedServer, bucket: str
) -> None:
    mine, other = _s3_repo(client, seaweed, bucket), _s3_repo(client, seaweed, bucket)
    staging = client.sdk_client.staging_api
    loc = staging.get_physical_address(mine.id, "main", "x.bin", presign=True)
    assert loc.presigned_url.startswith(seaweed.endpoint) and loc.presigned_url_expiry > 0
    put = httpx.put(loc.presigned_url, content=b"direct", timeout=30)
    assert put.status_code == 200
    meta = lakefs_sdk.StagingMetadata(staging=loc, checksum=put.headers["etag"].strip('"'),
                                      size_bytes=6)  # fmt: skip
    with pytest.raises(lakefs_sdk.ApiException) as refused:
        staging.link_physical_address(other.id, "main", "x.bin", staging_metadata=meta)
    assert refused.value.status == 400 and "outside" in str(refused.value.body)
    staging.link_physical_address(mine.id, "main", "x.bin", staging_metadata=meta)
    assert mine.branch("main").object("x.bin").reader().read() == b"direct"


def test_local_namespaces_refuse_presign_clearly(client: Client) -> None:
    name = unique()
    repo = lakefs.Repository(name, client=client).create(storage_namespace=f"local://{name}")
    obj = repo.branch("main").object("a.txt")
    obj.upload(b"local")
    for call in (
        lambda: obj.reader(pre_sign=True).read(),
        lambda: obj.stat(pre_sign=True),
        lambda: client.sdk_client.staging_api.get_physical_address(name, "main", "b", presign=True),
    ):
        with pytest.raises(Exception) as refused:
            call()
        assert "pre-signed URLs are not supported" in str(refused.value), refused.value
        assert "S3" in str(refused.value)
    assert obj.reader().read() == b"local"


def _answered(proc: ServerProcess, operation: str, status: str = "") -> float:
    """How many requests of ``operation`` the server has answered (with ``status``, if
    given), from its /metrics."""
    text = httpx.get(f"{proc.url}/metrics", auth=proc.admin, timeout=30).text
    prefix = f'lsmstore_http_requests_total{{operation="{operation}",status="{status}'
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix))  # fmt: skip


def test_advertised_presign_is_the_sdks_default(
    tmp_path: Path, seaweed: WeedServer, bucket: str
) -> None:
    """With ``server_presign_advertise = on`` /config says ``pre_sign_support: true``
    and lakeFS's SDK moves data to and from S3 directly without being asked; off (the
    default, the module's server) it goes through the server."""
    env = {
        **MOTO_ENV,
        "LSMSTORE_SERVER_NAMESPACE_ENDPOINTS": seaweed.endpoint,
        "LSMSTORE_SERVER_PRESIGN_ADVERTISE": "on",
    }
    proc = start_server(tmp_path / "home", env=env)
    try:
        client = Client(host=proc.url, username=proc.admin[0], password=proc.admin[1])
        storage = client.sdk_client.config_api.get_config().storage_config
        assert storage is not None and storage.pre_sign_support is True
        obj = _s3_repo(client, seaweed, bucket).branch("main").object("d.bin")
        data = b"direct" * 1000
        with obj.writer(mode="wb") as w:
            w.write(data)
        with obj.reader() as r:
            assert r.read() == data
        # The data went to S3 and came back from it: the server staged a link, and
        # answered the read with a redirect to the data's URL.
        assert _answered(proc, "uploadObject") == 0
        assert _answered(proc, "getObject", "302") == 1
        assert _answered(proc, "getObject", "200") == 0
        assert _answered(proc, "getPhysicalAddress") == 1
        assert _answered(proc, "linkPhysicalAddress") == 1
    finally:
        proc.stop()


def test_presign_is_not_advertised_by_default(client: Client) -> None:
    storage = client.sdk_client.config_api.get_config().storage_config
    assert storage is not None and storage.pre_sign_support is False
