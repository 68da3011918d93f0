"""Red team: a real server process attacked the way an outsider, a holder of a small
key, or a reader of the RefStore would.  Every route of the app's route table refuses
every kind of bad credential with 401; roles and scopes answer 403 (a scoped key can
neither create repositories elsewhere nor learn their names); tokens cannot be minted
from the RefStore's contents, outlive their key's generation, or be forged, expired or
signed with another secret; a shared RefStore needs a configured signing secret;
unknown key ids cost the same scrypt work as wrong secrets; local state is private;
traversal in namespaces and link addresses is refused."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lsmstore.config import load_config
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.server import auth as auth_module
from lsmstore.server.app import build_router
from lsmstore.server.auth import Authenticator
from lsmstore.server.errors import ApiError
from lsmstore.server.routing import Route
from lsmstore.server.serve import make_context
from lsmstore.testing.server_process import ServerProcess, start_server

#: Routes without credentials: health, the API document, login, and the web UI's page
#: and static files (no data: the page asks the API, with credentials, for everything).
OPEN = {"healthCheck", "liveness", "readiness", "getOpenAPI", "login", "uiIndex", "uiAsset"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The embedded default (its generated signing secret), no failure limits (this
    module fails on purpose; tests/test_server_throttle.py tests them)."""
    env = {"LSMSTORE_SERVER_AUTH_MAX_FAILURES_PER_KEY": "0",
           "LSMSTORE_SERVER_AUTH_MAX_FAILURES_PER_CLIENT": "0"}  # fmt: skip
    home = tmp_path_factory.mktemp("redteam") / "home"
    proc = start_server(home, "--status-file", str(home / "status.json"), env=env)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> list[Route]:
    """The app's route table (built as the server builds it)."""
    home = tmp_path_factory.mktemp("routes")
    ctx = make_context(load_config(home=home, environ={}))
    try:
        return list(build_router(ctx, "1").routes)
    finally:
        asyncio.run(ctx.store.aclose())


@pytest.fixture(scope="module")
def world(server: ServerProcess) -> dict[str, Any]:
    """Two repositories and keys of every role, some limited to ``alpha``."""
    with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as c:
        for name in ("alpha", "beta"):
            r = c.post("/repositories", json={"name": name, "storage_namespace": f"local://{name}"})
            assert r.status_code == 201, r.text
        up = c.post("/repositories/alpha/branches/main/objects", params={"path": "a.txt"},
                    files={"content": ("a.txt", b"alpha data")})  # fmt: skip
        assert up.status_code == 201, up.text
        up = c.post("/repositories/beta/branches/main/objects", params={"path": "b.txt"},
                    files={"content": ("b.txt", b"beta data")})  # fmt: skip
        assert up.status_code == 201, up.text
        assert c.get("/repositories/alpha/refs/main/objects", params={"path": "a.txt"}).content
    return {
        "reader": server.create_key("reader"),
        "writer": server.create_key("writer"),
        "admin": server.create_key("admin"),
        "alpha_admin": server.create_key("admin", ("alpha",)),
        "alpha_reader": server.create_key("reader", ("alpha",)),
    }


def _fill(template: str, repo: str) -> str:
    values = {"repository": repo, "branch": "main", "destinationBranch": "main", "tag": "t",
              "commitId": "main", "ref": "main", "leftRef": "main", "rightRef": "main",
              "sourceRef": "main", "workspace": "w", "run_id": "0" * 22,
              "hook_run_id": "0000_0000", "userId": "u",
              "accessKeyId": "AKIALNOSUCHKEY"}  # fmt: skip
    out = template
    for name, value in values.items():
        out = out.replace("{" + name + "}", value)
    assert "{" not in out, f"unfilled parameter in {template}"
    return out


def _call(client: httpx.Client, route: Route, repo: str, headers: dict[str, str]) -> int:
    r = client.request(
        route.method, _fill(route.template, repo), headers=headers, params={"path": "p"},
        json={} if route.method in ("POST", "PUT") else None,
    )  # fmt: skip
    return r.status_code


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _token(key: bytes, doc: dict[str, Any]) -> str:
    payload = _b64(json.dumps(doc).encode())
    return f"{payload}.{_b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())}"


