"""S3Store against a real S3 server, SeaweedFS (``weed mini``) on loopback: the shared
object-store contract, conditional writes as S3 enforces them, every listening port
on 127.0.0.1, and a crash test (kill -9 of the compactor mid-job, Redis RefStore +
SeaweedFS) -- moto is a mock; this is the check that our S3 use holds on a real one."""

from __future__ import annotations

import base64
import os
import random
import signal
import uuid
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiobotocore.session import get_session

from lsmstore.errors import ObjectExistsError, PreconditionFailedError
from lsmstore.refstore.base import Ref, Repository
from lsmstore.refstore.url import open_refstore
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.storage.s3 import S3Store
from lsmstore.testing.compaction import WorkerProcess, append_l1_file, branch_state, rec
from lsmstore.testing.servers import MOTO_ENV, WeedServer
from lsmstore.testing.store_contract import StoreContract

pytestmark = pytest.mark.usefixtures("_credentials")


@pytest.fixture
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in MOTO_ENV.items():  # the identity weed was started with
        monkeypatch.setenv(k, v)


async def new_bucket(endpoint: str) -> str:
    name = f"t-{uuid.uuid4().hex[:16]}"
    async with get_session().create_client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", **_keys()
    ) as client:
        await client.create_bucket(Bucket=name)
    return name


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": MOTO_ENV["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": MOTO_ENV["AWS_SECRET_ACCESS_KEY"],
    }


@pytest.fixture
async def bucket(seaweed: WeedServer) -> str:
    return await new_bucket(seaweed.endpoint)


class TestSeaweedS3Store(StoreContract):
    MANY = 250
    PRESIGNS = True

    # SeaweedFS lists a directory's entries before siblings that sort lower bytewise
    # ("x/a/b" before "x/a-"), where S3 lists in UTF-8 byte order.  Strict: these
    # fail today and must be revisited when SeaweedFS conforms (docs/storage.md).
    _ORDER = pytest.mark.xfail(strict=True, reason="SeaweedFS: directory-first list order")

    @pytest.fixture
    async def store(self, seaweed: WeedServer, bucket: str) -> AsyncIterator[ObjectStore]:
        async with S3Store(bucket, endpoint_url=seaweed.endpoint) as outside:
            await outside.put("ns/repo1-sibling", b"not mine")
            await outside.put("a", b"not mine")
        async with S3Store(bucket, "ns/repo1", endpoint_url=seaweed.endpoint, page_size=100) as s:
            yield s

    @_ORDER
    async def test_list_order_and_sizes(self, store: ObjectStore) -> None:
        await super().test_list_order_and_sizes(store)

    @_ORDER
    async def test_list_prefix(self, store: ObjectStore) -> None:
        await super().test_list_prefix(store)

    @_ORDER
    async def test_list_after(self, store: ObjectStore) -> None:
        await super().test_list_after(store)


async def test_list_order_holds_without_nested_siblings(seaweed: WeedServer, bucket: str) -> None:
    """What the strict failures above do not cover: with no key that is both a
    "directory" and a prefix of a sibling, SeaweedFS lists in byte order like S3."""
    keys = ["x/a-1", "x/a.b", "x/a0", "x/b/c", "x/é", "y"]
    async with S3Store(bucket, "o", endpoint_url=seaweed.endpoint, page_size=2) as store:
        for key in reversed(keys):
            await store.put(key, b"")
        assert [m.key async for m in store.list()] == keys
        assert [m.key async for m in store.list("x/", after="x/a.b")] == keys[2:5]


async def test_put_checksum_is_the_bodys(seaweed: WeedServer, bucket: str) -> None:
    """The CRC32 the store's PUT carries is its body's (SeaweedFS checks it), and a
    whole GET is answered with it (and checks it)."""
    async with S3Store(bucket, "sum", endpoint_url=seaweed.endpoint) as store:
        await store.put("k", b"checked bytes")
        assert await store.get("k") == b"checked bytes"
    async with get_session().create_client(
        "s3", endpoint_url=seaweed.endpoint, region_name="us-east-1", **_keys()
    ) as client:
        r = await client.get_object(Bucket=bucket, Key="sum/k", ChecksumMode="ENABLED")
        async with r["Body"] as body:
            await body.read()
    assert (
        r["ChecksumCRC32"]
        == base64.b64encode(zlib.crc32(b"checked bytes").to_bytes(4, "big")).decode()
    )


