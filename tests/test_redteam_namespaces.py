"""Storage namespaces attacked through the API of real server processes.

Each case is something an API caller tried: taking, nesting or wrapping another
repository's namespace, linking into it, naming a ``mem://`` store or an S3 endpoint of
its choice, a NUL in a namespace; and what several daemons on one Redis RefStore must
agree on: where a ``local://`` namespace lives, and which repository a name means after
it was deleted and created again elsewhere.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgpack
import pytest

from lsmstore.testing.server_process import ServerProcess, start_server
from lsmstore.testing.servers import MotoServer, new_bucket


@pytest.fixture(scope="module")
def refstore_url(redis_server_url: str) -> str:
    return f"{redis_server_url}?prefix=redteam-{uuid.uuid4().hex[:8]}:"


@pytest.fixture(scope="module")
def daemons(
    tmp_path_factory: pytest.TempPathFactory, refstore_url: str, moto: MotoServer
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two daemons on one Redis RefStore, each with its own home (and so its own
    ``$LSMSTORE_HOME/data``); moto's endpoint is the one S3 endpoint they allow."""
    env = {
        "LSMSTORE_REFSTORE": refstore_url,
        "LSMSTORE_SERVER_NAMESPACE_ENDPOINTS": moto.endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        # a shared RefStore: both servers sign tokens with one configured secret
        "LSMSTORE_SERVER_AUTH_SECRET_KEY": secrets.token_hex(32),
    }
    base = Path(tmp_path_factory.mktemp("redteam"))
    a = start_server(base / "a", env=env)
    try:
        b = start_server(base / "b", env=env, admin=a.admin)
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


