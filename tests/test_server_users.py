"""lakeFS's setup and user/credential routes over access keys, driven by the official
SDK's ``AuthApi`` / ``InternalApi`` (lakefs-sdk 1.88.0) against real server processes."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import httpx
import lakefs_sdk
import pytest
from helpers.cli import Cli
from helpers.server import unique
from lakefs.client import Client

from lsmstore.testing.server_process import ServerProcess, start_server


def _sdk(server: ServerProcess, key: tuple[str, str]) -> lakefs_sdk.ApiClient:
    return Client(host=server.url, username=key[0], password=key[1]).sdk_client


@pytest.fixture(scope="module")
def sdk(server: ServerProcess) -> lakefs_sdk.ApiClient:
    return _sdk(server, server.admin)


def test_users_and_credentials_through_the_sdk(
    server: ServerProcess, sdk: lakefs_sdk.ApiClient
) -> None:
    auth = sdk.auth_api
    name = unique("user")
    user = auth.create_user(user_creation=lakefs_sdk.UserCreation(id=name))
    assert user.id == name and user.creation_date > 0
    assert auth.get_user(name).id == name
    ids = [u.id for u in auth.list_users(amount=1000).results]
    assert name in ids and server.admin[0] in ids  # a key of its own is a user too

    made = auth.create_credentials(name)
    assert made.access_key_id and len(made.secret_access_key) >= 20
    listed = auth.list_user_credentials(name).results
    assert [c.access_key_id for c in listed] == [made.access_key_id]
    assert auth.get_credentials(name, made.access_key_id).access_key_id == made.access_key_id

    # The new key works, as the user, with the user's role (reader by default).
    theirs = _sdk(server, (made.access_key_id, made.secret_access_key))
    assert theirs.auth_api.get_current_user().user.id == name
    theirs.repositories_api.list_repositories()
    with pytest.raises(lakefs_sdk.ApiException) as refused:
        theirs.repositories_api.create_repository(
            lakefs_sdk.RepositoryCreation(name=unique(), storage_namespace="local://x")
        )
    assert refused.value.status == 403
    with pytest.raises(lakefs_sdk.ApiException) as refused:
        theirs.auth_api.list_users()
    assert refused.value.status == 403

    auth.delete_credentials(name, made.access_key_id)
    with pytest.raises(lakefs_sdk.ApiException) as gone:
        theirs.repositories_api.list_repositories()
    assert gone.value.status == 401
    assert auth.list_user_credentials(name).results == []

    auth.delete_user(name)
    with pytest.raises(lakefs_sdk.ApiException) as missing:
        auth.get_user(name)
    assert missing.value.status == 404


def test_role_and_scope_of_a_user_reach_its_keys(
    server: ServerProcess, admin: httpx.Client
) -> None:
    name, repo = unique("user"), unique()
    r = admin.post("/repositories", json={"name": repo, "storage_namespace": f"local://{repo}"})
    assert r.status_code == 201, r.text
    r = admin.post("/auth/users", json={"id": name, "role": "writer", "repositories": [repo]})
    assert r.status_code == 201 and r.json()["role"] == "writer", r.text
    assert admin.post("/auth/users", json={"id": name}).status_code == 409
    made = admin.post(f"/auth/users/{name}/credentials").json()
    key = (made["access_key_id"], made["secret_access_key"])
    with httpx.Client(base_url=server.api, auth=key, timeout=60) as c:
        up = c.post(f"/repositories/{repo}/branches/main/objects", params={"path": "a"},
                    content=b"x")  # fmt: skip
        assert up.status_code == 201, up.text
        assert c.get("/repositories").json()["results"] == [
            r for r in c.get("/repositories").json()["results"] if r["id"] == repo
        ]
        assert c.get("/auth/users").status_code == 403
    # Deleting the user deletes its keys.
    assert admin.delete(f"/auth/users/{name}").status_code == 204
    with httpx.Client(base_url=server.api, auth=key, timeout=60) as c:
        assert c.get("/repositories").status_code == 401


def test_bad_requests_and_keys_of_their_own(server: ServerProcess, admin: httpx.Client) -> None:
    assert admin.post("/auth/users", json={"id": "a b"}).status_code == 400
    assert admin.post("/auth/users", json={"id": "x", "role": "root"}).status_code == 400
    assert admin.get("/auth/users/nobody").status_code == 404
    assert admin.get("/auth/users/nobody/credentials").status_code == 404
    # The --init key is a user of its own: listed, with itself as credentials, and it
    # neither gets another key nor deletes itself.
    me = server.admin[0]
    creds = admin.get(f"/auth/users/{me}/credentials").json()["results"]
    assert [c["access_key_id"] for c in creds] == [me]
    r = admin.post(f"/auth/users/{me}/credentials")
    assert r.status_code == 409 and r.json()["type"] == "RecordExistsError"
    assert admin.delete(f"/auth/users/{me}").status_code == 400
    assert admin.delete(f"/auth/users/{me}/credentials/{me}").status_code == 400
    # A key limited to repositories manages no users, whatever its role.
    scoped = server.create_key("admin", (unique(),))
    with httpx.Client(base_url=server.api, auth=scoped, timeout=60) as c:
        assert c.get("/auth/users").status_code == 403


def test_groups_and_policies_answer_501_saying_why(admin: httpx.Client) -> None:
    for path in ("/auth/groups", "/auth/policies", "/auth/users/x/groups"):
        r = admin.get(path)
        assert r.status_code == 501
        assert "role" in r.json()["message"] and "groups" in r.json()["message"]


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path / "home", init=False,
                        env={"LSMSTORE_SERVER_SETUP_LAKEFS": "on"})  # fmt: skip
    try:
        yield proc
    finally:
        proc.stop()


def test_setup_creates_the_first_admin_once(fresh: ServerProcess) -> None:
    internal = lakefs_sdk.ApiClient(lakefs_sdk.Configuration(host=fresh.api)).__enter__()
    api = lakefs_sdk.InternalApi(internal)
    assert api.get_setup_state().state == "not_initialized"
    made = api.setup(lakefs_sdk.Setup(username="jane.doe"))
    key = (made.access_key_id, made.secret_access_key)
    sdk = _sdk(fresh, key)
    assert sdk.auth_api.get_current_user().user.id == "jane.doe"
    assert sdk.auth_api.get_user("jane.doe").id == "jane.doe"
    sdk.repositories_api.create_repository(
        lakefs_sdk.RepositoryCreation(name="after-setup", storage_namespace="local://s")
    )
    # Set up now (lakeFS's SDK sends no credentials to these routes).
    assert api.get_setup_state().state == "initialized"
    with pytest.raises(lakefs_sdk.ApiException) as again:
        api.setup(lakefs_sdk.Setup(username="mallory"))
    assert again.value.status == 409
    assert [u.id for u in sdk.auth_api.list_users().results] == ["jane.doe"]
    doc = httpx.get(f"{fresh.api}/openapi.json").json()
    assert doc["paths"]["/api/v1/setup_lakefs"]["post"]["security"] == []


def test_concurrent_setups_create_one_admin(fresh: ServerProcess) -> None:
    def setup(i: int) -> int:
        body = {
            "username": f"admin{i}",
            "key": {"access_key_id": f"AKIALSETUP{i}", "secret_access_key": f"secret-{i}-xxxxxxxx"},
        }
        return httpx.post(f"{fresh.api}/setup_lakefs", json=body, timeout=60).status_code

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        codes = sorted(pool.map(setup, range(4)))
    assert sorted(codes) == [200, 409, 409, 409], codes
    winner = [i for i in range(4)
              if httpx.get(f"{fresh.api}/user", auth=(f"AKIALSETUP{i}", f"secret-{i}-xxxxxxxx"),
                           timeout=60).status_code == 200]  # fmt: skip
    assert len(winner) == 1


def test_setup_is_closed_unless_the_server_opens_it(tmp_path: Path) -> None:
    proc = start_server(tmp_path / "home", init=False)
    try:
        for method in ("GET", "POST"):
            r = httpx.request(method, f"{proc.api}/setup_lakefs", json={"username": "x"})
            assert r.status_code == 401
        doc = httpx.get(f"{proc.api}/openapi.json").json()
        assert doc["paths"]["/api/v1/setup_lakefs"]["post"].get("security") != []
        key = proc.create_key("reader")
        assert httpx.get(f"{proc.api}/setup_lakefs", auth=key).json()["state"] == "initialized"
        r = httpx.post(f"{proc.api}/setup_lakefs", auth=key, json={"username": "x"})
        assert r.status_code == 409
    finally:
        proc.stop()


def test_cli_manages_users_on_a_server(server: ServerProcess, tmp_path: Path) -> None:
    """``lsmstore auth users ...`` (lakectl's commands) through our remote client."""
    key, secret = server.admin
    cli = Cli(tmp_path / "home", {"LSMSTORE_SERVER_URL": server.url,
                                  "LSMSTORE_ACCESS_KEY_ID": key,
                                  "LSMSTORE_SECRET_ACCESS_KEY": secret})  # fmt: skip
    name = unique("user")
    made = cli.json("auth", "users", "create", "--id", name, "--role", "writer")
    assert made["id"] == name and made["role"] == "writer"
    assert name in [u["id"] for u in cli.json("auth", "users", "list")]
    cred = cli.json("auth", "users", "credentials", "create", "--id", name)
    assert cred["secret_access_key"]
    listed = cli.json("auth", "users", "credentials", "list", "--id", name)
    assert [c["access_key_id"] for c in listed] == [cred["access_key_id"]]
    # The new key is a writer's: it works through the CLI too.
    env = {"LSMSTORE_SERVER_URL": server.url, "LSMSTORE_ACCESS_KEY_ID": cred["access_key_id"],
           "LSMSTORE_SECRET_ACCESS_KEY": cred["secret_access_key"]}  # fmt: skip
    theirs = Cli(tmp_path / "home2", env)
    assert theirs("repo", "list").returncode == 0
    refused = theirs("auth", "users", "list")
    assert refused.returncode != 0 and "may not" in refused.stderr
    cli("auth", "users", "credentials", "delete", "--id", name,
        "--access-key-id", cred["access_key_id"], check=True)  # fmt: skip
    assert cli.json("auth", "users", "credentials", "list", "--id", name) == []
    cli("auth", "users", "delete", "--id", name, check=True)
    gone = cli("auth", "users", "delete", "--id", name)
    assert gone.returncode != 0 and "no user" in gone.stderr
    # Users are a server's: the embedded store says so.
    embedded = Cli(tmp_path / "home3")("auth", "users", "list")
    assert embedded.returncode == 11 and "server" in embedded.stderr
