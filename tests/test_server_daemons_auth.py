"""Several servers on one RefStore agree on credentials: real ``lsmstore serve``
processes on one real redis-server.  A key deleted and created again changes on every
server within ``server_auth_revalidate_s`` (and its old tokens die), failed logins are
counted once for all servers, and of servers started with ``--init`` on an empty
RefStore exactly one creates and prints an admin key."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import httpx
import pytest

from lsmstore.refstore.url import open_refstore
from lsmstore.server.auth import Authenticator, RecordStore
from lsmstore.server.credentials import init_admin
from lsmstore.testing.server_process import ServerProcess, start_server

SECRET = "a-signing-secret-shared-by-every-server-" + "x" * 16
REVALIDATE_S = 1.0
ENV = {
    "LSMSTORE_SERVER_AUTH_SECRET_KEY": SECRET,
    "LSMSTORE_SERVER_AUTH_REVALIDATE_S": str(REVALIDATE_S),
    "LSMSTORE_SERVER_AUTH_MAX_FAILURES_PER_CLIENT": "0",
    "LSMSTORE_SERVER_AUTH_FAILURE_WINDOW_S": "3600",
}
#: Failures of one key id allowed per window (the servers of the throttle test).
PER_KEY = 4


def _env(redis_server_url: str) -> dict[str, str]:
    """The servers' settings, with a fresh Redis RefStore (also for the commands that
    ``ServerProcess.cli`` runs in the same environment)."""
    return {**ENV, "LSMSTORE_REFSTORE": f"{redis_server_url}?prefix=test:{uuid.uuid4().hex}:"}


@pytest.fixture(params=[0])
def servers(
    tmp_path: Path, redis_server_url: str, request: pytest.FixtureRequest
) -> Iterator[list[ServerProcess]]:
    """Two servers, each with its own home (and cache), on one Redis RefStore; the
    parameter is their per-key failure limit (0: none)."""
    env = {
        **_env(redis_server_url),
        "LSMSTORE_SERVER_AUTH_MAX_FAILURES_PER_KEY": str(request.param),
    }
    first = start_server(tmp_path / "a", env=env)
    procs = [first]
    try:
        procs.append(start_server(tmp_path / "b", env=env, admin=first.admin))
        yield procs
    finally:
        for p in procs:
            p.stop()


def _get(server: ServerProcess, auth: tuple[str, str] | None = None, token: str = "") -> int:
    headers = {"authorization": f"Bearer {token}"} if token else None
    return httpx.get(server.api + "/repositories", auth=auth, headers=headers).status_code


def _create_repo(server: ServerProcess, auth: tuple[str, str]) -> int:
    name = f"r{uuid.uuid4().hex[:10]}"
    body = {"name": name, "storage_namespace": f"local://{name}"}
    return httpx.post(server.api + "/repositories", json=body, auth=auth).status_code


def _login(server: ServerProcess, key: tuple[str, str]) -> str:
    r = httpx.post(
        server.api + "/auth/login", json={"access_key_id": key[0], "secret_access_key": key[1]}
    )
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


def test_a_reused_key_id_changes_on_every_server_and_its_tokens_die(
    servers: list[ServerProcess],
) -> None:
    a, b = servers
    old = a.create_key("admin", key_id="AKIAREUSEDKEY01")
    for s in servers:  # both servers verify (and remember) the admin key
        assert _get(s, old) == 200
        assert _create_repo(s, old) == 201
    token = _login(a, old)
    assert _get(b, token=token) == 200  # one secret signs for every server

    out = a.cli("credentials", "delete", old[0])
    assert out.returncode == 0, out.stderr
    new = a.create_key("reader", key_id=old[0])
    assert new[1] != old[1]
    # The new secret works at once, with the new role, on a server that remembers the
    # old generation.
    assert _get(b, new) == 200
    assert _create_repo(b, new) == 403

    time.sleep(REVALIDATE_S)  # the documented bound, by the servers' own clocks
    for s in (a, b):
        assert _get(s, old) == 401
        assert _get(s, token=token) == 401
        assert _create_repo(s, old) == 401
        assert _get(s, new) == 200
        assert _create_repo(s, new) == 403


def test_a_deleted_key_stops_on_every_server_within_the_bound(
    servers: list[ServerProcess],
) -> None:
    key = servers[0].create_key("writer")
    tokens = [_login(s, key) for s in servers]
    for s in servers:
        assert _get(s, key) == 200
    out = servers[1].cli("credentials", "delete", key[0])
    assert out.returncode == 0, out.stderr
    time.sleep(REVALIDATE_S)
    for s in servers:
        assert _get(s, key) == 401
        for token in tokens:
            assert _get(s, token=token) == 401


@pytest.mark.parametrize("servers", [PER_KEY], indirect=True)
def test_failed_logins_are_counted_once_for_every_server(
    servers: list[ServerProcess],
) -> None:
    a, b = servers
    key = a.create_key("reader")
    assert PER_KEY == 4
    for s in (a, a, b, b):  # 4 failures in all: the limit, though 2 per server
        assert _get(s, (key[0], "wrong-secret")) == 401
    for s in (a, b):
        r = httpx.get(s.api + "/repositories", auth=key)
        assert r.status_code == 429, r.text
        assert 3000 < int(r.headers["Retry-After"]) <= 3600
    other = a.create_key("reader")  # another key id is not affected
    assert _get(b, other) == 200


async def test_concurrent_inits_on_one_refstore_create_one_key(
    redis_server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Five processes' worth of ``--init`` (each its own connections) at once."""
    url = _env(redis_server_url)["LSMSTORE_REFSTORE"]
    stores = [open_refstore(url) for _ in range(5)]
    try:
        auths = [Authenticator(cast(RecordStore, s)) for s in stores]
        created = await asyncio.gather(*(init_admin(a) for a in auths))
        assert sorted(created) == [False, False, False, False, True]
        assert capsys.readouterr().out.count("secret_access_key:") == 1
        keys = await auths[0].list_keys()
        assert [k.role for k in keys] == ["admin"]
        assert not await init_admin(auths[1])  # later runs find the key
    finally:
        for s in stores:
            await s.aclose()


def _decided(server: ServerProcess) -> str | None:
    """ "printed" when the server printed a key, "declined" when it logged that one
    exists, None while it has done neither yet."""
    if any(line.startswith("secret_access_key") for line in list(server.out_lines)):
        return "printed"
    if server.events("keys_exist") or server.events("first_key_missing"):
        return "declined"
    return None


@pytest.mark.parametrize("round_", range(2))
def test_init_on_an_empty_refstore_creates_one_admin_key(
    tmp_path: Path, redis_server_url: str, round_: int
) -> None:
    env = _env(redis_server_url)
    started: list[ServerProcess] = []
    errors: list[BaseException] = []

    def run(home: Path) -> None:
        go.wait()
        try:
            started.append(start_server(home, env=env, admin=("-", "-")))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(tmp_path / n,)) for n in ("a", "b", "c")]
    go = threading.Barrier(len(threads))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        deadline = time.monotonic() + 60
        while any(_decided(s) is None for s in started) and time.monotonic() < deadline:
            time.sleep(0.05)
        outcomes = sorted(str(_decided(s)) for s in started)
        assert outcomes == ["declined", "declined", "printed"], [s.out_lines for s in started]
        listed = started[0].cli("credentials", "list")
        assert listed.returncode == 0, listed.stderr
        keys = [line for line in listed.stdout.splitlines() if line.strip()]
        assert len(keys) == 1 and "\tadmin\t" in keys[0], keys
    finally:
        for s in started:
            s.stop()