def _basic(user: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()


def _records(server: ServerProcess) -> list[tuple[str, str, bytes]]:
    """The RefStore's small records, read from its database file as a local user with
    read access to it would."""
    con = sqlite3.connect(f"file:{server.home / 'refs' / 'refs.sqlite3'}?mode=ro", uri=True)
    try:
        return [(k, n, bytes(v)) for k, n, v in con.execute("SELECT * FROM records")]
    finally:
        con.close()


def _generation(server: ServerProcess, key_id: str) -> str:
    for kind, name, value in _records(server):
        if kind == "credentials" and name == key_id:
            return str(json.loads(value)["generation"])
    raise AssertionError(f"no record of {key_id}")


def _login(server: ServerProcess, key: tuple[str, str]) -> str:
    r = httpx.post(server.api + "/auth/login",
                   json={"access_key_id": key[0], "secret_access_key": key[1]})  # fmt: skip
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


# --- 401 everywhere ---------------------------------------------------------------------


def test_every_route_refuses_every_bad_credential(
    server: ServerProcess, routes: list[Route], world: dict[str, Any]
) -> None:
    admin_id = server.admin[0]
    secret = (server.home / "auth-secret").read_text().strip().encode()
    gen = _generation(server, admin_id)
    good = _login(server, server.admin)
    payload, _, sig = good.partition(".")
    now = int(time.time())
    bad: dict[str, dict[str, str]] = {
        "none": {},
        "empty": {"authorization": ""},
        "unknown scheme": {"authorization": "Digest username=x"},
        "basic not base64": {"authorization": "Basic !!!"},
        "basic without colon": {"authorization": "Basic " + base64.b64encode(b"x").decode()},
        "basic not utf-8": {"authorization": "Basic " + base64.b64encode(b"\xff:\xfe").decode()},
        "wrong secret": {"authorization": _basic(admin_id, "wrong-secret-123")},
        "unknown key": {"authorization": _basic("AKIANOSUCHKEY0000000", server.admin[1])},
        "bearer junk": {"authorization": "Bearer not-a-token"},
        "forged signature": {"authorization": f"Bearer {payload}.{sig[::-1]}"},
        "forged payload": {
            "authorization": "Bearer "
            + _b64(json.dumps({"sub": admin_id, "gen": gen, "exp": now + 10**6}).encode())
            + "."
            + sig
        },
        "expired": {
            "authorization": "Bearer "
            + _token(secret, {"sub": admin_id, "gen": gen, "exp": now - 1})
        },
        "another secret": {
            "authorization": "Bearer "
            + _token(b"another-secret-" * 4, {"sub": admin_id, "gen": gen, "exp": now + 3600})
        },
        "no generation": {
            "authorization": "Bearer " + _token(secret, {"sub": admin_id, "exp": now + 3600})
        },
        "other generation": {
            "authorization": "Bearer "
            + _token(secret, {"sub": admin_id, "gen": "0" * 32, "exp": now + 3600})
        },
    }
    secured = [r for r in routes if r.operation_id not in OPEN]
    assert {r.operation_id for r in routes if r.permission is None} == OPEN
    assert len(secured) > 40
    failures = []
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for route in secured:
            for what, headers in bad.items():
                status = _call(c, route, "alpha", headers)
                if status != 401:
                    failures.append((route.operation_id, what, status))
        for what, headers in bad.items():  # a lakeFS route this server lacks: 401 first
            assert c.get("/api/v1/auth/groups", headers=headers).status_code == 401, what
        assert c.get("/api/v1/auth/groups", auth=server.admin).status_code == 501
    assert not failures, failures


def test_the_open_ui_holds_no_data(server: ServerProcess, world: dict[str, Any]) -> None:
    page = httpx.get(server.url + "/")
    assert page.status_code == 200
    for secret in ("alpha", "beta", server.admin[0], server.admin[1]):
        assert secret not in page.text


def test_tokens_cannot_be_minted_from_the_refstore(server: ServerProcess) -> None:
    """Whoever reads the RefStore finds no signing key: a token signed with any record
    it holds is refused, and the server's secret is in no RefStore file."""
    admin_id = server.admin[0]
    gen = _generation(server, admin_id)
    records = _records(server)
    assert not [r for r in records if r[0] == "settings" and "sign" in r[1]]
    doc = {"sub": admin_id, "gen": gen, "exp": 4102444800}
    with httpx.Client(base_url=server.api, timeout=60) as c:
        for _, _, value in records:
            token = _token(value, doc)
            body = {"name": "minted", "storage_namespace": "local://minted"}
            r = c.post("/repositories", json=body, headers={"authorization": f"Bearer {token}"})
            assert r.status_code == 401
    secret = (server.home / "auth-secret").read_bytes().strip()
    for f in (server.home / "refs").iterdir():
        assert secret not in f.read_bytes(), f


def test_a_token_dies_with_its_key_generation(server: ServerProcess) -> None:
    key = server.create_key("reader", key_id="AKIAREDTEAMREUSE")
    token = _login(server, key)
    hdr = {"authorization": f"Bearer {token}"}
    assert httpx.get(server.api + "/repositories", headers=hdr).status_code == 200
    assert server.cli("credentials", "delete", key[0]).returncode == 0
    again = server.create_key("admin", key_id=key[0])
    assert httpx.get(server.api + "/repositories", auth=again).status_code == 200
    body = {"name": "reused", "storage_namespace": "local://reused"}
    r = httpx.post(server.api + "/repositories", json=body, headers=hdr)
    assert r.status_code == 401, r.text  # the reader's token is not the new admin's
    assert httpx.get(server.api + "/repositories", headers=hdr).status_code == 401


# --- 403: roles and scopes ------------------------------------------------------------------


def test_roles_below_a_routes_permission_get_403(
    server: ServerProcess, routes: list[Route], world: dict[str, Any]
) -> None:
    below = {"write": ("reader",), "admin": ("reader", "writer")}
    failures = []
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for route in routes:
            for role in below.get(str(route.permission), ()):
                key = world[role]
                headers = {"authorization": _basic(*key)}
                status = _call(c, route, "alpha", headers)
                if status != 403:
                    failures.append((route.operation_id, role, status))
    assert not failures, failures


def test_a_scoped_key_gets_403_on_every_route_of_another_repository(
    server: ServerProcess, routes: list[Route], world: dict[str, Any]
) -> None:
    headers = {"authorization": _basic(*world["alpha_admin"])}
    failures = []
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for route in routes:
            if "{repository}" in route.template:
                status = _call(c, route, "beta", headers)
                if status != 403:
                    failures.append((route.operation_id, status))
        listed = c.get("/api/v1/repositories", headers=headers).json()["results"]
        assert [r["id"] for r in listed] == ["alpha"]
    assert not failures, failures


def test_a_scoped_admin_creates_no_repository_outside_its_scope(
    server: ServerProcess, world: dict[str, Any]
) -> None:
    """Creating ``beta`` (exists) and ``gamma`` (does not) both answer 403, alike: the
    answer tells nothing about which names exist."""
    key = world["alpha_admin"]
    answers = []
    with httpx.Client(base_url=server.api, auth=key, timeout=60) as c:
        for name in ("beta", "gamma"):
            r = c.post(
                "/repositories", json={"name": name, "storage_namespace": f"local://{name}x"}
            )
            assert r.status_code == 403, r.text
            answers.append(r.json()["message"].replace(name, "<name>"))
        assert answers[0] == answers[1]
        assert c.get("/repositories/gamma").status_code == 403
    with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as c:
        assert c.get("/repositories/gamma").status_code == 404  # nothing was created


def test_metrics_are_for_unscoped_keys(server: ServerProcess, world: dict[str, Any]) -> None:
    """Metrics carry every repository's name in their labels."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        scoped = c.get("/metrics", auth=world["alpha_reader"])
        assert scoped.status_code == 403 and "beta" not in scoped.text
        full = c.get("/metrics", auth=world["reader"])
        assert full.status_code == 200 and 'repository="beta"' in full.text


# --- timing: unknown key ids cost what known ones cost ----------------------------------------


async def test_an_unknown_key_id_costs_the_same_scrypt_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    real = auth_module.verify_secret

    def spy(secret: str, encoded: str) -> bool:
        checked.append(encoded)
        return real(secret, encoded)

    monkeypatch.setattr(auth_module, "verify_secret", spy)
    async with EmbeddedRefStore(tmp_path / "refs") as store:
        auth = Authenticator(store)  # type: ignore[arg-type]
        known, _ = await auth.create_key("reader")
        for key_id in (known.access_key_id, "AKIANOSUCHKEY0000000", "x", "k" * 500, "a/b"):
            with pytest.raises(ApiError) as e:
                await auth.check_secret(key_id, "wrong-secret-1")
            assert e.value.status == 401
    assert len(checked) == 5
    n, r, p = (int(x) for x in checked[0].split("$")[1:4])
    for encoded in checked:  # the same scrypt parameters, so the same work
        assert [int(x) for x in encoded.split("$")[1:4]] == [n, r, p]


# --- the signing secret ------------------------------------------------------------------------


def test_a_shared_refstore_needs_a_configured_secret(tmp_path: Path, redis_server_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LSMSTORE_")}
    env |= {"LSMSTORE_HOME": str(tmp_path / "home"),
            "LSMSTORE_REFSTORE": f"{redis_server_url}?prefix=test:redteam-secret:"}  # fmt: skip
    argv = [sys.executable, "-m", "lsmstore.server", "--port", "0", "--init"]
    short = {"LSMSTORE_SERVER_AUTH_SECRET_KEY": "too-short"}
    for extra, says in (({}, "server_auth_secret_key"), (short, "at least 32")):
        out = subprocess.run(argv, env=env | extra, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out.stderr  # a configuration error
        assert says in out.stderr and not out.stdout  # no key printed either
    ok = start_server(
        tmp_path / "ok",
        env={"LSMSTORE_REFSTORE": env["LSMSTORE_REFSTORE"],
             "LSMSTORE_SERVER_AUTH_SECRET_KEY": "s" * 40},
    )  # fmt: skip
    try:
        assert httpx.get(ok.api + "/repositories", auth=ok.admin).status_code == 200
        assert not (ok.home / "auth-secret").exists()  # configured: nothing generated
    finally:
        ok.stop()


# --- local state ---------------------------------------------------------------------------------


def test_local_state_is_private(server: ServerProcess, world: dict[str, Any]) -> None:
    """Every directory the server created under its home is 0700, every file 0600: the
    RefStore, its signing secret, the cache, ``local://`` data, the status file."""
    home = server.home
    with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as c:
        assert c.get("/repositories/beta/refs/main/objects", params={"path": "b.txt"}).content
    seen = set()
    loose = []
    for root, dirs, files in os.walk(home):
        for name in dirs:
            p = Path(root, name)
            seen.add(p.relative_to(home).parts[0])
            if stat.S_IMODE(p.stat().st_mode) != 0o700:
                loose.append((str(p), oct(stat.S_IMODE(p.stat().st_mode))))
        for name in files:
            p = Path(root, name)
            seen.add(p.relative_to(home).parts[0])
            if stat.S_IMODE(p.stat().st_mode) & 0o077:
                loose.append((str(p), oct(stat.S_IMODE(p.stat().st_mode))))
    assert {"refs", "auth-secret", "data", "status.json"} <= seen, seen
    assert not loose, loose
    assert (home / "refs" / "refs.sqlite3-wal").exists()


# --- traversal ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "namespace",
    ["local://../escape", "local://a/../../escape", "local:///etc", "local://./x",
     "local://a//b", "file:///tmp/escape", "local://%2e%2e/escape"],
)  # fmt: skip
def test_traversal_in_a_namespace_is_refused(
    server: ServerProcess, world: dict[str, Any], namespace: str
) -> None:
    with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as c:
        r = c.post("/repositories", json={"name": "trav", "storage_namespace": namespace})
        assert r.status_code == 400, (namespace, r.text)
        assert c.get("/repositories/trav").status_code == 404


def test_traversal_in_a_link_address_is_refused(
    server: ServerProcess, world: dict[str, Any]
) -> None:
    with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as c:
        stat_doc = c.get("/repositories/alpha/refs/main/objects/stat", params={"path": "a.txt"})
        address = stat_doc.json()["physical_address"]
        base = address[: address.index("/data/") + 1]
        batch = "/lsm/repositories/alpha/branches/main/batch"
        for target in (base + "../beta/data/x", base + "data/../../beta/x",
                       "file:///etc/passwd", base + "_lsm/staging/main/L1/x"):  # fmt: skip
            r = c.post(batch, json=[["link", "linked", target, 10, "0" * 32]])
            assert r.status_code == 400, (target, r.text)
        r = c.get("/repositories/alpha/refs/main/objects/stat", params={"path": "linked"})
        assert r.status_code == 404
