"""open_refstore: one URL per backend; anything malformed is InvalidURLError."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsmstore.errors import InvalidURLError
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.refstore.url import open_refstore


async def test_local(tmp_path: Path) -> None:
    store = open_refstore(f"local://{tmp_path}/refs")
    assert isinstance(store, EmbeddedRefStore)
    assert store.path == tmp_path / "refs"
    await store.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "",
        "refs",
        "/abs/dir",
        "ftp://host/x",
        "local://relative/dir",
        "local://host/abs",
        "local:relative",
        "local:///a/../b",
        "local:///a?synchronous=OFF",
        "local:///a?nope=1",
        "local:///a?synchronous=FULL&synchronous=FULL",
        "local:///a#frag",
    ],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidURLError):
        open_refstore(url)


def test_not_a_string() -> None:
    with pytest.raises(InvalidURLError):
        open_refstore(None)  # type: ignore[arg-type]


async def test_redis() -> None:
    from lsmstore.refstore.redis import RedisRefStore

    store = open_refstore("redis://user:secret@127.0.0.1:6399/2?prefix=x:&max_connections=3")
    assert isinstance(store, RedisRefStore)
    assert store.key_prefix == "x:" and "secret" not in store.url
    await store.aclose()
    tls = open_refstore("rediss://127.0.0.1:6399", key_prefix="y:")
    assert isinstance(tls, RedisRefStore) and tls.key_prefix == "y:"
    await tls.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "redis://",
        "redis://:6379/0",
        "redis://127.0.0.1:port/0",
        "redis://127.0.0.1:6379/db",
        "redis://127.0.0.1:6379/0?socket_timeout=1",
        "redis://127.0.0.1:6379/0?max_connections=0",
        "redis://127.0.0.1:6379/0?timeout=abc",
        "redis://127.0.0.1:6379/0?timeout=-1",
    ],
)
def test_bad_redis_urls(url: str) -> None:
    with pytest.raises(InvalidURLError):
        open_refstore(url)


async def test_dynamodb() -> None:
    from lsmstore.refstore.dynamodb import DynamoRefStore

    store = open_refstore(
        "dynamodb://my-refs?region=eu-west-1&endpoint_url=http://127.0.0.1:8000&timeout=2"
    )
    assert isinstance(store, DynamoRefStore) and store.table == "my-refs"
    assert "eu-west-1" in store.url
    await store.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "dynamodb://",
        "dynamodb://ab?region=us-east-1",
        "dynamodb://bad/name?region=us-east-1",
        "dynamodb://t@ble?region=us-east-1",
        "dynamodb://refs?region=us-east-1&endpoint_url=ftp://x",
        "dynamodb://refs?region=us-east-1&endpoint_url=127.0.0.1:8000",
        "dynamodb://refs?region=us-east-1&bucket=x",
        "dynamodb://refs?region=us-east-1&timeout=0",
    ],
)
def test_bad_dynamodb_urls(url: str) -> None:
    with pytest.raises(InvalidURLError):
        open_refstore(url)


def test_dynamodb_region_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(InvalidURLError, match="region"):
        open_refstore("dynamodb://refs")
