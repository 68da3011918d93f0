"""Imports from outside a repository's namespace through the server: the official
``lakefs`` SDK against a real server process on moto, importing from a bucket the
operator allows (``server_import_sources``), refused without the setting, outside it,
or where the allowed place overlaps a repository's namespace; and the retention of
finished imports' records (an injected clock)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import boto3
import httpx
import lakefs
import lakefs_sdk
import lakefs_sdk.exceptions
import pytest
from lakefs.client import Client
from lakefs.exceptions import BadRequestException

from lsmstore.client import Store
from lsmstore.config import load_config
from lsmstore.errors import ImportNotFoundError, InvalidInputError
from lsmstore.operations import imports
from lsmstore.testing.server_process import ServerProcess, start_server
from lsmstore.testing.servers import MotoServer, new_bucket
from lsmstore.types import ImportPath
from tests.test_imports import wait


class World:
    """Buckets on moto: ``ns`` holds repositories' namespaces, ``ext`` the data to
    import (``raw/`` allowed, ``other/`` not), ``shared`` is allowed whole but holds
    the namespace of repository ``held``."""

    def __init__(self, moto: MotoServer) -> None:
        self.moto = moto
        self.ns, self.ext, self.shared = (
            asyncio.run(new_bucket(moto.endpoint, p)) for p in ("ns", "ext", "shared")
        )
        self.s3 = boto3.client(
            "s3", endpoint_url=moto.endpoint, region_name="us-east-1",
            aws_access_key_id="test", aws_secret_access_key="test",
        )  # fmt: skip
        self.etags = {}
        for key, data in {"raw/a.csv": b"a,1", "raw/sub/b.csv": b"b,22", "other/c": b"c"}.items():
            r = self.s3.put_object(Bucket=self.ext, Key=key, Body=data)
            self.etags[key] = str(r["ETag"]).strip('"')
        self.s3.put_object(Bucket=self.shared, Key="data/d", Body=b"d")
        self.names = iter(range(1_000_000))

    def env(self, sources: str | None) -> dict[str, str]:
        out = {
            "LSMSTORE_SERVER_NAMESPACE_ENDPOINTS": self.moto.endpoint,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
        }
        if sources is not None:
            out["LSMSTORE_SERVER_IMPORT_SOURCES"] = sources
        return out

    def namespace(self, bucket: str, name: str) -> str:
        return f"s3://{bucket}/{name}?endpoint_url={self.moto.endpoint}"

    def repo(self, server: ServerProcess) -> lakefs.Repository:
        name = f"src-{next(self.names):04d}"
        return lakefs.Repository(name, client=_client(server)).create(
            storage_namespace=self.namespace(self.ns, name)
        )


def _client(server: ServerProcess) -> Client:
    key, secret = server.admin
    return Client(host=server.url, username=key, password=secret)


@pytest.fixture(scope="module")
def world(moto: MotoServer) -> World:
    return World(moto)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, world: World) -> Iterator[ServerProcess]:
    """A server allowing ``ext/raw/`` and all of ``shared``, whose RefStore holds
    repository ``held`` on ``shared``: created after the server started, by a daemon of
    the same RefStore without the setting (the granting one's API refuses it, and a
    daemon does not start granting a place that holds a namespace)."""
    home = Path(tmp_path_factory.mktemp("import-sources")) / "home"
    landing = home / "data" / "landing" / "day=1"
    landing.mkdir(parents=True)
    (landing / "rows.txt").write_bytes(b"local rows")
    proc = start_server(home, env=world.env(granted(world)))
    try:
        other = start_server(home, env=world.env(None), admin=proc.admin)
        try:
            lakefs.Repository("held", client=_client(other)).create(
                storage_namespace=world.namespace(world.shared, "held")
            )
        finally:
            other.stop()
        yield proc
    finally:
        proc.stop()


def granted(world: World) -> str:
    return f"s3://{world.ext}/raw/, s3://{world.shared}/ local://landing/"


def _start(server: ServerProcess, repo: str, path: str, kind: str = "common_prefix") -> str:
    created = _client(server).sdk_client.import_api.import_start(
        repo,
        "main",
        lakefs_sdk.ImportCreation(
            paths=[lakefs_sdk.ImportLocation(type=kind, path=path, destination="in/")],
            commit=lakefs_sdk.CommitCreation(message="m"),
        ),
    )
    return str(created.id)


def _refused(server: ServerProcess, repo: str, path: str) -> dict[str, str]:
    """The error body of an import of ``path`` that the server refuses (400)."""
    with pytest.raises(lakefs_sdk.exceptions.BadRequestException) as e:
        _start(server, repo, path)
    body: dict[str, str] = json.loads(str(e.value.body))
    return body


def test_import_from_an_allowed_bucket(server: ServerProcess, world: World) -> None:
    repo = world.repo(server)
    main = repo.branch("main")
    status = (
        main.import_data(commit_message="from ext")
        .prefix(f"s3://{world.ext}/raw/", destination="in/")
        .object(f"s3://{world.ext}/raw/a.csv", destination="one.csv")
        .run(poll_interval=timedelta(seconds=0.1))
    )
    assert status.completed and status.error is None and status.ingested_objects == 3
    listed = {o.path: o for o in main.objects()}
    assert sorted(listed) == ["in/a.csv", "in/sub/b.csv", "one.csv"]
    for path, key in (("in/a.csv", "raw/a.csv"), ("in/sub/b.csv", "raw/sub/b.csv")):
        o = listed[path]
        assert o.physical_address == f"s3://{world.ext}/{key}"  # referenced, not copied
        assert o.checksum == world.etags[key]
    # read back through the server, from the other bucket
    assert main.object("in/sub/b.csv").reader().read() == b"b,22"
    assert main.object("one.csv").reader().read() == b"a,1"


def test_import_from_an_allowed_local_directory(server: ServerProcess) -> None:
    repo = lakefs.Repository("local-src", client=_client(server)).create(
        storage_namespace="local://repos/local-src"
    )
    main = repo.branch("main")
    status = (
        main.import_data(commit_message="from landing")
        .prefix("local://landing/", destination="in/")
        .run(poll_interval=timedelta(seconds=0.1))
    )
    assert status.completed and status.error is None and status.ingested_objects == 1
    o = main.object("in/day=1/rows.txt")
    assert o.stat().physical_address == "local://landing/day=1/rows.txt"
    assert o.reader().read() == b"local rows"
    body = _refused(server, repo.id, "local://elsewhere/")
    assert body["type"] == "ImportSourceNotAllowedError", body


def test_sources_outside_the_setting_are_refused(server: ServerProcess, world: World) -> None:
    repo = world.repo(server)
    for outside in (
        f"s3://{world.ext}/other/",  # the bucket, outside the allowed prefix
        f"s3://{world.ext}/raw",  # no trailing slash: not under the prefix
        f"s3://{world.ext}/raw/../other/",
    ):
        body = _refused(server, repo.id, outside)
        assert body["type"] in ("ImportSourceNotAllowedError", "InvalidInputError"), body
    body = _refused(server, repo.id, f"s3://{world.ext}/other/")
    assert body["type"] == "ImportSourceNotAllowedError"
    assert "server.import_sources" in body["message"]
    assert list(repo.branch("main").objects()) == []
    # a link may not name an allowed import source
    with pytest.raises(lakefs_sdk.exceptions.BadRequestException):
        _client(server).sdk_client.staging_api.link_physical_address(
            repo.id,
            "main",
            "linked",
            lakefs_sdk.StagingMetadata(
                staging=lakefs_sdk.StagingLocation(physical_address=f"s3://{world.ext}/raw/a.csv"),
                checksum=world.etags["raw/a.csv"],
                size_bytes=3,
            ),
        )


def test_an_allowed_place_overlapping_a_namespace_is_refused(
    server: ServerProcess, world: World
) -> None:
    repo = world.repo(server)
    # ``shared`` is allowed whole, but repository ``held`` lives there
    body = _refused(server, repo.id, f"s3://{world.shared}/data/")
    assert body["type"] == "ImportSourceNotAllowedError", body
    assert "held" in body["message"] and "server.import_sources" in body["message"]
    body = _refused(server, repo.id, f"s3://{world.shared}/held/")
    assert body["type"] == "ImportSourceNotAllowedError", body
    # and no repository may be created inside an allowed place
    with pytest.raises(BadRequestException) as e:
        lakefs.Repository("inside-raw", client=_client(server)).create(
            storage_namespace=world.namespace(world.ext, "raw/repo")
        )
    assert "server.import_sources" in str(e.value)


def test_a_daemon_granting_a_place_that_holds_a_namespace_does_not_start(
    server: ServerProcess, world: World
) -> None:
    # ``held`` now lives in ``shared``: a daemon granting all of it refuses to start
    # (reads follow the granted places, so it would let any writer read ``held``)
    with pytest.raises(RuntimeError, match="did not start") as e:
        start_server(server.home, env=world.env(granted(world)), admin=server.admin)
    assert "the server does not start" in str(e.value) and "repository held" in str(e.value)
    assert "server.import_sources" in str(e.value)
    # granting only places that hold none, it starts
    srv = start_server(server.home, env=world.env(f"s3://{world.ext}/raw/"), admin=server.admin)
    srv.stop()


def test_a_withdrawn_grant_makes_imported_entries_unreadable_not_lost(
    server: ServerProcess, world: World
) -> None:
    repo = world.repo(server)
    main = repo.branch("main")
    status = (
        main.import_data(commit_message="from ext")
        .prefix(f"s3://{world.ext}/raw/", destination="in/")
        .run(poll_interval=timedelta(seconds=0.1))
    )
    assert status.completed
    # a daemon of the same RefStore without the grant (or this one restarted without
    # it): a typed 400 naming the address, nothing deleted
    other = start_server(server.home, env=world.env(None), admin=server.admin)
    try:
        got = httpx.get(f"{other.api}/repositories/{repo.id}/refs/main/objects",
                        params={"path": "in/a.csv"}, auth=other.admin)  # fmt: skip
        assert got.status_code == 400, got.text
        assert got.json()["type"] == "CorruptFileError"
        assert f"s3://{world.ext}/raw/a.csv" in got.json()["message"]
    finally:
        other.stop()
    # with the grant (as when it is given back) the entries read as before
    got = httpx.get(f"{server.api}/repositories/{repo.id}/refs/main/objects",
                    params={"path": "in/a.csv"}, auth=server.admin)  # fmt: skip
    assert got.status_code == 200 and got.content == b"a,1"
    assert world.s3.get_object(Bucket=world.ext, Key="raw/a.csv")["Body"].read() == b"a,1"


def test_refused_without_the_setting(tmp_path: Path, world: World) -> None:
    srv = start_server(tmp_path / "home", env=world.env(None))
    try:
        repo = world.repo(srv)
        body = _refused(srv, repo.id, f"s3://{world.ext}/raw/")
        assert body["type"] == "ImportSourceNotAllowedError"
        assert "server.import_sources" in body["message"]
    finally:
        srv.stop()


async def test_records_of_finished_imports_are_pruned(tmp_path: Path) -> None:
    """A finished import's records go once ``import_records_retention_s`` passed, when
    another import of the repository starts; running ones and recent ones stay."""
    now = [1_000_000.0]
    config = load_config(home=tmp_path / "home", import_records_retention_s=3600)
    async with Store(config, clock=lambda: now[0]) as store:
        repo = await store.create_repository("pruned", storage_namespace=(tmp_path / "ns").as_uri())
        other = await store.create_repository("other", storage_namespace=(tmp_path / "o").as_uri())
        main = repo.branch("main")
        await main.upload("src/x", b"x")
        await main.commit("x")
        prefix = f"{(tmp_path / 'ns').as_uri()}/data/"
        old = await main.import_start([ImportPath(prefix, "a/")], "old")
        assert (await wait(main, old)).completed
        elsewhere = await other.branch("main").import_start(
            [ImportPath(f"{(tmp_path / 'o').as_uri()}/", "a/")], "other's"
        )
        await wait(other.branch("main"), elsewhere)
        now[0] += 3599
        recent = await main.import_start([ImportPath(prefix, "b/")], "recent")
        assert (await wait(main, recent)).completed
        await main.import_status(old)  # not yet past the retention
        now[0] += 2
        newest = await main.import_start([ImportPath(prefix, "c/")], "newest")
        assert (await wait(main, newest)).completed
        with pytest.raises(ImportNotFoundError):
            await main.import_status(old)
        await main.import_status(recent)
        await other.branch("main").import_status(elsewhere)  # another repository's
        assert await imports.prune(repo) == 0
        now[0] += 7200
        assert await imports.prune(repo) == 2
        with pytest.raises(ImportNotFoundError):
            await main.import_status(newest)


def test_the_setting_is_checked_when_loaded(tmp_path: Path) -> None:
    ok = load_config(home=tmp_path, server_import_sources="s3://a/raw/, local://landing/")
    assert ok.server_import_sources == "s3://a/raw/, local://landing/"
    for bad in ("s3://a/raw", "http://a/raw/", "s3://a/raw/?endpoint_url=http://x", "mem://a/"):
        with pytest.raises(InvalidInputError, match="server_import_sources"):
            load_config(home=tmp_path, server_import_sources=bad)
