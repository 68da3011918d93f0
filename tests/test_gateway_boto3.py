"""The S3 gateway through boto3 against a real server process (docs/gateway.md)."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from botocore.client import Config
from botocore.exceptions import ClientError
from helpers.server import make_repo, unique

from lsmstore.testing.server_process import ServerProcess

pytestmark = pytest.mark.timeout(300)


def s3_client(server: ServerProcess, key: tuple[str, str]) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=server.url,
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


@pytest.fixture(scope="module")
def s3(server: ServerProcess) -> Iterator[Any]:
    yield s3_client(server, server.admin)


def code_of(e: pytest.ExceptionInfo[ClientError]) -> str:
    return str(e.value.response["Error"]["Code"])


def test_list_buckets_head_bucket_and_location(s3: Any, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert repo in names
    s3.head_bucket(Bucket=repo)
    assert s3.get_bucket_location(Bucket=repo).get("LocationConstraint") in (None, "")
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket="no-such-repo-here")
    assert code_of(e) == "NoSuchBucket"
    assert e.value.response["ResponseMetadata"]["RequestId"]


def test_put_get_head_with_metadata_range_and_conditions(s3: Any, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    data = bytes(range(256)) * 40
    put = s3.put_object(Bucket=repo, Key="main/dir/a.bin", Body=data, ContentType="x/y",
                        Metadata={"color": "blue"})  # fmt: skip
    etag = put["ETag"]
    assert etag == f'"{hashlib.md5(data).hexdigest()}"'
    got = s3.get_object(Bucket=repo, Key="main/dir/a.bin")
    assert got["Body"].read() == data
    assert got["ContentType"] == "x/y"
    assert got["Metadata"] == {"color": "blue"}
    assert got["ETag"] == etag
    head = s3.head_object(Bucket=repo, Key="main/dir/a.bin")
    assert head["ContentLength"] == len(data)
    part = s3.get_object(Bucket=repo, Key="main/dir/a.bin", Range="bytes=10-19")
    assert part["Body"].read() == data[10:20]
    assert part["ContentRange"] == f"bytes 10-19/{len(data)}"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=repo, Key="main/dir/a.bin", Range=f"bytes={len(data) + 5}-")
    assert code_of(e) == "InvalidRange"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=repo, Key="main/dir/a.bin", IfMatch='"0123"')
    assert code_of(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=repo, Key="main/dir/a.bin", IfNoneMatch=etag)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=repo, Key="main/dir/a.bin", IfModifiedSince=head["LastModified"])
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=repo, Key="main/dir/missing")
    assert code_of(e) == "NoSuchKey"


def test_content_md5_is_checked_and_nothing_is_written(s3: Any, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=repo, Key="main/x", Body=b"data", ContentMD5=wrong)
    assert code_of(e) == "BadDigest"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=repo, Key="main/x")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    right = base64.b64encode(hashlib.md5(b"data").digest()).decode()
    s3.put_object(Bucket=repo, Key="main/x", Body=b"data", ContentMD5=right)


def test_if_none_match_star_from_two_connections_exactly_one_wins(
    server: ServerProcess, admin: httpx.Client
) -> None:
    repo = make_repo(admin)
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def put(body: bytes) -> None:
        client = s3_client(server, server.admin)
        barrier.wait()
        try:
            client.put_object(Bucket=repo, Key="main/once", Body=body, IfNoneMatch="*")
            outcomes.append("ok")
        except ClientError as e:
            outcomes.append(code_of_resp(e))

    threads = [threading.Thread(target=put, args=(b"x" * n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["PreconditionFailed", "ok"]


def code_of_resp(e: ClientError) -> str:
    return str(e.response["Error"]["Code"])


def test_listing_v2_and_v1(s3: Any, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    assert admin.post(f"/repositories/{repo}/branches",
                      json={"name": "dev", "source": "main"}).status_code == 201  # fmt: skip
    keys = [f"main/d/{i:02d}" for i in range(7)] + ["main/top", "main/sp ace+%.txt", "dev/x"]
    for k in keys:
        s3.put_object(Bucket=repo, Key=k, Body=k.encode())
    top = s3.list_objects_v2(Bucket=repo, Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["dev/", "main/"]
    inside = s3.list_objects_v2(Bucket=repo, Prefix="main/", Delimiter="/")
    assert [p["Prefix"] for p in inside["CommonPrefixes"]] == ["main/d/"]
    assert [c["Key"] for c in inside["Contents"]] == ["main/sp ace+%.txt", "main/top"]
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=repo, Prefix="main/d/", PaginationConfig={"PageSize": 3}
    )
    seen = [c["Key"] for p in pages for c in p.get("Contents", [])]
    assert seen == [f"main/d/{i:02d}" for i in range(7)]
    after = s3.list_objects_v2(Bucket=repo, Prefix="main/d/", StartAfter="main/d/04")
    assert [c["Key"] for c in after["Contents"]] == ["main/d/05", "main/d/06"]
    everything = s3.list_objects_v2(Bucket=repo)
    assert [c["Key"] for c in everything["Contents"]] == sorted(keys)
    v1 = s3.get_paginator("list_objects").paginate(
        Bucket=repo, Prefix="main/", PaginationConfig={"PageSize": 4}
    )
    assert [c["Key"] for p in v1 for c in p.get("Contents", [])] == sorted(
        k for k in keys if k.startswith("main/")
    )
    encoded = s3.list_objects_v2(Bucket=repo, Prefix="main/sp", EncodingType="url")
    # Asked for explicitly, boto3 hands the encoded keys over as they came.
    assert [c["Key"] for c in encoded["Contents"]] == ["main/sp+ace%2B%25.txt"]


def test_delete_object_and_delete_objects(s3: Any, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    for k in ("main/a", "main/b", "main/c"):
        s3.put_object(Bucket=repo, Key=k, Body=b"1")
    s3.delete_object(Bucket=repo, Key="main/a")
    s3.delete_object(Bucket=repo, Key="main/absent")  # S3: 204 as well
    out = s3.delete_objects(Bucket=repo, Delete={"Objects": [{"Key": "main/b"},
                                                              {"Key": "main/c"}]})  # fmt: skip
    assert sorted(d["Key"] for d in out["Deleted"]) == ["main/b", "main/c"]
    assert s3.list_objects_v2(Bucket=repo, Prefix="main/")["KeyCount"] == 0
    quiet = s3.delete_objects(Bucket=repo, Delete={"Objects": [{"Key": "main/b"}], "Quiet": True})
    assert "Deleted" not in quiet and "Errors" not in quiet


def test_versioned_workflow_and_read_only_refs(s3: Any, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    assert admin.post(f"/repositories/{repo}/branches",
                      json={"name": "exp", "source": "main"}).status_code == 201  # fmt: skip
    s3.put_object(Bucket=repo, Key="exp/t.csv", Body=b"v1")
    r = admin.post(f"/repositories/{repo}/branches/exp/commits", json={"message": "one"})
    assert r.status_code == 201, r.text
    commit = r.json()["id"]
    s3.put_object(Bucket=repo, Key="exp/t.csv", Body=b"v2")
    assert s3.get_object(Bucket=repo, Key=f"{commit}/t.csv")["Body"].read() == b"v1"
    assert s3.get_object(Bucket=repo, Key="exp/t.csv")["Body"].read() == b"v2"
    assert admin.post(f"/repositories/{repo}/tags",
                      json={"id": "v1", "ref": commit}).status_code == 201  # fmt: skip
    assert s3.get_object(Bucket=repo, Key="v1/t.csv")["Body"].read() == b"v1"
    for ref in ("v1", commit):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=repo, Key=f"{ref}/new", Body=b"no")
        assert code_of(e) == "MethodNotAllowed"
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=repo, Key="v1/t.csv")
    assert code_of(e) == "MethodNotAllowed"
    assert s3.get_object(Bucket=repo, Key="v1/t.csv")["Body"].read() == b"v1"


def test_signature_errors_roles_and_scopes(server: ServerProcess, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    other = make_repo(admin)
    bad = s3_client(server, (server.admin[0], "not-the-secret"))
    with pytest.raises(ClientError) as e:
        bad.list_buckets()
    assert code_of(e) == "SignatureDoesNotMatch"
    unknown = s3_client(server, ("AKIALNOSUCHKEY000000", "whatever-secret"))
    with pytest.raises(ClientError) as e:
        unknown.list_buckets()
    assert code_of(e) == "InvalidAccessKeyId"
    reader = s3_client(server, server.create_key("reader", (repo,)))
    assert [b["Name"] for b in reader.list_buckets()["Buckets"]] == [repo]
    reader.list_objects_v2(Bucket=repo)
    with pytest.raises(ClientError) as e:
        reader.put_object(Bucket=repo, Key="main/x", Body=b"1")
    assert code_of(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        reader.list_objects_v2(Bucket=other)
    assert code_of(e) == "AccessDenied"


def test_unsupported_operations_answer_not_implemented(s3: Any, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    s3.put_object(Bucket=repo, Key="main/x", Body=b"1")
    calls = [
        lambda: s3.get_object_tagging(Bucket=repo, Key="main/x"),
        lambda: s3.get_bucket_acl(Bucket=repo),
        lambda: s3.get_bucket_versioning(Bucket=repo),
        lambda: s3.put_bucket_lifecycle_configuration(
            Bucket=repo, LifecycleConfiguration={"Rules": []}
        ),
        lambda: s3.create_bucket(Bucket=unique("newbucket")),
    ]
    for call in calls:
        with pytest.raises(ClientError) as e:
            call()
        assert code_of(e) == "NotImplemented"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 501


def test_requests_without_s3_auth_stay_with_the_rest_api(server: ServerProcess) -> None:
    r = httpx.get(server.url + "/some-bucket/main/x")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize("version", ["s3", "s3v4"])
def test_presigned_get_and_put_with_expiry(
    server: ServerProcess, admin: httpx.Client, version: str
) -> None:
    """boto3 presigns with SigV2 by default (``s3``), SigV4 when configured."""
    repo = make_repo(admin)
    s3 = boto3.client(
        "s3", endpoint_url=server.url, aws_access_key_id=server.admin[0],
        aws_secret_access_key=server.admin[1], region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, signature_version=version),
    )  # fmt: skip
    put_url = s3.generate_presigned_url(
        "put_object", Params={"Bucket": repo, "Key": "main/p.txt"}, ExpiresIn=300
    )
    assert httpx.put(put_url, content=b"presigned").status_code == 200
    get_url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": repo, "Key": "main/p.txt"}, ExpiresIn=300
    )
    r = httpx.get(get_url)
    assert r.status_code == 200 and r.content == b"presigned"
    tampered = get_url.replace("main%2Fp.txt", "main%2Fq.txt").replace("main/p.txt", "main/q.txt")
    r = httpx.get(tampered)
    assert r.status_code == 403 and b"SignatureDoesNotMatch" in r.content
    old = s3.generate_presigned_url(
        "get_object", Params={"Bucket": repo, "Key": "main/p.txt"}, ExpiresIn=1
    )
    time.sleep(2.5)  # the URL's lifetime passes (not a timing assertion)
    r = httpx.get(old)
    assert r.status_code == 403 and b"Request has expired" in r.content


def test_copy_object_within_and_across_branches(s3: Any, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    assert admin.post(f"/repositories/{repo}/branches",
                      json={"name": "dev", "source": "main"}).status_code == 201  # fmt: skip
    s3.put_object(Bucket=repo, Key="main/src", Body=b"payload", ContentType="text/plain",
                  Metadata={"a": "1"})  # fmt: skip
    out = s3.copy_object(Bucket=repo, Key="dev/copy", CopySource=f"{repo}/main/src")
    assert out["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(b"payload").hexdigest()}"'
    got = s3.get_object(Bucket=repo, Key="dev/copy")
    assert got["Body"].read() == b"payload" and got["Metadata"] == {"a": "1"}
    src = admin.get(f"/repositories/{repo}/refs/main/objects/stat", params={"path": "src"})
    dst = admin.get(f"/repositories/{repo}/refs/dev/objects/stat", params={"path": "copy"})
    assert src.json()["physical_address"] == dst.json()["physical_address"]  # no data copied
    source = {"Bucket": repo, "Key": "main/src"}
    s3.copy_object(Bucket=repo, Key="main/re", CopySource=source, MetadataDirective="REPLACE",
                   ContentType="x/new", Metadata={"b": "2"})  # fmt: skip
    head = s3.head_object(Bucket=repo, Key="main/re")
    assert head["ContentType"] == "x/new" and head["Metadata"] == {"b": "2"}
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=repo, Key="main/x", CopySource=f"{repo}/main/absent")
    assert code_of(e) == "NoSuchKey"


def test_sigv2_header_signed_requests(server: ServerProcess, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    v2 = boto3.client(
        "s3", endpoint_url=server.url, aws_access_key_id=server.admin[0],
        aws_secret_access_key=server.admin[1], region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, signature_version="s3",
                      request_checksum_calculation="when_required"),
    )  # fmt: skip
    v2.put_object(Bucket=repo, Key="main/v2 key", Body=b"old style", Metadata={"m": "x"})
    assert v2.get_object(Bucket=repo, Key="main/v2 key")["Body"].read() == b"old style"
    assert [c["Key"] for c in v2.list_objects(Bucket=repo, Prefix="main/")["Contents"]] == [
        "main/v2 key"
    ]
    v2.delete_objects(Bucket=repo, Delete={"Objects": [{"Key": "main/v2 key"}]})
    wrong = boto3.client(
        "s3", endpoint_url=server.url, aws_access_key_id=server.admin[0],
        aws_secret_access_key="wrong-secret", region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, signature_version="s3"),
    )  # fmt: skip
    with pytest.raises(ClientError) as e:
        wrong.list_objects(Bucket=repo)
    assert code_of(e) == "SignatureDoesNotMatch"


def test_copy_object_between_repositories_copies_the_data(
    server: ServerProcess, s3: Any, admin: httpx.Client
) -> None:
    src_repo, dst_repo = make_repo(admin), make_repo(admin)
    s3.put_object(Bucket=src_repo, Key="main/src", Body=b"across", ContentType="text/plain",
                  Metadata={"a": "1"})  # fmt: skip
    out = s3.copy_object(Bucket=dst_repo, Key="main/copy", CopySource=f"{src_repo}/main/src")
    assert out["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(b"across").hexdigest()}"'
    got = s3.get_object(Bucket=dst_repo, Key="main/copy")
    assert got["Body"].read() == b"across"
    assert (got["ContentType"], got["Metadata"]) == ("text/plain", {"a": "1"})
    stat = admin.get(f"/repositories/{dst_repo}/refs/main/objects/stat", params={"path": "copy"})
    ns = admin.get(f"/repositories/{dst_repo}").json()["storage_namespace"]
    # the data was copied into the destination's namespace, not linked into the source's
    assert stat.json()["physical_address"].startswith(ns.rstrip("/") + "/data/")
    s3.copy_object(Bucket=dst_repo, Key="main/re", CopySource=f"{src_repo}/main/src",
                   MetadataDirective="REPLACE", ContentType="x/new")  # fmt: skip
    head = s3.head_object(Bucket=dst_repo, Key="main/re")
    assert (head["ContentType"], head["Metadata"]) == ("x/new", {})
    # the source repository is gone: the copies keep their data
    assert admin.delete(f"/repositories/{src_repo}").status_code == 204
    assert s3.get_object(Bucket=dst_repo, Key="main/copy")["Body"].read() == b"across"
    # read on the source and write on the destination are both needed
    other = make_repo(admin)
    s3.put_object(Bucket=other, Key="main/o", Body=b"o")
    writer = s3_client(server, server.create_key("writer", (dst_repo,)))
    with pytest.raises(ClientError) as e:
        writer.copy_object(Bucket=dst_repo, Key="main/x", CopySource=f"{other}/main/o")
    assert code_of(e) == "AccessDenied"
    reader = s3_client(server, server.create_key("reader", (other, dst_repo)))
    with pytest.raises(ClientError) as e:
        reader.copy_object(Bucket=dst_repo, Key="main/x", CopySource=f"{other}/main/o")
    assert code_of(e) == "AccessDenied"
    both = s3_client(server, server.create_key("writer", (other, dst_repo)))
    both.copy_object(Bucket=dst_repo, Key="main/x", CopySource=f"{other}/main/o")
    # UploadPartCopy from another repository
    up = both.create_multipart_upload(Bucket=dst_repo, Key="main/mp")["UploadId"]
    part = both.upload_part_copy(Bucket=dst_repo, Key="main/mp", UploadId=up, PartNumber=1,
                                 CopySource=f"{other}/main/o")  # fmt: skip
    both.complete_multipart_upload(Bucket=dst_repo, Key="main/mp", UploadId=up,
                                   MultipartUpload={"Parts": [
                                       {"PartNumber": 1,
                                        "ETag": part["CopyPartResult"]["ETag"]}]})  # fmt: skip
    assert both.get_object(Bucket=dst_repo, Key="main/mp")["Body"].read() == b"o"
    for key in ("main/x", "main/mp"):
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=other, Key=key)  # nothing written to the source
        assert code_of(e) == "NoSuchKey"


def test_multipart_upload_copy_list_complete_abort(s3: Any, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    part1 = os.urandom(5 * 1024 * 1024)
    part2 = b"tail bytes"
    s3.put_object(Bucket=repo, Key="main/source", Body=b"0123456789" * 10)
    up = s3.create_multipart_upload(Bucket=repo, Key="main/big", ContentType="x/big",
                                    Metadata={"k": "v"})["UploadId"]  # fmt: skip
    e1 = s3.upload_part(Bucket=repo, Key="main/big", UploadId=up, PartNumber=1, Body=part1)
    assert e1["ETag"] == f'"{hashlib.md5(part1).hexdigest()}"'
    e2 = s3.upload_part(Bucket=repo, Key="main/big", UploadId=up, PartNumber=2, Body=part2)
    e3 = s3.upload_part_copy(
        Bucket=repo,
        Key="main/big",
        UploadId=up,
        PartNumber=3,
        CopySource=f"{repo}/main/source",
        CopySourceRange="bytes=10-19",
    )
    listed = s3.list_parts(Bucket=repo, Key="main/big", UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in listed] == [(1, len(part1)), (2, 10), (3, 10)]
    uploads = s3.list_multipart_uploads(Bucket=repo)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("main/big", up)]
    with pytest.raises(ClientError) as e:  # a part under 5 MiB that is not the last
        s3.complete_multipart_upload(Bucket=repo, Key="main/big", UploadId=up,
                                     MultipartUpload={"Parts": [
                                         {"PartNumber": 2, "ETag": e2["ETag"]},
                                         {"PartNumber": 3, "ETag": e3["CopyPartResult"]["ETag"]},
                                     ]})  # fmt: skip
    assert code_of(e) == "EntityTooSmall"
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=repo, Key="main/big", UploadId=up,
                                     MultipartUpload={"Parts": [
                                         {"PartNumber": 1, "ETag": '"0000"'}]})  # fmt: skip
    assert code_of(e) == "InvalidPart"
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=repo, Key="main/big", UploadId=up,
                                     MultipartUpload={"Parts": [
                                         {"PartNumber": 3, "ETag": e3["CopyPartResult"]["ETag"]},
                                         {"PartNumber": 1, "ETag": e1["ETag"]},
                                     ]})  # fmt: skip
    assert code_of(e) == "InvalidPartOrder"
    done = s3.complete_multipart_upload(Bucket=repo, Key="main/big", UploadId=up,
                                        MultipartUpload={"Parts": [
                                            {"PartNumber": 1, "ETag": e1["ETag"]},
                                            {"PartNumber": 3,
                                             "ETag": e3["CopyPartResult"]["ETag"]},
                                        ]})  # fmt: skip
    whole = part1 + b"0123456789"
    # S3's multipart ETag: the MD5 of the parts' binary MD5s, then "-<parts>"
    digests = hashlib.md5(part1).digest() + hashlib.md5(b"0123456789").digest()
    expected = f'"{hashlib.md5(digests).hexdigest()}-2"'
    assert done["ETag"] == expected
    got = s3.get_object(Bucket=repo, Key="main/big")
    assert got["Body"].read() == whole
    assert got["ETag"] == expected
    assert s3.head_object(Bucket=repo, Key="main/big")["ETag"] == expected
    listed = s3.list_objects_v2(Bucket=repo, Prefix="main/big")["Contents"]
    assert [(o["Key"], o["ETag"]) for o in listed] == [("main/big", expected)]
    stat = admin.get(f"/repositories/{repo}/refs/main/objects/stat", params={"path": "big"})
    assert (stat.json()["checksum"], stat.json()["size_bytes"]) == (
        expected.strip('"'),
        5 * 1024 * 1024 + 10,
    )
    assert got["ContentType"] == "x/big" and got["Metadata"] == {"k": "v"}
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=repo)
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=repo, Key="main/big", UploadId=up)
    assert code_of(e) == "NoSuchUpload"
    gone = s3.create_multipart_upload(Bucket=repo, Key="main/never")["UploadId"]
    s3.upload_part(Bucket=repo, Key="main/never", UploadId=gone, PartNumber=1, Body=b"x")
    s3.abort_multipart_upload(Bucket=repo, Key="main/never", UploadId=gone)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=repo)
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=repo, Key="main/never")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket=repo, Key="missing-branch/x")
    assert code_of(e) == "NoSuchKey"


def test_put_conditions_other_than_if_none_match_star_are_refused(
    s3: Any, admin: httpx.Client
) -> None:
    repo = make_repo(admin)
    s3.put_object(Bucket=repo, Key="main/k", Body=b"one")
    etag = s3.head_object(Bucket=repo, Key="main/k")["ETag"]
    for kwargs in ({"IfMatch": etag}, {"IfNoneMatch": etag}):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=repo, Key="main/k", Body=b"two", **kwargs)
        assert code_of(e) == "NotImplemented"
    assert s3.get_object(Bucket=repo, Key="main/k")["Body"].read() == b"one"
