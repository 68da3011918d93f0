"""Shared fixtures: real servers on loopback, uvloop as the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import uvloop

from lsmstore.testing.servers import MotoServer, WeedServer, moto_server, redis_url, weed_server

# Fixtures of the HTTP server tests (a real server process per module).
pytest_plugins = ["helpers.server", "helpers.actions_env"]


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    """A real redis-server: $REDIS_URL, or a private one on a free loopback port."""
    with redis_url() as url:
        yield url


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """moto's threaded server (S3 + DynamoDB) on 127.0.0.1."""
    with moto_server(threaded=True) as server:
        yield server


@pytest.fixture(scope="session")
def moto_serial() -> Iterator[MotoServer]:
    """moto serving one request at a time: DynamoDB conditional updates are atomic."""
    with moto_server(threaded=False) as server:
        yield server


@pytest.fixture(scope="session")
def seaweed() -> Iterator[WeedServer]:
    """A real S3 server: SeaweedFS ``weed mini`` on loopback (free ports)."""
    with weed_server() as server:
        yield server


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"


@pytest.fixture(scope="session")
def spark(moto: MotoServer) -> Iterator[Any]:
    """One local SparkSession for the whole test session (PySpark from the spark extra).
    Started after moto, whose credentials its executors inherit (s3:// namespaces)."""
    from lsmstore.testing.spark import local_session

    session = local_session()
    try:
        yield session
    finally:
        session.stop()
