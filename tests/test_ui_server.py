"""The web UI's server side against a real server process: its files (security
headers, no path outside the folder, only ``/`` and ``/ui/``), and the two API routes
it reads (the calling key, an object's preview) with the API's authentication."""

from __future__ import annotations

import http.client
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.server import make_repo

from lsmstore.testing.server_process import ServerProcess
from lsmstore.ui import assets

FILES = ("app.js", "api.js", "dom.js", "layout.js", "style.css", "index.html")


def raw_get(server: ServerProcess, path: str) -> tuple[int, bytes]:
    """GET with ``path`` sent as is (httpx would normalise dot segments)."""
    u = urlsplit(server.url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=30)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_index_and_files_carry_security_headers(server: ServerProcess) -> None:
    r = httpx.get(server.url + "/")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert b'<script type="module" src="/ui/app.js">' in r.content
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    for name in FILES:
        r = httpx.get(f"{server.url}/ui/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-security-policy"] == assets.CSP
        assert r.headers["x-content-type-options"] == "nosniff"
    assert (
        httpx.get(server.url + "/ui/app.js").headers["content-type"].startswith("text/javascript")
    )


def test_no_inline_script_in_the_page(server: ServerProcess) -> None:
    """The CSP allows no inline script: the page must not need one."""
    page = httpx.get(server.url + "/").text
    assert "<script>" not in page and "onclick=" not in page and "style=" not in page


def test_unchanged_file_answers_304(server: ServerProcess) -> None:
    r = httpx.get(server.url + "/ui/app.js")
    etag = r.headers["etag"]
    again = httpx.get(server.url + "/ui/app.js", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["content-security-policy"] == assets.CSP


@pytest.mark.parametrize(
    "path",
    [
        "/ui/../ui/assets.py",
        "/ui/..%2fassets.py",
        "/ui/%2e%2e%2fassets.py",
        "/ui/..%2f..%2f..%2fetc%2fpasswd",
        "/ui/%2fetc%2fpasswd",
        "/ui/assets.py",
        "/ui/__init__.py",
        "/ui/.",
        "/ui/..",
        "/ui/",
        "/ui/app.js%00.css",
        "/ui/static/app.js",
    ],
)
def test_no_path_outside_the_folder(server: ServerProcess, path: str) -> None:
    status, body = raw_get(server, path)
    assert status == 404, (path, status)
    assert b"import" not in body and b"root:" not in body


def test_other_paths_are_left_alone(server: ServerProcess) -> None:
    """Only ``/`` and ``/ui/`` belong to the UI: other front ends mount elsewhere."""
    r = httpx.get(server.url + "/some-bucket/key")
    assert r.status_code == 404 and "no route" in r.json()["message"]
    assert httpx.get(server.url + "/healthz").status_code == 200
    assert httpx.post(server.url + "/").status_code == 405


def test_ui_files_are_not_api_operations(server: ServerProcess) -> None:
    paths = httpx.get(server.api + "/openapi.json").json()["paths"]
    assert "/" not in paths and "/ui/{name}" not in paths
    assert "/api/v1/lsm/repositories/{repository}/refs/{ref}/preview" in paths


def test_current_key(server: ServerProcess, admin: httpx.Client) -> None:
    assert httpx.get(server.api + "/lsm/user").status_code == 401
    me = admin.get("/lsm/user").json()
    assert me == {"access_key_id": server.admin[0], "role": "admin", "repositories": []}
    key = server.create_key("reader", ("some-repo",))
    me = httpx.get(server.api + "/lsm/user", auth=key).json()
    assert me == {"access_key_id": key[0], "role": "reader", "repositories": ["some-repo"]}


def _put(admin: httpx.Client, repo: str, path: str, data: bytes, ctype: str = "") -> None:
    headers = {"Content-Type": ctype} if ctype else {}
    r = admin.post(f"/repositories/{repo}/branches/main/objects", params={"path": path},
                   content=data, headers=headers)  # fmt: skip
    assert r.status_code == 201, r.text


def _preview(client: httpx.Client, repo: str, path: str, **params: object) -> httpx.Response:
    return client.get(
        f"/lsm/repositories/{repo}/refs/main/preview", params={"path": path, **params}
    )


def test_preview_formats(server: ServerProcess, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    table = pa.table({"n": list(range(10_000)), "s": [f"v{i}" for i in range(10_000)],
                      "x": [None] * 10_000})  # fmt: skip
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=1000)
    _put(admin, repo, "t/data.parquet", buf.getvalue())
    _put(admin, repo, "t/people.csv", b'name,age\nada,36\n"smith, j",41\n', "text/csv")
    _put(admin, repo, "notes", "héllo\nwörld\n".encode(), "text/plain")
    _put(admin, repo, "blob.bin", bytes(range(256)))

    p = _preview(admin, repo, "t/data.parquet", rows=5).json()
    assert p["format"] == "parquet" and p["total_rows"] == 10_000 and p["row_groups"] == 10
    assert p["columns"] == ["n", "s", "x"]
    assert p["rows"] == [[i, f"v{i}", None] for i in range(5)]
    assert p["truncated"] is True and p["schema"][0] == "n: int64"

    p = _preview(admin, repo, "t/people.csv").json()
    assert p["format"] == "csv" and p["columns"] == ["name", "age"]
    assert p["rows"] == [["ada", "36"], ["smith, j", "41"]] and p["truncated"] is False

    p = _preview(admin, repo, "notes").json()
    assert p["format"] == "text" and p["text"] == "héllo\nwörld\n"

    p = _preview(admin, repo, "blob.bin").json()
    assert p["format"] == "binary" and p["rows"] == [] and p["size_bytes"] == 256


def test_preview_errors_and_permissions(server: ServerProcess, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    _put(admin, repo, "bad.parquet", b"PAR1 this is not parquet PAR1")
    r = _preview(admin, repo, "bad.parquet")
    assert r.status_code == 400 and "Parquet" in r.json()["message"]
    assert _preview(admin, repo, "missing.csv").status_code == 404
    assert _preview(admin, repo, "").status_code == 400
    assert _preview(admin, repo, "x" * 5000).status_code == 400
    assert httpx.get(f"{server.api}/lsm/repositories/{repo}/refs/main/preview",
                     params={"path": "bad.parquet"}).status_code == 401  # fmt: skip
    other = server.create_key("reader", ("not-" + repo,))
    with httpx.Client(base_url=server.api, auth=other) as c:
        assert _preview(c, repo, "bad.parquet").status_code == 403


def test_init_prints_the_page_url(tmp_path: Path) -> None:
    """A newcomer runs ``lsmstore serve --init`` and opens the address it prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LSMSTORE_")}
    env["LSMSTORE_HOME"] = str(tmp_path / "home")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lsmstore.server", "--host", "127.0.0.1", "--port", "0", "--init"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not any(line.startswith("Web UI: ") for line in lines):
            line = proc.stdout.readline()
            assert line, f"the server ended without printing the address: {lines}"
            lines.append(line)
        url = lines[-1].split()[2]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        assert any(line.startswith("secret_access_key: ") for line in lines)
        page = httpx.get(url)
        assert page.status_code == 200 and "lsmstore" in page.text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


@pytest.mark.parametrize(
    ("host", "want"),
    [("0.0.0.0", "http://127.0.0.1:8000/"), ("::", "http://[::1]:8000/"),
     ("10.1.2.3", "http://10.1.2.3:8000/"), ("::1", "http://[::1]:8000/")],
)  # fmt: skip
def test_page_url(host: str, want: str) -> None:
    assert assets.page_url("http", host, 8000) == want
