"""Model-based test: random puts, deletes, gets, lists and flushes against a dict, on the
embedded default (local files + embedded RefStore) and on Redis + S3 (moto)."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import boto3
import pytest
import uvloop
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

import lsmstore
from lsmstore.testing.servers import MotoServer

T = TypeVar("T")

KEYS = st.sampled_from([f"d{i % 3}/k{i}" for i in range(12)] + ["top", "d0/x/deep"])
VALUES = st.binary(max_size=40)
_names = itertools.count()


class StoreModel(RuleBasedStateMachine):
    """Subclasses set ``open_store`` and ``namespace``."""

    open_store: Callable[[], lsmstore.Store]
    namespace: Callable[[], str]

    def __init__(self) -> None:
        super().__init__()
        self.loop = uvloop.new_event_loop()
        self.model: dict[bytes, bytes] = {}
        self.store = self.open_store()
        name = f"model{next(_names)}"
        self.repo = self.run(self.store.create_repository(name, storage_namespace=self.namespace()))
        self.branch = self.repo.branch("main")

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.store.aclose())
        self.loop.close()

    @rule(key=KEYS, value=VALUES)
    def put(self, key: str, value: bytes) -> None:
        self.run(self.branch.put(key, value))
        self.model[key.encode()] = value

    @rule(items=st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=6))
    def put_many(self, items: list[tuple[str, bytes]]) -> None:
        self.run(self.branch.put_many(items))
        for k, v in items:
            self.model[k.encode()] = v

    @rule(writes=st.lists(st.tuples(KEYS, st.none() | VALUES), min_size=2, max_size=8))
    def concurrent_writes(self, writes: list[tuple[str, bytes | None]]) -> None:
        """Writes started together: they are staged in call order, so the last one wins."""

        async def go() -> None:
            await asyncio.gather(
                *(
                    self.branch.put(k, v) if v is not None else self.branch.delete(k)
                    for k, v in writes
                )
            )

        self.run(go())
        for k, v in writes:
            if v is None:
                self.model.pop(k.encode(), None)
            else:
                self.model[k.encode()] = v

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        self.run(self.branch.delete(key))
        self.model.pop(key.encode(), None)

    @rule(key=KEYS)
    def get(self, key: str) -> None:
        expected = self.model.get(key.encode())
        if expected is None:
            with pytest.raises(lsmstore.NotFoundError):
                self.run(self.branch.get(key))
        else:
            assert self.run(self.branch.get(key)) == expected

    @rule(prefix=st.sampled_from(["", "d0/", "d1/k", "top", "zz"]), delimited=st.booleans())
    def list(self, prefix: str, delimited: bool) -> None:
        async def go() -> list[tuple[str, bool]]:
            it = self.branch.list(prefix=prefix, delimiter="/" if delimited else None)
            return [(e.path, e.common_prefix) async for e in it]

        got = self.run(go())
        keys = sorted(k for k in self.model if k.startswith(prefix.encode()))
        expected: list[tuple[str, bool]] = []
        for k in keys:
            rest = k[len(prefix) :]
            if delimited and b"/" in rest:
                cp = (k[: len(prefix) + rest.index(b"/") + 1].decode(), True)
                if cp not in expected:
                    expected.append(cp)
            else:
                expected.append((k.decode(), False))
        assert got == expected

    @rule(after=KEYS, limit=st.integers(0, 5))
    def page(self, after: str, limit: int) -> None:
        async def go() -> list[str]:
            return [e.path async for e in self.branch.list(after=after, limit=limit)]

        expected = [k.decode() for k in sorted(self.model) if k > after.encode()][:limit]
        assert self.run(go()) == expected

    @precondition(lambda self: bool(self.model))
    @rule()
    def reopen(self) -> None:
        """A new client (as another process would) sees everything acknowledged."""
        self.run(self.store.aclose())
        self.store = self.open_store()
        self.repo = self.run(self.store.get_repository(self.repo.name))
        self.branch = self.repo.branch("main")


MODEL_SETTINGS = settings(
    max_examples=8,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_model_embedded(tmp_path: Path) -> None:
    home = tmp_path / "home"

    class Embedded(StoreModel):
        open_store = staticmethod(lambda: lsmstore.connect(home=str(home), batch_interval_ms=1))
        namespace = staticmethod(lambda: (tmp_path / f"ns{next(_names)}").as_uri())

    Embedded.TestCase.settings = MODEL_SETTINGS
    Embedded.TestCase().runTest()


def test_model_redis_and_s3(redis_server_url: str, moto: MotoServer) -> None:
    bucket = "model-bucket"
    s3 = boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1")
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    home = tempfile.mkdtemp(prefix="lsm-model-")
    prefix = next(_names)

    class RedisS3(StoreModel):
        open_store = staticmethod(
            lambda: lsmstore.connect(
                redis_server_url + "?prefix=" + f"model{prefix}:",
                home=home,
                batch_interval_ms=1,
            )
        )
        namespace = staticmethod(
            lambda: f"s3://{bucket}/ns{next(_names)}?endpoint_url={moto.endpoint}"
        )

    RedisS3.TestCase.settings = MODEL_SETTINGS
    RedisS3.TestCase().runTest()
