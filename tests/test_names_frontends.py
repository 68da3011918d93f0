"""lakeFS's rules for new names, refused alike by every front end against a real server:
the REST API (httpx), the official SDK, our remote client and the CLI."""

from __future__ import annotations

from pathlib import Path

import httpx
import lakefs
import pytest
from helpers.cli import Cli
from helpers.server import make_repo
from lakefs.client import Client

import lsmstore
from lsmstore.testing.server_process import ServerProcess


def test_rest_api_refuses_new_names_lakefs_refuses(admin: httpx.Client) -> None:
    for name in ("ab", "a_b", "x"):
        r = admin.post("/repositories", json={"name": name, "storage_namespace": f"local://{name}"})
        assert r.status_code == 400 and r.json()["type"] == "InvalidNameError", r.text
        assert "lakeFS" in r.json()["message"]
    repo = make_repo(admin)
    r = admin.post(f"/repositories/{repo}/branches", json={"name": "v1.0", "source": "main"})
    assert r.status_code == 400 and r.json()["type"] == "InvalidNameError", r.text
    r = admin.post(f"/repositories/{repo}/tags", json={"id": "x.lock", "ref": "main"})
    assert r.status_code == 400 and r.json()["type"] == "InvalidNameError", r.text
    ok = admin.post(f"/repositories/{repo}/tags", json={"id": "v1.0.0", "ref": "main"})
    assert ok.status_code == 201, ok.text


def test_sdk_and_server_agree(server: ServerProcess) -> None:
    client = Client(host=server.url, username=server.admin[0], password=server.admin[1])
    repo = lakefs.Repository("sdk-names", client=client).create(storage_namespace="local://sn")
    repo.branch("feature_1-x").create(source_reference="main")
    with pytest.raises(lakefs.exceptions.BadRequestException):
        repo.branch("feature.1").create(source_reference="main")


async def test_remote_client_refuses_before_sending(server: ServerProcess) -> None:
    key, secret = server.admin
    async with lsmstore.connect(server.url, access_key_id=key, secret_access_key=secret) as store:
        with pytest.raises(lsmstore.InvalidNameError, match="lakeFS"):
            await store.create_repository("a_b", storage_namespace="local://ab")
        repo = await store.create_repository("remote-names", storage_namespace="local://rn")
        with pytest.raises(lsmstore.InvalidNameError, match="lakeFS"):
            await repo.create_branch("v1.0", source="main")
        with pytest.raises(lsmstore.InvalidNameError):
            await repo.create_tag("t.lock", "main")
        await repo.create_tag("v1.0", "main")


def test_cli_refuses_new_names_lakefs_refuses(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    bad = cli("repo", "create", "lsm://a_b")
    assert bad.returncode == 2 and "lakeFS" in bad.stderr, bad.stderr
    cli("repo", "create", "lsm://cli-names", check=True)
    bad = cli("branch", "create", "lsm://cli-names/v1.0", "-s", "lsm://cli-names/main")
    assert bad.returncode == 2 and "lakeFS" in bad.stderr, bad.stderr
