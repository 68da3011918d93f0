"""Bad input to the S3 gateway: objects past ``server_max_object_bytes``, XML with a
document type, a wrong Content-MD5 on a part -- typed S3 errors, nothing written."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.client import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from lsmstore.testing.server_process import ServerProcess, start_server

pytestmark = pytest.mark.timeout(300)
LIMIT = 4096


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = Path(tmp_path_factory.mktemp("limits")) / "home"
    proc = start_server(home, env={"LSMSTORE_SERVER_MAX_OBJECT_BYTES": str(LIMIT)})
    try:
        with httpx.Client(base_url=proc.api, auth=proc.admin) as c:
            r = c.post("/repositories", json={"name": "lim", "storage_namespace": "local://l"})
            assert r.status_code == 201, r.text
        yield proc
    finally:
        proc.stop()


def client(server: ServerProcess) -> Any:
    return boto3.client(
        "s3", endpoint_url=server.url, aws_access_key_id=server.admin[0],
        aws_secret_access_key=server.admin[1], region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                      request_checksum_calculation="when_required"),
    )  # fmt: skip


def test_objects_past_the_limit_are_refused(small: ServerProcess) -> None:
    s3 = client(small)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="lim", Key="main/big", Body=b"x" * (LIMIT + 1))
    assert e.value.response["Error"]["Code"] == "EntityTooLarge"
    with pytest.raises(ClientError):
        s3.head_object(Bucket="lim", Key="main/big")
    s3.put_object(Bucket="lim", Key="main/fits", Body=b"x" * LIMIT)


def test_xml_with_a_document_type_is_refused(small: ServerProcess) -> None:
    body = (b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaa">]>'
            b"<Delete><Object><Key>main/fits</Key></Object></Delete>")  # fmt: skip
    url = f"{small.url}/lim?delete"
    headers = {"x-amz-content-sha256": hashlib.sha256(body).hexdigest()}
    req = AWSRequest(method="POST", url=url, data=body, headers=headers)
    SigV4Auth(Credentials(*small.admin), "s3", "us-east-1").add_auth(req)
    r = httpx.post(url, content=body, headers=dict(req.headers.items()))
    assert r.status_code == 400 and b"<Code>MalformedXML</Code>" in r.content
    client(small).head_object(Bucket="lim", Key="main/fits")  # still there


def test_a_part_with_a_wrong_content_md5_is_refused(small: ServerProcess) -> None:
    s3 = client(small)
    up = s3.create_multipart_upload(Bucket="lim", Key="main/mp")["UploadId"]
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket="lim", Key="main/mp", UploadId=up, PartNumber=1, Body=b"abc",
                       ContentMD5="AAAAAAAAAAAAAAAAAAAAAA==")  # fmt: skip
    assert e.value.response["Error"]["Code"] == "BadDigest"
    assert "Parts" not in s3.list_parts(Bucket="lim", Key="main/mp", UploadId=up)
    s3.abort_multipart_upload(Bucket="lim", Key="main/mp", UploadId=up)
