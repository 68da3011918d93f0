"""A real ``lsmstore serve`` process for the client's tests (one per test module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lsmstore.testing.server_process import ServerProcess, start_server


@pytest.fixture(scope="module")
def lsm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("lsm-server") / "home")
    try:
        yield proc
    finally:
        proc.stop()
