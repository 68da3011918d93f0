"""Resource limits, tried as an attacker would, against a real server process: request
heads that never end or arrive a byte at a time, connections that send nothing or too
many of them, ``Expect: 100-continue`` answered without reading the body, batch bodies
that decode to far more than they weigh, a staged SST that decompresses to gigabytes,
and the small things that answered 500 or a cut-off 200 (docs/security.md, "Limits").

Raw sockets where the HTTP client would hide the bytes.  Every wait is bounded and
waits for an event (an answer, a close), never for a duration.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgpack
import pytest
from helpers.server import make_repo

from lsmstore.testing.server_process import ServerProcess, start_server

#: The longest any single wait for an answer or a close may take (an event that does
#: not come within it is the failure).
WAIT_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The server of this module (``admin``, helpers/server.py, is its client)."""
    env = {"LSMSTORE_SERVER_HEADER_TIMEOUT_S": "1"}
    proc = start_server(Path(tmp_path_factory.mktemp("redteam")) / "home", env=env)
    try:
        yield proc
    finally:
        proc.stop()


def _address(server: ServerProcess) -> tuple[str, int]:
    host, port = server.url.split("//", 1)[1].rsplit(":", 1)
    return host, int(port)


def _connect(server: ServerProcess) -> socket.socket:
    s = socket.create_connection(_address(server), timeout=WAIT_S)
    s.settimeout(WAIT_S)
    return s


def _read_until_closed(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset after
    its answer counts as closed)."""
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def _read_response(s: socket.socket) -> tuple[bytes, bytes]:
    """One response's head and body (by its Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"closed before a full response head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = s.recv(65536)
        assert chunk, "closed inside a response body"
        body += chunk
    return head, body


def _auth_header(server: ServerProcess) -> bytes:
    import base64

    key, secret = server.admin
    return b"Authorization: Basic " + base64.b64encode(f"{key}:{secret}".encode()) + b"\r\n"


# --- request heads and connections ---------------------------------------------------


def test_an_endless_request_head_is_431_and_closed(server: ServerProcess) -> None:
    s = _connect(server)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Flood: ")
    filler = b"a" * 16384
    try:
        for _ in range(64):  # 1 MiB of one header line, never finished
            s.sendall(filler)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed while we were still sending
    answer = _read_until_closed(s)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"connection: close" in answer.lower()


def test_a_head_sent_slowly_is_408_and_closed(server: ServerProcess) -> None:
    s = _connect(server)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # ...and never the rest
    answer = _read_until_closed(s)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_refusals_are_counted(server: ServerProcess, admin: httpx.Client) -> None:
    s = _connect(server)
    s.sendall(b"GET /healthz HTTP/1.1\r\n")
    assert _read_until_closed(s).startswith(b"HTTP/1.1 408 ")
    metrics = admin.get(server.url + "/metrics").text
    name = 'lsmstore_http_connections_refused_total{reason="head_timeout"}'
    counted = [line for line in metrics.splitlines() if line.startswith(name)]
    assert counted and float(counted[0].split()[-1]) >= 1, counted


def test_a_connection_that_sends_nothing_is_closed(tmp_path: Path) -> None:
    proc = start_server(tmp_path / "home", env={"LSMSTORE_SERVER_KEEPALIVE_S": "1"})
    try:
        s = _connect(proc)
        assert _read_until_closed(s) == b""  # closed by the server, no answer
        s = _connect(proc)  # and after a response, as before
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_response(s)[0].startswith(b"HTTP/1.1 200 ")
        assert _read_until_closed(s) == b""
    finally:
        proc.stop()


def test_connections_past_the_limit_are_refused(tmp_path: Path) -> None:
    env = {"LSMSTORE_SERVER_MAX_CONNECTIONS": "4", "LSMSTORE_SERVER_KEEPALIVE_S": "300"}
    proc = start_server(tmp_path / "home", env=env)
    try:
        held = [_connect(proc) for _ in range(4)]
        for s in held:  # each one is served: all four are open and counted
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_response(s)[0].startswith(b"HTTP/1.1 200 ")
        extra = _connect(proc)
        answer = _read_until_closed(extra)
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
        extra.close()
        held.pop().close()
        with httpx.Client(base_url=proc.url, timeout=WAIT_S) as c:
            # a closed connection frees its place (the close is seen asynchronously)
            deadline = time.monotonic() + WAIT_S
            while True:
                try:
                    if c.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "no connection accepted after one closed"
        for s in held:
            s.close()
    finally:
        proc.stop()


