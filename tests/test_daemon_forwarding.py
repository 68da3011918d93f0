"""Writes forwarded to their branch's owner: three real ``lsmstore serve`` processes with
``server_affinity = on`` on one real redis-server.  A write sent to a daemon that does
not own its branch is applied by the owner (its metrics say so) and readable from every
daemon; a forwarded request is checked by the owner (member signature, time, body, the
caller's key generation and role) and never forwarded again; a killed owner is passed
over and the write applied where it arrived."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from signal import SIGKILL

import boto3
import httpx
import orjson
import pytest
from botocore.config import Config

import lsmstore
from lsmstore.affinity import branch_key, rendezvous_owner
from lsmstore.refstore.base import Member
from lsmstore.remote.client import RemoteStore
from lsmstore.server.forwarding import HEADER, Forwarded, member_key, sign
from lsmstore.testing.daemons import metric
from lsmstore.testing.server_process import ServerProcess, start_server

SECRET = "a-signing-secret-shared-by-every-daemon-" + "y" * 16
#: Bodies forwarded at most (the tests' small writes are far below).
FORWARD_MAX = 16 * 1024


def _env(redis_server_url: str) -> dict[str, str]:
    return {
        "LSMSTORE_REFSTORE": f"{redis_server_url}?prefix=fwd-{uuid.uuid4().hex[:8]}:",
        "LSMSTORE_SERVER_AUTH_SECRET_KEY": SECRET,
        "LSMSTORE_SERVER_AUTH_REVALIDATE_S": "0.5",
        "LSMSTORE_SERVER_AFFINITY": "on",
        "LSMSTORE_SERVER_MEMBER_HEARTBEAT_S": "0.2",
        # long: a killed daemon stays listed for the whole test (never expires mid-way)
        "LSMSTORE_SERVER_MEMBER_TTL_S": "30",
        "LSMSTORE_SERVER_FORWARD_MAX_BYTES": str(FORWARD_MAX),
    }


@pytest.fixture
def daemons(tmp_path: Path, redis_server_url: str) -> Iterator[list[ServerProcess]]:
    env = _env(redis_server_url)
    procs = [start_server(tmp_path / "a", env=env)]
    try:
        for name in ("b", "c"):
            procs.append(start_server(tmp_path / name, env=env, admin=procs[0].admin))
        yield procs
    finally:
        for p in procs:
            p.stop(SIGKILL)


def _member(d: ServerProcess) -> Member:
    return Member(str(d.events("listening")[0]["member"]), d.url, 0.0)


def _metric(d: ServerProcess, outcome: str) -> float:
    return metric(d, "lsmstore_forwarded_writes_total", outcome=outcome)


def _batch_url(d: ServerProcess, repo: str, branch: str) -> str:
    return f"{d.api}/lsm/repositories/{repo}/branches/{branch}/batch"


def _post(
    d: ServerProcess, repo: str, branch: str, body: bytes, headers: dict[str, str] | None = None
) -> httpx.Response:
    """A JSON batch, its redirect not followed."""
    return httpx.post(_batch_url(d, repo, branch), auth=d.admin, content=body,
                      headers={"content-type": "application/json", **(headers or {})})  # fmt: skip


def _kv(key: str, value: bytes) -> list[object]:
    return ["kv", key, base64.b64encode(value).decode()]


def _get(d: ServerProcess, repo: str, branch: str, key: str) -> httpx.Response:
    return httpx.get(
        f"{d.api}/lsm/repositories/{repo}/refs/{branch}/kv", params={"key": key}, auth=d.admin
    )


def _setup(daemons: list[ServerProcess]) -> tuple[str, str, int]:
    """A repository, and a branch owned by daemons[1] (created through daemons[0]);
    waits until every daemon names that owner, by watching a write through daemons[0]
    be forwarded."""
    a = daemons[0]
    repo = f"r{uuid.uuid4().hex[:8]}"
    r = httpx.post(a.api + "/repositories", auth=a.admin,
                   json={"name": repo, "storage_namespace": f"local://{repo}"})  # fmt: skip
    assert r.status_code == 201, r.text
    members = [_member(d) for d in daemons]
    branch = next(
        f"b{i}" for i in range(1000)
        if rendezvous_owner(members, branch_key(repo, f"b{i}")) == members[1]
    )  # fmt: skip
    r = httpx.post(f"{a.api}/repositories/{repo}/branches", auth=a.admin,
                   json={"name": branch, "source": "main"})  # fmt: skip
    assert r.status_code == 201, r.text
    # Until daemons[0] has read the three members (heartbeats of 0.2 s; 60 s at most,
    # a bound on a broken test): probe writes are applied wherever they land.
    for n in range(600):
        before = _metric(a, "forwarded")
        r = httpx.post(_batch_url(a, repo, branch), auth=a.admin,
                       json=[_kv(f"probe{n}", b"p")])  # fmt: skip
        assert r.status_code == 200, r.text
        if _metric(a, "forwarded") > before:
            return repo, branch, n
        time.sleep(0.1)
    raise AssertionError("daemons[0] never forwarded to the owner")


def test_a_write_is_applied_by_the_branch_owner_and_read_everywhere(
    daemons: list[ServerProcess],
) -> None:
    a, b, c = daemons
    repo, branch, _ = _setup(daemons)
    received = _metric(b, "received")
    for i in range(20):
        via = (a, c)[i % 2]
        r = httpx.post(_batch_url(via, repo, branch), auth=via.admin,
                       json=[_kv(f"k{i}", f"v{i}".encode())])  # fmt: skip
        assert r.status_code == 200 and r.json() == {"entries": 1}, r.text
    assert _metric(b, "received") >= received + 20
    assert _metric(b, "forwarded") == 0  # the owner applies what it is sent
    # The lakeFS upload route is forwarded too (multipart body, metadata headers kept).
    up = httpx.post(f"{c.api}/repositories/{repo}/branches/{branch}/objects",
                    params={"path": "data/x.csv"}, auth=c.admin,
                    files={"content": ("x.csv", b"1,2\n", "text/csv")},
                    headers={"x-lakefs-meta-origin": "forwarded"})  # fmt: skip
    assert up.status_code == 201, up.text
    assert up.json()["path"] == "data/x.csv"
    for d in daemons:
        for i in range(20):
            got = _get(d, repo, branch, f"k{i}")
            assert got.status_code == 200 and got.content == f"v{i}".encode()
        stat = httpx.get(f"{d.api}/repositories/{repo}/refs/{branch}/objects/stat",
                         params={"path": "data/x.csv"}, auth=d.admin)  # fmt: skip
        assert stat.json()["metadata"] == {"origin": "forwarded"}


def test_large_or_chunked_bodies_are_applied_where_they_arrive(
    daemons: list[ServerProcess],
) -> None:
    a, b, _ = daemons
    repo, branch, _ = _setup(daemons)
    forwarded = _metric(a, "forwarded")
    big = orjson.dumps([_kv(f"big{i}", b"x" * 1024) for i in range(20)])
    assert len(big) > FORWARD_MAX
    assert _post(a, repo, branch, big).status_code == 200

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked
        yield orjson.dumps([_kv("chunked", b"c")])

    r = httpx.post(_batch_url(a, repo, branch), auth=a.admin, content=chunks(),
                   headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 200, r.text
    assert _metric(a, "forwarded") == forwarded  # both applied by a itself
    assert _get(b, repo, branch, "big19").content == b"x" * 1024
    assert _get(b, repo, branch, "chunked").content == b"c"


def _signed(
    d: ServerProcess, repo: str, branch: str, body: bytes, *, key_id: str, generation: str,
    issued: int | None = None, secret: str = SECRET, sign_body: bytes | None = None,
) -> httpx.Response:  # fmt: skip
    target = f"/api/v1/lsm/repositories/{repo}/branches/{branch}/batch"
    f = Forwarded("someone", key_id, generation, int(time.time()) if issued is None else issued)
    value = sign(member_key(secret.encode()), "POST", target, f,
                 body if sign_body is None else sign_body)  # fmt: skip
    return httpx.post(d.url + target, content=body,
                      headers={HEADER: value, "content-type": "application/json"})  # fmt: skip


async def _generation(env: dict[str, str], key_id: str) -> str:
    from lsmstore.refstore.url import open_refstore
    from lsmstore.server.auth import KIND, Credential

    store = open_refstore(env["LSMSTORE_REFSTORE"])
    try:
        return Credential.decode(await store.get_record(KIND, key_id)).generation
    finally:
        await store.aclose()


async def test_the_owner_checks_a_forwarded_request(daemons: list[ServerProcess]) -> None:
    a, b, c = daemons
    repo, branch, _ = _setup(daemons)
    reader = a.create_key("reader")
    writer = a.create_key("writer")
    gen_w = await _generation(a.env, writer[0])
    gen_r = await _generation(a.env, reader[0])
    body = orjson.dumps([_kv("signed", b"s")])

    def signed(**kw: object) -> httpx.Response:
        return _signed(b, repo, branch, body, **kw)  # type: ignore[arg-type]

    refused = [
        signed(key_id=writer[0], generation=gen_w, secret="another-secret-" + "z" * 32),
        signed(key_id=writer[0], generation=gen_w, issued=int(time.time()) - 120),
        signed(key_id=writer[0], generation=gen_w, sign_body=b"[]"),
        signed(key_id=writer[0], generation="0" * 32),  # a generation the key never had
    ]
    assert [r.status_code for r in refused] == [401, 401, 401, 401]
    assert all(r.json()["type"] == "PermissionDeniedError" for r in refused)
    assert signed(key_id=reader[0], generation=gen_r).status_code == 403
    assert _get(b, repo, branch, "signed").status_code == 404  # nothing written
    # A well-signed request is applied, even where the branch is not owned: a forwarded
    # request is never forwarded again.
    forwarded = _metric(c, "forwarded")
    r = _signed(c, repo, branch, body, key_id=writer[0], generation=gen_w)
    assert r.status_code == 200, r.text
    assert _metric(c, "forwarded") == forwarded
    assert _get(a, repo, branch, "signed").content == b"s"
    # A key deleted (and created again under its id) no longer names a caller.
    assert a.cli("credentials", "delete", writer[0]).returncode == 0
    a.create_key("writer", key_id=writer[0])
    for _ in range(100):  # until b re-reads the key (revalidate 0.5 s; 10 s at most)
        r = _signed(b, repo, branch, body, key_id=writer[0], generation=gen_w)
        if r.status_code == 401:
            break
        await asyncio.sleep(0.1)
    assert r.status_code == 401


def test_a_killed_owner_is_passed_over(daemons: list[ServerProcess]) -> None:
    a, b, c = daemons
    repo, branch, _ = _setup(daemons)
    b.stop(SIGKILL)
    # At once (its record still live): a cannot connect, applies the writes itself.
    fallback = _metric(a, "fallback")
    for i in range(5):
        r = httpx.post(_batch_url(a, repo, branch), auth=a.admin,
                       json=[_kv(f"after{i}", b"x")])  # fmt: skip
        assert r.status_code == 200, r.text
    assert _metric(a, "fallback") >= fallback + 1
    for d in (a, c):
        for i in range(5):
            assert _get(d, repo, branch, f"after{i}").content == b"x"


async def test_redirect_mode_sends_the_client_to_the_owner(
    tmp_path: Path, redis_server_url: str
) -> None:
    env = {**_env(redis_server_url), "LSMSTORE_SERVER_FORWARD_MODE": "redirect"}
    daemons = [start_server(tmp_path / "a", env=env)]
    try:
        for name in ("b", "c"):
            daemons.append(start_server(tmp_path / name, env=env, admin=daemons[0].admin))
        a, b, c = daemons
        repo = f"r{uuid.uuid4().hex[:8]}"
        members = [_member(d) for d in daemons]
        branch = next(
            f"b{i}" for i in range(1000)
            if rendezvous_owner(members, branch_key(repo, f"b{i}")) == members[1]
        )  # fmt: skip
        home = str(tmp_path / "client")
        store = lsmstore.connect(a.url, access_key_id=a.admin[0],
                                 secret_access_key=a.admin[1], home=home)  # fmt: skip
        assert isinstance(store, RemoteStore)
        async with store:
            r = await store.create_repository(repo, storage_namespace=f"local://{repo}")
            await r.create_branch(branch, source="main")
            body = orjson.dumps([_kv("direct", b"d")])
            for _ in range(600):  # until a has read the three members (60 s at most)
                answer = _post(a, repo, branch, body)
                if answer.status_code == 307:
                    break
                assert answer.status_code == 200, answer.text
                await asyncio.sleep(0.1)
            assert answer.status_code == 307
            assert answer.headers["location"] == _batch_url(b, repo, branch)
            assert answer.headers["x-lsm-owner"] == members[1].name
            redirected = _metric(a, "redirected")
            # The remote client follows it once, to the owner, with its credentials.
            await r.branch(branch).put_many([(f"k{i}", f"v{i}".encode()) for i in range(10)])
            await r.branch(branch).put("one", b"1")
            assert _metric(a, "redirected") >= redirected + 2
            assert _metric(b, "forwarded") == 0 and _metric(b, "redirected") == 0
        for d in daemons:
            assert _get(d, repo, branch, "one").content == b"1"
            assert _get(d, repo, branch, "k9").content == b"v9"
        # A write marked as sent again after a redirect is applied where it lands.
        again = _post(c, repo, branch, body, {"x-lsm-redirected": "1"})
        assert again.status_code == 200, again.text
        assert _get(a, repo, branch, "direct").content == b"d"
    finally:
        for p in daemons:
            p.stop(SIGKILL)


def test_an_s3_put_is_forwarded_to_the_owner(daemons: list[ServerProcess]) -> None:
    """The S3 gateway's PutObject through a daemon that does not own the branch: the
    owner applies it (checked by the member signature in place of the S3 one), the
    client sees the owner's answer, every daemon reads the object."""
    a, b, _ = daemons
    repo, branch, _ = _setup(daemons)
    s3 = boto3.client(
        "s3", endpoint_url=a.url, aws_access_key_id=a.admin[0],
        aws_secret_access_key=a.admin[1], region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )  # fmt: skip
    received = _metric(b, "received")
    for i in range(3):
        put = s3.put_object(Bucket=repo, Key=f"{branch}/s3/o{i}.txt", Body=f"s3-{i}".encode(),
                            Metadata={"via": "gateway"})  # fmt: skip
        assert put["ResponseMetadata"]["HTTPStatusCode"] == 200
        assert put["ETag"]
    assert _metric(b, "received") >= received + 3
    for d in daemons:
        for i in range(3):
            got = httpx.get(f"{d.api}/repositories/{repo}/refs/{branch}/objects",
                            params={"path": f"s3/o{i}.txt"}, auth=d.admin)  # fmt: skip
            assert got.status_code == 200 and got.content == f"s3-{i}".encode()
    head = s3.head_object(Bucket=repo, Key=f"{branch}/s3/o0.txt")
    assert head["Metadata"] == {"via": "gateway"}
