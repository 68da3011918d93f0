"""Object data-plane over raw HTTP: what lakectl sends (multipart ``content`` part,
``/statistics``), chunked uploads, metadata headers, conditional writes, ranged and
conditional reads, and the bounds (object size 413, path length 400, slow client 408)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.server import make_repo

from lsmstore.testing.server_process import ServerProcess, start_server


def _objects(repo: str, branch: str = "main") -> str:
    return f"/repositories/{repo}/branches/{branch}/objects"


def _read(repo: str, ref: str = "main") -> str:
    return f"/repositories/{repo}/refs/{ref}/objects"


def test_lakectl_multipart_upload_and_statistics(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    # what lakectl's ClientUpload sends: multipart/form-data with a part named "content"
    r = admin.post(
        _objects(repo),
        params={"path": "data/file.csv"},
        files={"content": ("file.csv", b"a,b\n1,2\n", "text/csv")},
        data={"other": "ignored"},
        headers={"x-lakefs-meta-Source": "lakectl", "user-agent": "lakectl/1.70.0"},
    )
    assert r.status_code == 201, r.text
    stats = r.json()
    assert stats["size_bytes"] == 8 and stats["content_type"] == "text/csv"
    assert stats["metadata"] == {"source": "lakectl"}
    got = admin.get(_read(repo), params={"path": "data/file.csv"})
    assert got.content == b"a,b\n1,2\n" and got.headers["content-type"] == "text/csv"
    # a part before "content" is skipped
    body = (
        b'--XYZ\r\nContent-Disposition: form-data; name="first"\r\n\r\nnot this\r\n'
        b'--XYZ\r\nContent-Disposition: form-data; name="content"; filename="f"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n--XY--\r\nbinary\r\n"
        b"--XYZ--\r\n"
    )
    r = admin.post(_objects(repo), params={"path": "f"}, content=body,
                   headers={"content-type": "multipart/form-data; boundary=XYZ"})  # fmt: skip
    assert r.status_code == 201, r.text
    assert admin.get(_read(repo), params={"path": "f"}).content == b"--XY--\r\nbinary"
    no_part = admin.post(_objects(repo), params={"path": "g"}, files={"file": ("g", b"x")})
    assert no_part.status_code == 400
    stats_call = admin.post(
        "/statistics", json={"events": [{"class": "c", "name": "n", "count": 1}]}
    )
    assert stats_call.status_code == 204


def test_chunked_upload_with_metadata_and_exclusive_mode(admin: httpx.Client) -> None:
    repo = make_repo(admin)

    def chunks() -> Iterator[bytes]:
        for i in range(50):
            yield bytes([i]) * 10_000

    r = admin.post(_objects(repo), params={"path": "big.bin"}, content=chunks(),
                   headers={"x-lakefs-meta-K": "v"})  # fmt: skip
    assert r.status_code == 201, r.text
    assert r.json()["size_bytes"] == 500_000
    stat = admin.get(_read(repo) + "/stat", params={"path": "big.bin"}).json()
    assert stat["metadata"] == {"k": "v"} and stat["content_type"] == "application/octet-stream"
    again = admin.post(_objects(repo), params={"path": "big.bin"}, content=b"x",
                       headers={"if-none-match": "*"})  # fmt: skip
    assert again.status_code == 412 and again.json()["message"]
    assert admin.get(_read(repo), params={"path": "big.bin"}).content == b"".join(chunks())


def test_ranged_and_conditional_reads(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    data = bytes(range(256)) * 40  # 10240 bytes
    assert admin.post(_objects(repo), params={"path": "r"}, content=data).status_code == 201
    url, q = _read(repo), {"path": "r", "presign": "False"}
    r = admin.get(url, params=q, headers={"range": "bytes=0-4194303"})
    assert r.status_code == 206 and r.headers["content-range"] == "bytes 0-10239/10240"
    assert r.content == data
    r = admin.get(url, params=q, headers={"range": "bytes=100-199"})
    assert r.status_code == 206 and r.content == data[100:200]
    assert r.headers["content-range"] == "bytes 100-199/10240"
    r = admin.get(url, params=q, headers={"range": "bytes=10000-"})
    assert r.content == data[10000:]
    r = admin.get(url, params=q, headers={"range": "bytes=-16"})
    assert r.status_code == 206 and r.content == data[-16:]
    r = admin.get(url, params=q, headers={"range": "bytes=10240-"})
    assert r.status_code == 416 and r.headers["content-range"] == "bytes */10240"
    etag = admin.get(url, params=q).headers["etag"]
    assert admin.get(url, params=q, headers={"if-none-match": etag}).status_code == 304
    head = admin.head(url, params={"path": "r"})
    assert head.status_code == 200 and head.headers["content-length"] == "10240"
    assert head.headers["etag"] == etag and head.content == b""
    missing = admin.head(url, params={"path": "none"})
    assert missing.status_code == 404
    assert admin.get(url, params={"path": "none"}).status_code == 404
    assert admin.get(url, params={"path": "r", "presign": "True"}).status_code == 400


def test_paths_bounds_and_missing_things(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    long_path = "p/" + "x" * 1100
    r = admin.post(_objects(repo), params={"path": long_path}, content=b"x")
    assert r.status_code == 400 and r.json()["message"]
    assert admin.post(_objects(repo), params={}, content=b"x").status_code == 400
    r = admin.post(_objects(repo, "nobranch"), params={"path": "a"}, content=b"x")
    assert r.status_code == 404
    assert admin.delete(_objects(repo), params={"path": "absent"}).status_code == 404
    r = admin.post(_objects(repo) + "/delete", json={"paths": "notalist"})
    assert r.status_code == 400
    r = admin.post(_objects(repo) + "/delete", json={"paths": ["a"] * 1001})
    assert r.status_code == 400
    listing = admin.get(_read(repo) + "/ls").json()
    assert listing["results"] == []


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"LSMSTORE_SERVER_MAX_OBJECT_BYTES": "1MiB", "LSMSTORE_SERVER_BODY_TIMEOUT_S": "1"}
    proc = start_server(Path(tmp_path_factory.mktemp("small")) / "home", env=env)
    try:
        yield proc
    finally:
        proc.stop()


def test_oversized_upload_is_413_and_nothing_is_staged(small_server: ServerProcess) -> None:
    with httpx.Client(base_url=small_server.api, auth=small_server.admin, timeout=60) as c:
        repo = make_repo(c)

        def too_much() -> Iterator[bytes]:
            for _ in range(20):
                yield b"z" * 100_000

        r = c.post(_objects(repo), params={"path": "big"}, content=too_much())
        assert r.status_code == 413 and r.json()["message"]
        declared = c.post(_objects(repo), params={"path": "big"}, content=b"z" * (2 << 20))
        assert declared.status_code == 413
        assert c.get(_read(repo) + "/ls").json()["results"] == []
        ok = c.post(_objects(repo), params={"path": "fits"}, content=b"z" * 1000)
        assert ok.status_code == 201


def test_slow_client_gets_408_and_nothing_is_staged(small_server: ServerProcess) -> None:
    with httpx.Client(base_url=small_server.api, auth=small_server.admin, timeout=60) as c:
        repo = make_repo(c)
    host, port = small_server.url.removeprefix("http://").split(":")
    import base64

    cred = base64.b64encode(":".join(small_server.admin).encode()).decode()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(
            f"POST /api/v1{_objects(repo)}?path=slow HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Basic {cred}\r\nContent-Length: 100\r\n\r\npartial".encode()
        )
        deadline = time.monotonic() + 30
        reply = b""
        while b"\r\n\r\n" not in reply and time.monotonic() < deadline:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    with httpx.Client(base_url=small_server.api, auth=small_server.admin) as c:
        assert c.get(_read(repo) + "/ls").json()["results"] == []
