"""Fixtures of the server tests: one real server process per test module."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lsmstore.testing.server_process import ServerProcess, start_server

_names = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(Path(tmp_path_factory.mktemp("server")) / "home")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as c:
        yield c


def unique(prefix: str = "repo") -> str:
    """A repository name no other test of the process uses."""
    return f"{prefix}-{next(_names):04d}"


def make_repo(client: httpx.Client, name: str | None = None) -> str:
    name = name or unique()
    r = client.post("/repositories", json={"name": name, "storage_namespace": f"local://{name}"})
    assert r.status_code == 201, r.text
    return name
