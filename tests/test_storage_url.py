"""open_object_store: URL forms, options and errors (no I/O happens when opening)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from lsmstore.errors import InvalidURLError
from lsmstore.storage.local import LocalStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.storage.s3 import S3Store
from lsmstore.storage.url import open_object_store
from lsmstore.testing.servers import MotoServer


def test_file_url(tmp_path: Path) -> None:
    store = open_object_store(tmp_path.as_uri())
    assert isinstance(store, LocalStore) and store.root == tmp_path
    assert store.url == tmp_path.as_uri()
    spaced = open_object_store("file:///data/my%20repo")
    assert isinstance(spaced, LocalStore) and spaced.root == Path("/data/my repo")
    local = open_object_store("file://localhost/data/x")
    assert isinstance(local, LocalStore) and local.root == Path("/data/x")


@pytest.mark.parametrize(
    "url",
    ["file:relative/dir", "file://relative/dir", "file://", "file:///data?x=1", "/abs/no/scheme"],
)
def test_bad_file_urls(url: str) -> None:
    with pytest.raises(InvalidURLError):
        open_object_store(url)


async def test_mem_url_shares_by_name() -> None:
    a, b = open_object_store("mem://url-test"), open_object_store("mem://url-test")
    try:
        assert isinstance(a, MemoryStore) and a.url == "mem://url-test"
        await a.put("k", b"v")
        assert await b.get("k") == b"v"
    finally:
        MemoryStore.forget("url-test")


@pytest.mark.parametrize("url", ["mem://", "mem://a/b", "mem://x?opt=1"])
def test_bad_mem_urls(url: str) -> None:
    with pytest.raises(InvalidURLError):
        open_object_store(url)


def test_s3_url_and_options() -> None:
    store = open_object_store(
        "s3://bucket/ns/repo1/?endpoint_url=http://127.0.0.1:1&region=eu-west-1"
        "&path_style=true&max_attempts=2&read_timeout=1.5&page_size=10",
        region="ignored",
        connect_timeout=3,
    )
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.url) == ("bucket", "ns/repo1", "s3://bucket/ns/repo1")
    assert store.endpoint_url == "http://127.0.0.1:1"
    assert store._region == "eu-west-1"  # the query overrides the keyword option
    assert store._config.s3 == {"addressing_style": "path"}
    assert store._config.retries == {"total_max_attempts": 2, "mode": "standard"}
    assert (store._config.read_timeout, store._config.connect_timeout) == (1.5, 3.0)
    root = open_object_store("s3://bucket")
    assert isinstance(root, S3Store) and root.prefix == "" and root.url == "s3://bucket/"


@pytest.mark.parametrize(
    ("url", "options", "names"),
    [
        ("s3://", {}, "s3://<bucket>"),
        ("s3://bucket/p?colour=blue", {}, "colour"),
        ("s3://bucket/p", {"colour": "blue"}, "colour"),
        ("s3://bucket/p?max_attempts=many", {}, "max_attempts"),
        ("s3://bucket/p?path_style=maybe", {}, "path_style"),
        ("s3://bucket/p?page_size=5000", {}, "page_size"),
        ("s3://bucket/a/../b", {}, ".."),
        ("s3://bad_bucket!/p", {}, "bucket"),
        ("file:///data", {"region": "x"}, "region"),
        ("gs://bucket/p", {}, "'gs'"),
        ("", {}, "empty"),
    ],
)
def test_bad_urls_name_the_problem(url: str, options: dict[str, str], names: str) -> None:
    with pytest.raises(InvalidURLError, match=re.escape(names)):
        open_object_store(url, **options)


async def test_s3_url_reaches_moto(moto: MotoServer) -> None:
    bucket = f"url-{uuid.uuid4().hex[:12]}"
    store = open_object_store(f"s3://{bucket}/p?endpoint_url={moto.endpoint}")
    assert isinstance(store, S3Store)
    async with store:
        client = await store._connect()
        await client.create_bucket(Bucket=bucket)
        await store.put("k", b"v")
        assert await store.get("k") == b"v"