def test_a_connection_limit_over_the_open_file_limit_is_warned_about(tmp_path: Path) -> None:
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert soft != resource.RLIM_INFINITY and soft < 10_000_000
    proc = start_server(tmp_path / "home", env={"LSMSTORE_SERVER_MAX_CONNECTIONS": "10000000"})
    try:
        warned = proc.events("open_file_limit")
        assert warned and warned[0]["limit"] == soft, proc.log_lines
    finally:
        proc.stop()


# --- Expect: 100-continue and unread bodies --------------------------------------------


def test_an_error_to_an_unread_expect_body_closes_the_connection(server: ServerProcess) -> None:
    s = _connect(server)
    s.sendall(
        b"PUT /nothing-here HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        b"Content-Length: 1000\r\n\r\n"
    )
    head, _ = _read_response(s)
    assert head.startswith(b"HTTP/1.1 404 "), head  # no "100 Continue" before it
    assert b"connection: close" in head.lower()
    # The client skips the body; its next request must not be read as that body.
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert _read_until_closed(s) == b""


def test_an_unread_body_without_expect_closes_too(server: ServerProcess) -> None:
    s = _connect(server)
    s.sendall(b"PUT /nothing-here HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
    head, _ = _read_response(s)
    assert head.startswith(b"HTTP/1.1 404 ") and b"connection: close" in head.lower()


def test_expect_continue_is_sent_for_a_body_that_is_read(
    server: ServerProcess, admin: httpx.Client
) -> None:
    repo = make_repo(admin)
    s = _connect(server)
    path = f"/api/v1/repositories/{repo}/branches/main/objects?path=e.txt".encode()
    s.sendall(
        b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n" + _auth_header(server)
        + b"Expect: 100-continue\r\nContent-Type: application/octet-stream\r\n"
        b"Content-Length: 5\r\n\r\n"
    )  # fmt: skip
    interim = b""
    while b"\r\n\r\n" not in interim:
        chunk = s.recv(4096)
        assert chunk
        interim += chunk
    assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim
    s.sendall(b"hello")
    rest = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
    while b"\r\n\r\n" not in rest:
        rest += s.recv(4096)
    assert rest.startswith(b"HTTP/1.1 201 "), rest[:200]
    got = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "e.txt"})
    assert got.content == b"hello"


# --- batch amplification ---------------------------------------------------------------


def _batch(admin: httpx.Client, repo: str, body: bytes) -> httpx.Response:
    return admin.post(
        f"/lsm/repositories/{repo}/branches/main/batch",
        content=body,
        headers={"Content-Type": "application/msgpack"},
    )


def _l1_files(admin: httpx.Client, repo: str) -> int:
    r = admin.get(f"/lsm/repositories/{repo}/branches/main/staging")
    assert r.status_code == 200, r.text
    return int(r.json()["l1_files"])


