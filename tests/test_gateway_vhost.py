"""Virtual-host style addressing (``Host: <repository>.<server_s3_domain>``) against a
real server configured with a domain; path style keeps working beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from botocore.auth import HmacV1Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from lsmstore.testing.server_process import ServerProcess, start_server

pytestmark = pytest.mark.timeout(300)
DOMAIN = "s3.example.test"


@pytest.fixture(scope="module")
def vserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = Path(tmp_path_factory.mktemp("vhost")) / "home"
    proc = start_server(home, env={"LSMSTORE_SERVER_S3_DOMAIN": DOMAIN})
    try:
        yield proc
    finally:
        proc.stop()


def signed(server: ServerProcess, method: str, host: str, path: str, body: bytes = b"",
           v2: bool = False) -> httpx.Response:  # fmt: skip
    """A request signed for ``host`` (as a client addressing it would sign it), sent to
    the server's loopback address with that Host header."""
    port = urlparse(server.url).port
    req = AWSRequest(method=method, url=f"http://{host}:{port}{path}", data=body)
    creds = Credentials(server.admin[0], server.admin[1])
    if v2:  # SigV2 signs the bucket as part of the resource, as S3 clients do
        bucket = host.split(".")[0] if host.endswith("." + DOMAIN) else ""
        req.auth_path = (f"/{bucket}" if bucket else "") + path
        HmacV1Auth(creds).add_auth(req)
    else:
        req.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
        SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    headers = dict(req.headers.items())
    headers["Host"] = f"{host}:{port}"
    return httpx.request(method, server.url + path, headers=headers, content=body)


def test_virtual_host_style(vserver: ServerProcess) -> None:
    with httpx.Client(base_url=vserver.api, auth=vserver.admin) as admin:
        r = admin.post("/repositories", json={"name": "vrepo", "storage_namespace": "local://v"})
        assert r.status_code == 201, r.text
    host = f"vrepo.{DOMAIN}"
    assert signed(vserver, "PUT", host, "/main/a.txt", b"virtual").status_code == 200
    got = signed(vserver, "GET", host, "/main/a.txt")
    assert got.status_code == 200 and got.content == b"virtual"
    listing = signed(vserver, "GET", host, "/?list-type=2&prefix=main%2F")
    assert listing.status_code == 200, listing.text
    assert b"<Key>main/a.txt</Key>" in listing.content
    v2 = signed(vserver, "GET", host, "/main/a.txt", v2=True)
    assert v2.status_code == 200 and v2.content == b"virtual"
    # Path style on the domain itself, and on the bare address.
    assert signed(vserver, "GET", DOMAIN, "/vrepo/main/a.txt").content == b"virtual"
    assert signed(vserver, "GET", "127.0.0.1", "/vrepo/main/a.txt").content == b"virtual"
    missing = signed(vserver, "GET", f"nope.{DOMAIN}", "/main/a.txt")
    assert missing.status_code == 404 and b"NoSuchBucket" in missing.content
