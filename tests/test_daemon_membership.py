"""Daemons with ``server_affinity = on`` announce themselves in a real Redis RefStore:
each is listed with the URL it listens on, a SIGTERM withdraws it at once, a kill -9
drops it when its lifetime ends, and every daemon's view names the same branch owners."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from signal import SIGKILL

import pytest

from lsmstore.affinity import branch_key, rendezvous_owner
from lsmstore.refstore.base import Member, RefStore
from lsmstore.refstore.url import open_refstore
from lsmstore.testing.server_process import ServerProcess, start_server


@pytest.fixture
def refstore_url(redis_server_url: str) -> str:
    return f"{redis_server_url}?prefix=members-{uuid.uuid4().hex[:8]}:"


@pytest.fixture
async def refstore(refstore_url: str) -> AsyncIterator[RefStore]:
    store = open_refstore(refstore_url)
    yield store
    await store.aclose()


async def _until(refstore: RefStore, want: set[str]) -> list[Member]:
    """Wait until the live members are ``want`` (60 s at most: a bound on a broken
    test, not a timing assertion)."""
    for _ in range(600):
        members = await refstore.list_members()
        if {m.name for m in members} == want:
            return members
        await asyncio.sleep(0.1)
    raise AssertionError(f"members never became {want}: {members}")


async def test_daemons_join_leave_and_expire(
    tmp_path: Path, refstore_url: str, refstore: RefStore
) -> None:
    env = {
        "LSMSTORE_REFSTORE": refstore_url,
        "LSMSTORE_SERVER_AUTH_SECRET_KEY": secrets.token_hex(32),
        "LSMSTORE_SERVER_AFFINITY": "on",
        "LSMSTORE_SERVER_MEMBER_HEARTBEAT_S": "0.2",
        "LSMSTORE_SERVER_MEMBER_TTL_S": "1.5",
    }
    servers: list[ServerProcess] = []
    try:
        servers.append(start_server(tmp_path / "a", env=env))
        for name in ("b", "c"):
            servers.append(start_server(tmp_path / name, env=env, admin=servers[0].admin))
        names = [str(s.events("listening")[0]["member"]) for s in servers]
        members = await _until(refstore, set(names))
        assert {m.name: m.address for m in members} == {
            n: s.url for n, s in zip(names, servers, strict=True)
        }
        keys = [branch_key("repo", f"b{i}") for i in range(30)]
        owners = {k: rendezvous_owner(members, k) for k in keys}
        assert {o.name for o in owners.values() if o is not None} == set(names)

        assert servers[1].stop() == 0  # SIGTERM: drained, withdrawn at once
        await _until(refstore, {names[0], names[2]})

        servers[2].stop(SIGKILL)  # no withdrawal: its record expires
        left = await _until(refstore, {names[0]})
        assert all(rendezvous_owner(left, k) == left[0] for k in keys)
    finally:
        for s in servers:
            s.stop(SIGKILL)