def test_a_batch_over_the_entry_limit_is_413_before_decoding(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    body = msgpack.packb([["kvdelete", b"k%d" % i] for i in range(100_001)])
    r = _batch(admin, repo, body)
    assert r.status_code == 413, r.text
    assert "100000" in r.json()["message"]
    assert _l1_files(admin, repo) == 0
    ok = _batch(admin, repo, msgpack.packb([["kvdelete", b"k%d" % i] for i in range(100_000)]))
    assert ok.status_code == 200 and ok.json() == {"entries": 100_000}


def test_a_batch_that_decodes_to_too_many_values_is_413(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    # Each entry's identity is 60 arrays of 60 empty arrays: 3,661 values from ~3.7 KB
    # of body; 300 of them are over the 1,000,000 values a batch may decode to.
    nested = [[[] for _ in range(60)] for _ in range(60)]
    body = msgpack.packb([["kv", b"k%d" % i, b"v", nested] for i in range(300)])
    assert len(body) < 2_000_000
    r = _batch(admin, repo, body)
    assert r.status_code == 413, r.text
    assert "values" in r.json()["message"]
    assert _l1_files(admin, repo) == 0
    # The same count in JSON is refused by its text before it is parsed.
    r = admin.post(
        f"/lsm/repositories/{repo}/branches/main/batch",
        content=b"[" + b",".join([b"[[],[],[],[],[],[],[],[],[],[]]"] * 100_001) + b"]",
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413, r.text


async def test_a_put_many_is_one_group_the_entry_limit_refuses_whole(tmp_path: Path) -> None:
    """The remote client never splits a ``put_many`` (one atomic write, as embedded):
    past the server's ``server_batch_max_entries`` the whole call is refused, nothing
    staged; within it, it lands as one write (docs/server.md, "Health probes during
    maximal batches")."""
    import lsmstore
    from lsmstore.errors import EntryTooLargeError

    srv = start_server(tmp_path / "home", env={"LSMSTORE_SERVER_BATCH_MAX_ENTRIES": "50"})
    try:
        key_id, secret = srv.admin
        async with lsmstore.connect(srv.url, access_key_id=key_id, secret_access_key=secret,
                                    home=str(tmp_path / "client")) as store:  # fmt: skip
            repo = await store.create_repository("big", storage_namespace="local://g")
            main = repo.branch("main")
            with pytest.raises(EntryTooLargeError):
                await main.put_many([(f"big/{i:03d}", b"v") for i in range(51)])
            assert [e async for e in main.list("big/")] == []
            await main.put_many([(f"ok/{i:03d}", b"v") for i in range(50)])
            assert len([e async for e in main.list("ok/")]) == 50
    finally:
        srv.stop()


def test_health_is_answered_while_a_maximal_batch_is_staged(
    server: ServerProcess, admin: httpx.Client
) -> None:
    """Probes on other connections are answered between the slices of a batch of the
    most entries a request may hold: at least one answer arrives before the batch's."""
    repo = make_repo(admin)
    body = msgpack.packb(
        [["kv", b"h/%06d" % i, hashlib.sha256(b"%d" % i).digest()] for i in range(100_000)]
    )
    order: list[str] = []
    sent = threading.Event()
    s = _connect(server)
    path = f"/api/v1/lsm/repositories/{repo}/branches/main/batch".encode()

    def run_batch() -> None:
        s.sendall(
            b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n" + _auth_header(server)
            + b"Content-Type: application/msgpack\r\nContent-Length: %d\r\n\r\n" % len(body)
            + body
        )  # fmt: skip
        sent.set()
        head, _ = _read_response(s)
        order.append("batch " + head.split(b"\r\n", 1)[0].decode())

    t = threading.Thread(target=run_batch)
    t.start()
    assert sent.wait(WAIT_S)
    with httpx.Client(base_url=server.url, timeout=WAIT_S) as probe:
        while t.is_alive() and len(order) < 1:
            r = probe.get("/healthz")
            assert r.status_code == 200
            if not order:
                order.append("probe")
    t.join(WAIT_S)
    assert order[-1] == "batch HTTP/1.1 200 OK", order
    assert order[0] == "probe", order


# --- staged SST decompression bomb -----------------------------------------------------


def _bomb(values: int, value_bytes: int) -> bytes:
    """A zstd SST of ``values`` raw records of ``value_bytes`` zero bytes each: a few
    kilobytes that decode to ``values * value_bytes``."""
    from rocksdict import DBCompressionType

    from lsmstore.graveler import sst_writer
    from lsmstore.graveler.record import Record

    def zstd() -> object:
        options = sst_writer._staging_options()
        options.set_compression_type(DBCompressionType.zstd())
        return options

    zero = bytes(value_bytes)
    identity = hashlib.sha256(zero).digest()
    records = [Record(b"bomb/%03d" % i, identity, zero) for i in range(values)]
    return sst_writer._write_sst(records, None, zstd)  # type: ignore[arg-type]


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_staged_sst_bomb_is_refused_without_the_memory(
    server: ServerProcess, admin: httpx.Client
) -> None:
    repo = make_repo(admin)
    bomb = _bomb(20, 16 * 1024 * 1024 - 4096)  # 320 MiB decoded, past the 256 MiB bound
    assert len(bomb) < 1_000_000
    before = _rss_bytes(server.proc.pid)
    r = admin.post(f"/lsm/repositories/{repo}/branches/main/sst", content=bomb,
                   headers={"Content-Type": "application/octet-stream"})  # fmt: skip
    assert r.status_code == 413, r.text
    assert _l1_files(admin, repo) == 0
    # Streamed: at most a block or two of 16 MiB decoded at once, never the 320 MiB.
    assert _rss_bytes(server.proc.pid) - before < 160 * 1024 * 1024


# --- small things that answered 500 or a cut-off 200 ----------------------------------


def test_an_object_path_that_is_not_utf8_is_400(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    for url in (
        f"/repositories/{repo}/refs/main/objects?path=%ED%A0%80",
        f"/repositories/{repo}/refs/main/objects/stat?path=%ED%A0%80",
    ):
        r = admin.get(url)
        assert r.status_code == 400, (url, r.text)
    r = admin.post(f"/repositories/{repo}/branches/main/objects?path=%ff", content=b"x")
    assert r.status_code == 400, r.text


def _data_files(server: ServerProcess, repo: str) -> list[Path]:
    return [p for p in (server.home / "data" / repo / "data").rglob("*") if p.is_file()]


def test_a_read_of_missing_or_short_data_answers_an_error_not_a_cut_200(
    server: ServerProcess, admin: httpx.Client
) -> None:
    repo = make_repo(admin)
    for name in ("short", "gone"):
        r = admin.post(f"/repositories/{repo}/branches/main/objects", params={"path": name},
                       content=b"hello world")  # fmt: skip
        assert r.status_code == 201, r.text
    stat = f"/repositories/{repo}/refs/main/objects/stat"
    addresses = [admin.get(stat, params={"path": n}).json()["physical_address"]
                 for n in ("short", "gone")]  # fmt: skip
    short, gone = (
        next(p for p in _data_files(server, repo) if p.name == Path(a).name) for a in addresses
    )
    short.write_bytes(b"he")
    gone.unlink()
    r = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "short"})
    assert r.status_code == 500 and "shorter" in r.json()["message"], r.text
    r = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "gone"})
    assert r.status_code == 404 and r.json()["type"] == "ObjectNotFoundError", r.text


