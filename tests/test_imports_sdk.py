"""lakeFS's import API (``importStart`` / ``importStatus`` / ``importCancel``) through
the official ``lakefs`` SDK against a real server process, importing from a prefix of
its S3 namespace on moto: one commit, destinations replaced, progress readable while it
runs, cancel part way, and a status that says what happened after a restart."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from signal import SIGKILL
from typing import Any

import boto3
import lakefs
import lakefs_sdk
import lakefs_sdk.exceptions
import pytest
from lakefs.client import Client
from lakefs.exceptions import ConflictException

from lsmstore.testing.faultproxy import FaultProxy
from lsmstore.testing.server_process import ServerProcess, start_server
from lsmstore.testing.servers import MotoServer, new_bucket

#: Keys per ListObjectsV2 page of the namespace's store: a listing of N objects takes
#: N / PAGE requests, so a test can hold it after its first page.
PAGE = 50


class ThreadedProxy:
    """A :class:`FaultProxy` in front of moto, on an event loop of its own thread (the
    SDK's calls block)."""

    def __init__(self, moto: MotoServer) -> None:
        host, port = moto.endpoint.removeprefix("http://").split(":")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy = FaultProxy(host, int(port))
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(30)

    def hold(self, text: str) -> None:
        self.loop.call_soon_threadsafe(self.proxy.hold, text)

    def release(self) -> None:
        self.loop.call_soon_threadsafe(self.proxy.release)

    def held(self) -> int:
        return self.proxy.counts["held"]

    def close(self) -> None:
        self.release()
        asyncio.run_coroutine_threadsafe(self.proxy.aclose(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@pytest.fixture(scope="module")
def proxy(moto: MotoServer) -> Iterator[ThreadedProxy]:
    p = ThreadedProxy(moto)
    try:
        yield p
    finally:
        p.close()


def _env(proxy: ThreadedProxy) -> dict[str, str]:
    return {
        "LSMSTORE_SERVER_NAMESPACE_ENDPOINTS": proxy.proxy.endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        # heartbeats every 0.2 s: progress shows soon, a stopped import's lease lapses in 1 s
        "LSMSTORE_IMPORT_LEASE_S": "1",
    }


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, proxy: ThreadedProxy
) -> Iterator[ServerProcess]:
    proc = start_server(Path(tmp_path_factory.mktemp("imports")) / "home", env=_env(proxy))
    try:
        yield proc
    finally:
        proc.stop()


def _client(server: ServerProcess) -> Client:
    key, secret = server.admin
    return Client(host=server.url, username=key, password=secret)


class S3Repo:
    """A repository on an S3 namespace (through the proxy) and boto3 on its bucket."""

    def __init__(self, client: Client, moto: MotoServer, proxy: ThreadedProxy, name: str) -> None:
        self.bucket = asyncio.run(new_bucket(moto.endpoint, "imp"))
        self.ns = f"s3://{self.bucket}/{name}"
        self.repo = lakefs.Repository(name, client=client).create(
            storage_namespace=f"{self.ns}?endpoint_url={proxy.proxy.endpoint}&page_size={PAGE}"
        )
        self.s3 = boto3.client(
            "s3", endpoint_url=moto.endpoint, region_name="us-east-1",
            aws_access_key_id="test", aws_secret_access_key="test",
        )  # fmt: skip

    def put(self, key: str, data: bytes) -> str:
        """An object of the namespace's bucket; its ETag."""
        r = self.s3.put_object(Bucket=self.bucket, Key=f"{self.repo.id}/{key}", Body=data)
        return str(r["ETag"]).strip('"')


_names = iter(range(1_000_000))


def _repo(server: ServerProcess, moto: MotoServer, proxy: ThreadedProxy) -> S3Repo:
    return S3Repo(_client(server), moto, proxy, f"imp-{next(_names):04d}")


def _wait_until(check: Any, what: str, timeout: float = 120.0) -> Any:
    """Poll ``check()`` until it returns something truthy (a deadline only so that a
    broken build fails instead of hanging: never a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def test_import_prefix_and_object_as_one_commit(
    server: ServerProcess, moto: MotoServer, proxy: ThreadedProxy
) -> None:
    r = _repo(server, moto, proxy)
    etags = {
        f"landing/part-{i:03d}.csv": r.put(f"landing/part-{i:03d}.csv", b"x" * i)
        for i in range(120)
    }
    single = r.put("one/single.json", b'{"a": 1}')
    main = r.repo.branch("main")
    main.object("dest/stale.csv").upload(b"replaced by the import")
    main.object("keep.txt").upload(b"kept")
    before = main.commit("before").get_commit().id

    status = (
        main.import_data(commit_message="import landing", metadata={"source": "landing"})
        .prefix(f"{r.ns}/landing/", destination="dest/")
        .object(f"{r.ns}/one/single.json", destination="tables/single.json")
        .run(poll_interval=timedelta(seconds=0.1))
    )
    assert status.completed and status.error is None
    assert status.ingested_objects == 121
    assert status.commit is not None
    head = main.get_commit()
    assert head.id == status.commit.id and head.parents == [before]
    assert head.message == "import landing" and head.metadata == {"source": "landing"}
    assert status.metarange_id == head.meta_range_id
    listed = {o.path: o for o in main.objects(prefix="dest/")}
    assert sorted(listed) == sorted("dest/" + k.removeprefix("landing/") for k in etags)
    for key, etag in etags.items():
        o = listed["dest/" + key.removeprefix("landing/")]
        assert o.checksum == etag and o.size_bytes == int(key[-7:-4])
        assert o.physical_address == f"{r.ns}/{key}"  # referenced where it is, not copied
    one = main.object("tables/single.json")
    assert one.stat().checksum == single and one.reader().read() == b'{"a": 1}'
    assert main.object("dest/part-007.csv").reader().read() == b"x" * 7
    assert main.object("keep.txt").exists()
    assert not main.object("dest/stale.csv").exists()
    # one commit: its parent is the commit before the import
    assert [c.id for c in main.log(max_amount=2)] == [head.id, before]


def test_import_progress_then_cancel_part_way(
    server: ServerProcess, moto: MotoServer, proxy: ThreadedProxy
) -> None:
    r = _repo(server, moto, proxy)
    for i in range(3 * PAGE):
        r.put(f"in/{i:04d}", b"v")
    main = r.repo.branch("main")
    head = main.get_commit().id
    proxy.hold("continuation-token")  # the listing's second page never comes back
    try:
        mgr = main.import_data(commit_message="never").prefix(f"{r.ns}/in/", destination="d/")
        mgr.start()
        s = _wait_until(lambda: (st := mgr.status()).ingested_objects and st, "progress")
        assert not s.completed and s.error is None and s.ingested_objects == PAGE
        mgr.cancel()
        s = mgr.status()
        assert not s.completed and s.error is not None and "cancel" in s.error.message
        with pytest.raises(ConflictException):
            mgr.cancel()
    finally:
        proxy.release()
    assert main.get_commit().id == head
    assert list(main.objects(prefix="d/")) == []
    assert mgr.status().error is not None  # still canceled once the store answers


def test_import_status_after_a_restart(
    tmp_path: Path, moto: MotoServer, proxy: ThreadedProxy
) -> None:
    home = tmp_path / "home"
    srv = start_server(home, env=_env(proxy))
    try:
        r = _repo(srv, moto, proxy)
        for i in range(2 * PAGE):
            r.put(f"in/{i:04d}", b"v")
        main = r.repo.branch("main")
        head = main.get_commit().id
        proxy.hold("continuation-token")
        mgr = main.import_data(commit_message="interrupted").prefix(f"{r.ns}/in/", destination="d/")
        import_id = mgr.start()
        _wait_until(lambda: mgr.status().ingested_objects, "progress")
        srv.stop(SIGKILL)
    finally:
        proxy.release()
        if srv.proc.poll() is None:
            srv.stop()
    again = start_server(home, env=_env(proxy), admin=srv.admin)
    try:
        api = _client(again).sdk_client.import_api
        s = _wait_until(
            lambda: (st := api.import_status(r.repo.id, "main", import_id)).error and st,
            "the interrupted import to read as failed",
        )
        assert not s.completed and "interrupted" in s.error.message
        assert s.ingested_objects == PAGE  # the progress it had written
        main = lakefs.Repository(r.repo.id, client=_client(again)).branch("main")
        assert main.get_commit().id == head and list(main.objects(prefix="d/")) == []
        with pytest.raises(lakefs_sdk.exceptions.ApiException) as conflict:
            api.import_cancel(r.repo.id, "main", import_id)
        assert conflict.value.status == 409
        # the same import started again completes
        done = (
            main.import_data(commit_message="again")
            .prefix(f"{r.ns}/in/", destination="d/")
            .run(poll_interval=timedelta(seconds=0.1))
        )
        assert done.completed and done.ingested_objects == 2 * PAGE
        assert len(list(main.objects(prefix="d/"))) == 2 * PAGE
    finally:
        again.stop()


def test_import_errors(server: ServerProcess, moto: MotoServer, proxy: ThreadedProxy) -> None:
    r = _repo(server, moto, proxy)
    other = _repo(server, moto, proxy)
    other.put("secret/x", b"not yours")
    api = _client(server).sdk_client.import_api

    def start(path: str, branch: str = "main") -> Any:
        return api.import_start(
            r.repo.id,
            branch,
            lakefs_sdk.ImportCreation(
                paths=[
                    lakefs_sdk.ImportLocation(type="common_prefix", path=path, destination="d/")
                ],
                commit=lakefs_sdk.CommitCreation(message="m"),
            ),
        )

    for outside in (
        f"{other.ns}/secret/",  # another repository's namespace
        f"s3://{r.bucket}/elsewhere/",  # the bucket, outside the namespace
        f"{r.ns}/_lsm/",  # the service's own files
        f"{r.ns}/../{other.repo.id}/",
        "file:///etc/",
    ):
        with pytest.raises(lakefs_sdk.exceptions.BadRequestException):
            start(outside)
    with pytest.raises(lakefs_sdk.exceptions.NotFoundException):
        api.import_status(r.repo.id, "main", "no-such-import")
    with pytest.raises(lakefs_sdk.exceptions.NotFoundException):
        start(f"{r.ns}/in/", branch="no-such-branch")
    r.repo.branch("main").object("x").upload(b"x")  # nothing else in the branch changes
    _client(server).sdk_client.repositories_api.set_branch_protection_rules(
        r.repo.id, [lakefs_sdk.BranchProtectionRule(pattern="main")]
    )
    with pytest.raises(lakefs_sdk.exceptions.ForbiddenException):
        start(f"{r.ns}/in/")
    # an import started elsewhere is not found on another branch
    r.repo.branch("dev").create(source_reference="main")
    started = start(f"{r.ns}/in/", branch="dev").id
    with pytest.raises(lakefs_sdk.exceptions.NotFoundException):
        api.import_status(r.repo.id, "main", started)
