"""Fixtures of the action (hook) tests (a plugin of tests/conftest.py): ``hooks``, a webhook
server on loopback, and ``hooked_store``, a store whose webhooks may reach it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import lsmstore
from lsmstore.testing.webhook_server import WebhookServer


@pytest.fixture
def hooks() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


@pytest.fixture
async def hooked_store(tmp_path: Path) -> AsyncIterator[lsmstore.Store]:
    async with lsmstore.connect(
        home=str(tmp_path / "home"), batch_interval_ms=1, actions_webhook_allow="127.0.0.1"
    ) as s:
        assert isinstance(s, lsmstore.Store)
        yield s