@pytest.fixture(scope="module")
def a(daemons: tuple[ServerProcess, ServerProcess]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=daemons[0].api, auth=daemons[0].admin, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def b(daemons: tuple[ServerProcess, ServerProcess]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=daemons[1].api, auth=daemons[0].admin, timeout=60) as c:
        yield c


def create(client: httpx.Client, name: str, namespace: str) -> httpx.Response:
    return client.post("/repositories", json={"name": name, "storage_namespace": namespace})


def upload(client: httpx.Client, repo: str, path: str, data: bytes) -> httpx.Response:
    return client.post(
        f"/repositories/{repo}/branches/main/objects", params={"path": path}, content=data
    )


def read(client: httpx.Client, repo: str, path: str) -> httpx.Response:
    return client.get(f"/repositories/{repo}/refs/main/objects", params={"path": path})


def batch(client: httpx.Client, repo: str, entries: list[object]) -> httpx.Response:
    return client.post(
        f"/lsm/repositories/{repo}/branches/main/batch",
        content=msgpack.packb(entries),
        headers={"content-type": "application/msgpack"},
    )


def test_a_namespace_equal_to_inside_or_around_another_is_refused(a: httpx.Client) -> None:
    assert create(a, "victim", "local://victim").status_code == 201
    assert upload(a, "victim", "precious", b"acknowledged").status_code == 201
    for ns in (
        "local://victim",
        "local://victim/data",
        "local://victim/_lsm",
        "local://victim/x/y",
    ):
        r = create(a, "thief", ns)
        assert r.status_code == 409, (ns, r.text)
        assert "overlaps" in r.json()["message"]
    assert create(a, "team-c", "local://team/c").status_code == 201
    r = create(a, "team", "local://team")
    assert r.status_code == 409 and "team-c" in r.json()["message"]
    # A sibling whose name only starts the same is another place.
    assert create(a, "victim2", "local://victim2").status_code == 201
    # No namespace lies in an _lsm area, even where no repository is known around it.
    r = create(a, "thief", "local://nobody/_lsm/staging")
    assert r.status_code == 409 and r.json()["type"] == "NamespaceInUseError", r.text
    assert "_lsm" in r.json()["message"]
    assert a.get("/repositories/thief").status_code == 404
    assert read(a, "victim", "precious").content == b"acknowledged"


def test_a_scoped_admin_cannot_move_its_repository_onto_another(
    daemons: tuple[ServerProcess, ServerProcess], a: httpx.Client
) -> None:
    assert create(a, "owned", "local://owned").status_code == 201
    assert upload(a, "owned", "secret", b"owned data").status_code == 201
    stats = a.get("/repositories/owned/refs/main/objects/stat", params={"path": "secret"}).json()
    assert create(a, "mine", "local://mine").status_code == 201
    key = daemons[0].create_key("admin", ("mine",))
    with httpx.Client(base_url=daemons[0].api, auth=key, timeout=60) as scoped:
        # Reading the other repository's object through a link to its address.
        r = batch(scoped, "mine", [["link", "stolen", stats["physical_address"],
                                    stats["size_bytes"], stats["checksum"]]])  # fmt: skip
        assert r.status_code == 400, r.text
        assert read(scoped, "mine", "stolen").status_code == 404
        # Deleting its own repository and re-creating it on the victim's namespace.
        assert scoped.delete("/repositories/mine").status_code == 204
        for ns in ("local://owned", "local://owned/data"):
            r = create(scoped, "mine", ns)
            assert r.status_code == 409, r.text
    assert read(a, "owned", "secret").content == b"owned data"


def test_mem_namespaces_are_refused(a: httpx.Client) -> None:
    r = create(a, "volatile", "mem://volatile")
    assert r.status_code == 400 and "mem://" in r.json()["message"]
    assert a.get("/repositories/volatile").status_code == 404


def test_s3_endpoints_come_from_the_server_configuration(a: httpx.Client, moto: MotoServer) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        for ns in (
            f"s3://bucket/p?endpoint_url=http://127.0.0.1:{port}/",
            f"s3://bucket/p?path_style=true&endpoint_url=http%3A%2F%2F127.0.0.1%3A{port}",
        ):
            r = create(a, "ssrf", ns)
            assert r.status_code == 400, r.text
            assert "endpoint" in r.json()["message"]
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected to the caller's endpoint
    finally:
        listener.close()
    bucket = asyncio.run(new_bucket(moto.endpoint, "redteam"))
    ns = f"s3://{bucket}/r?endpoint_url={moto.endpoint}&path_style=true"
    assert create(a, "on-s3", ns).status_code == 201
    assert upload(a, "on-s3", "k", b"in moto").status_code == 201
    assert read(a, "on-s3", "k").content == b"in moto"


def test_a_nul_in_a_namespace_is_a_bad_request(a: httpx.Client) -> None:
    for ns in ("local://a%00b", "local://a\x00b", "local://a/%00"):
        r = create(a, "nul", ns)
        assert r.status_code == 400, (ns, r.status_code, r.text)


def test_the_config_says_what_the_api_accepts(a: httpx.Client) -> None:
    storage = a.get("/config").json()["storage_config"]
    assert storage == a.get("/config/storage").json()
    regex = re.compile(storage["blockstore_namespace_ValidityRegex"])
    assert storage["blockstore_type"] == "local"
    assert regex.match(storage["blockstore_namespace_example"])
    assert regex.match("local://x") and regex.match("s3://bucket/p")
    assert not regex.match("file:///tmp/x") and not regex.match("mem://x")
    assert create(a, "as-file", "file:///tmp/as-file").status_code == 400


def test_physical_addresses_are_relative_to_the_namespace(
    daemons: tuple[ServerProcess, ServerProcess], a: httpx.Client
) -> None:
    assert create(a, "addr", "local://addr").status_code == 201
    stats = upload(a, "addr", "o", b"object").json()
    address = stats["physical_address"]
    assert address.startswith("local://addr/data/"), address
    assert str(daemons[0].home) not in address
    listed = a.get("/repositories/addr/refs/main/objects/ls").json()["results"]
    assert listed[0]["physical_address"] == address
    # ... and the same form is accepted back.
    r = batch(a, "addr", [["link", "again", address, stats["size_bytes"], stats["checksum"]]])
    assert r.status_code == 200, r.text
    assert read(a, "addr", "again").content == b"object"


def test_every_daemon_uses_where_the_namespace_was_created(
    a: httpx.Client, b: httpx.Client
) -> None:
    """Daemon B has another ``$LSMSTORE_HOME``: it reads and writes the directory daemon
    A resolved ``local://shared`` to, not its own."""
    assert create(a, "shared", "local://shared").status_code == 201
    assert upload(a, "shared", "from-a", b"a").status_code == 201
    assert read(b, "shared", "from-a").content == b"a"
    assert upload(b, "shared", "from-b", b"b").status_code == 201
    assert read(a, "shared", "from-b").content == b"b"
    assert a.post("/repositories/shared/branches/main/commits",
                  json={"message": "both"}).status_code == 201  # fmt: skip
    assert read(b, "shared", "from-a").content == b"a"


def test_a_repository_recreated_elsewhere_is_not_written_through_a_stale_daemon(
    a: httpx.Client, b: httpx.Client, moto: MotoServer
) -> None:
    """B keeps a writer of the first ``rr7``; after A deletes it and creates ``rr7`` on
    another namespace, nothing B acknowledges may land in the old namespace."""
    bucket = asyncio.run(new_bucket(moto.endpoint, "rr7"))
    options = f"?endpoint_url={moto.endpoint}&path_style=true"
    assert create(a, "rr7", f"s3://{bucket}/r7-one{options}").status_code == 201
    assert batch(b, "rr7", [["put", "old", b"first life"]]).status_code == 200
    assert read(b, "rr7", "old").content == b"first life"
    assert a.delete("/repositories/rr7").status_code == 204
    assert create(a, "rr7", f"s3://{bucket}/r7-two{options}").status_code == 201
    acknowledged: list[str] = []
    for i in range(600):  # until B has read the new repository (its cache is short)
        r = batch(b, "rr7", [["put", f"new/{i}", f"second life {i}".encode()]])
        assert r.status_code in (200, 404), r.text
        if r.status_code == 200:
            acknowledged.append(f"new/{i}")
            if len(acknowledged) >= 3:
                break
        else:
            time.sleep(0.05)
    assert len(acknowledged) >= 3
    for daemon in (a, b):
        assert read(daemon, "rr7", "old").status_code == 404
        for path in acknowledged:
            r = read(daemon, "rr7", path)
            assert r.status_code == 200, r.text
            assert r.content.startswith(b"second life")
    assert a.post("/repositories/rr7/branches/main/commits",
                  json={"message": "second"}).status_code == 201  # fmt: skip
    for path in acknowledged:
        assert read(b, "rr7", path).status_code == 200