async def test_conditional_puts_are_enforced(seaweed: WeedServer, bucket: str) -> None:
    async with S3Store(bucket, "c", endpoint_url=seaweed.endpoint) as store:
        await store.put("k", b"one", PutMode.CREATE)
        with pytest.raises(ObjectExistsError):
            await store.put("k", b"two", PutMode.CREATE)  # If-None-Match: *
        assert await store.get("k") == b"one"


async def test_wrong_credentials_are_refused(seaweed: WeedServer, bucket: str) -> None:
    async with get_session().create_client(
        "s3",
        endpoint_url=seaweed.endpoint,
        region_name="us-east-1",
        aws_access_key_id="intruder",
        aws_secret_access_key="nope",
    ) as client:
        with pytest.raises(Exception) as e:
            await client.list_objects_v2(Bucket=bucket)
    assert "AccessDenied" in str(e.value) or "InvalidAccessKeyId" in str(e.value)


def _listening_addresses(pid: int) -> set[str]:
    """The local addresses of the TCP sockets process ``pid`` listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if state == "0A" and inode in inodes:  # LISTEN
                    found.add(local)
    return found


def test_every_port_is_loopback(seaweed: WeedServer) -> None:
    assert seaweed.proc is not None
    listening = _listening_addresses(seaweed.proc.pid)
    assert listening, "weed listens on nothing?"
    hosts = {addr.rsplit(":", 1)[0] for addr in listening}
    assert hosts == {"0100007F"}, listening  # 127.0.0.1 (little-endian hex) only
    ports = {int(addr.rsplit(":", 1)[1], 16) for addr in listening}
    assert seaweed.ports["s3.port"] in ports


@pytest.mark.parametrize("step", ["before_swap", "after_swap"])
async def test_kill_9_compactor_on_real_s3(
    seaweed: WeedServer, bucket: str, redis_server_url: str, tmp_path: Path, step: str
) -> None:
    """kill -9 the compactor process at a step of its job, with the RefStore on Redis
    and the files on SeaweedFS: every acknowledged record stays readable, and a second
    run finishes the work."""
    url = f"{redis_server_url}?prefix=sw{uuid.uuid4().hex[:8]}:"
    rs = open_refstore(url)
    objects = S3Store(bucket, "repo", endpoint_url=seaweed.endpoint)
    try:
        ns = f"s3://{bucket}/repo?endpoint_url={seaweed.endpoint}"
        await rs.create_repository(Repository("alpha", ns, "main"))
        await rs.create_ref("alpha", "main", Ref("branch", ""))
        rng = random.Random(7)
        model: dict[bytes, bytes] = {}
        for _ in range(8):
            recs = [rec(f"k{rng.randrange(60):03d}", rng.randbytes(20)) for _ in range(15)]
            await append_l1_file(rs, objects, "alpha", "main", recs)
            for r in recs:
                assert r.value is not None
                model[r.key] = r.value
        before = await rs.get_ref("alpha", "main")
        env = {
            "LSMSTORE_HOME": str(tmp_path / "home"),
            "LSMSTORE_COMPACTION_L1_FILES": "3",
            **MOTO_ENV,
        }
        # one --owner: the second run takes back the lease the killed one held
        args = ("--refstore", url, "--once", "--owner", "sw-compactor")
        w = WorkerProcess(*args, env=env, pause=step)
        await w.start()
        await w.wait_for("paused", 300)
        assert w.proc is not None
        w.proc.send_signal(signal.SIGKILL)
        assert await w.wait(120) == -signal.SIGKILL
        after = await rs.get_ref("alpha", "main")
        assert (after == before) is (step == "before_swap")
        assert await branch_state(rs, objects, "alpha", "main") == model
        again = WorkerProcess(*args, env=env)
        await again.start()
        assert await again.wait(300) == 0, again.raw[-10:]
        final = await rs.get_ref("alpha", "main")
        assert len(final.l1) < 3 and final.l2
        assert await branch_state(rs, objects, "alpha", "main") == model
    finally:
        await objects.aclose()
        await rs.aclose()


async def test_if_match_is_enforced(seaweed: WeedServer, bucket: str) -> None:
    async with get_session().create_client(
        "s3", endpoint_url=seaweed.endpoint, region_name="us-east-1", **_keys()
    ) as client:
        put = await client.put_object(Bucket=bucket, Key="m", Body=b"1")
        etag = put["ETag"]
        await client.put_object(Bucket=bucket, Key="m", Body=b"2", IfMatch=etag)
        with pytest.raises(Exception) as e:
            await client.put_object(Bucket=bucket, Key="m", Body=b"3", IfMatch=etag)
        assert "PreconditionFailed" in str(e.value)
    _ = PreconditionFailedError  # the error S3Store maps a 412 on replace to
