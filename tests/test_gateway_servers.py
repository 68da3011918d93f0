"""The S3 gateway of several ``lsmstore serve`` processes on one RefStore (a real
redis-server) and one storage namespace: ``If-None-Match: *`` PUTs of one key sent to
two servers at once from two boto3 connections -- exactly one wins, every time, and the
loser's data does not stay in the namespace (docs/objects.md, "Semantics")."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError
from test_gateway_boto3 import s3_client

from lsmstore.testing.server_process import ServerProcess, start_server

pytestmark = pytest.mark.timeout(300)

SECRET = "a-signing-secret-shared-by-every-server-" + "g" * 16
ROUNDS = 8


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory, redis_server_url: str
) -> Iterator[list[ServerProcess]]:
    """Two servers, each with its own home, on one fresh Redis RefStore prefix."""
    env = {
        "LSMSTORE_SERVER_AUTH_SECRET_KEY": SECRET,
        "LSMSTORE_REFSTORE": f"{redis_server_url}?prefix=test:{uuid.uuid4().hex}:",
    }
    root = Path(tmp_path_factory.mktemp("servers"))
    first = start_server(root / "a", env=env)
    procs = [first]
    try:
        procs.append(start_server(root / "b", env=env, admin=first.admin))
        yield procs
    finally:
        for p in procs:
            p.stop()


def _code(e: ClientError) -> str:
    return str(e.response["Error"]["Code"])


def test_if_none_match_star_on_two_servers_exactly_one_wins(
    servers: list[ServerProcess],
) -> None:
    a, b = servers
    repo = f"race{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=a.api, auth=a.admin, timeout=60) as admin:
        body = {"name": repo, "storage_namespace": f"local://{repo}"}
        assert admin.post("/repositories", json=body).status_code == 201
    clients = [s3_client(a, a.admin), s3_client(b, a.admin)]
    winners: dict[str, bytes] = {}
    for i in range(ROUNDS):
        key = f"main/race/{i}.txt"
        outcomes: dict[int, str] = {}
        barrier = threading.Barrier(2)

        def put(n: int, client: Any, key: str = key, outcomes: dict[int, str] = outcomes,
                barrier: threading.Barrier = barrier) -> None:  # fmt: skip
            barrier.wait()
            try:
                client.put_object(Bucket=repo, Key=key, Body=f"from server {n}".encode(),
                                  IfNoneMatch="*")  # fmt: skip
                outcomes[n] = "ok"
            except ClientError as e:
                outcomes[n] = _code(e)

        threads = [threading.Thread(target=put, args=(n, c)) for n, c in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes.values()) == ["PreconditionFailed", "ok"], (i, outcomes)
        won = next(n for n, o in outcomes.items() if o == "ok")
        winners[key] = f"from server {won}".encode()
        # Both servers read the winner's data; a repeated conditional PUT loses on both.
        for c in clients:
            assert c.get_object(Bucket=repo, Key=key)["Body"].read() == winners[key]
            with pytest.raises(ClientError) as e:
                c.put_object(Bucket=repo, Key=key, Body=b"late", IfNoneMatch="*")
            assert _code(e.value) == "PreconditionFailed"
    # The losers' data objects were deleted: the namespace holds one per key.
    data = a.home / "data" / repo / "data"
    assert len([p for p in data.iterdir() if p.is_file()]) == ROUNDS