def test_multipart_takes_only_an_exact_delimiter_as_the_end(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    data = b"ab\r\n--Bc\r\n--B \r\nx\r\n--Bd--\r\n--B-x"
    body = (
        b'--B\r\nContent-Disposition: form-data; name="content"; filename="f"\r\n'
        b"Content-Type: text/plain\r\n\r\n" + data + b"\r\n--B  \t\r\n"
        b'Content-Disposition: form-data; name="other"\r\n\r\nzz\r\n--B--\r\n'
    )  # the part ends at the padded delimiter: "--B \r\n" inside is one too
    form = {"Content-Type": "multipart/form-data; boundary=B"}
    r = admin.post(f"/repositories/{repo}/branches/main/objects", params={"path": "m"},
                   content=body, headers=form)  # fmt: skip
    assert r.status_code == 201, r.text
    got = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "m"}).content
    assert got == b"ab\r\n--Bc"
    exact = b"ab\r\n--Bc\r\n--Bd--x"
    body = (
        b"--B\r\nContent-Disposition: form-data; name=\"content\"; filename=\"f\"\r\n\r\n"
        + exact + b"\r\n--B--\r\n"
    )  # fmt: skip
    r = admin.post(f"/repositories/{repo}/branches/main/objects", params={"path": "n"},
                   content=body, headers=form)  # fmt: skip
    assert r.status_code == 201, r.text
    got = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "n"}).content
    assert got == exact


def _gauge(metrics: str, name: str) -> float:
    lines = [line for line in metrics.splitlines() if line.startswith(name + " ")]
    assert lines, name
    return float(lines[0].split()[-1])


def test_naming_many_missing_branches_leaves_no_state_behind(tmp_path: Path) -> None:
    """Uploads and reads naming branches that do not exist are refused (404) and leave
    no branch writer or view behind past the bounds (docs/security.md, "Per-branch
    state"); the existing branch still takes writes."""
    srv = start_server(tmp_path / "home", env={"LSMSTORE_BRANCH_VIEWS_CACHED": "16"})
    try:
        with httpx.Client(base_url=srv.api, auth=srv.admin, timeout=WAIT_S) as admin:
            repo = make_repo(admin)
            for i in range(150):
                r = admin.post(f"/repositories/{repo}/branches/nope-{i}/objects",
                               params={"path": "k"}, content=b"v")  # fmt: skip
                assert r.status_code == 404, r.text
                r = admin.get(f"/repositories/{repo}/refs/nope-{i}/objects", params={"path": "k"})
                assert r.status_code == 404, r.text
            r = admin.post(f"/repositories/{repo}/branches/main/objects", params={"path": "k"},
                           content=b"v")  # fmt: skip
            assert r.status_code == 201, r.text
            metrics = admin.get(srv.url + "/metrics").text
            # main's writer, and at most the last refused one still closing
            assert _gauge(metrics, "lsmstore_branch_writers") <= 2
            assert _gauge(metrics, "lsmstore_branch_views") <= 16
            got = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "k"})
            assert got.content == b"v"
    finally:
        srv.stop()
