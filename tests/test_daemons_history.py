"""Three ``lsmstore serve`` daemons behind one (simulated) load balancer, a compactor and
a committer, on a real redis-server and a real S3 server (SeaweedFS), checked as a
history: writers through every daemon (raw keys through the batch endpoint, objects
through the S3 gateway) with commits meanwhile, the owner of the hot branch killed
with ``kill -9`` mid-load.

The history is :class:`lsmstore.testing.soak.History` (each key written by one task,
one operation at a time): afterwards every key, read through every live daemon and
from the final commit, holds a value the history allows -- an acknowledged write is
never lost, a delete never undone.  During the load each acknowledged put is read back
through another daemon (read-your-writes across daemons).  The kill moves the branch's
ownership to a live member: writes keep being acknowledged throughout, and afterwards a
write through a non-owner is forwarded to the new owner."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

import lsmstore
from lsmstore.affinity import branch_key, rendezvous_owner
from lsmstore.errors import LsmError, NotFoundError, UnavailableError
from lsmstore.refstore.url import open_refstore
from lsmstore.remote.client import RemoteRepository, RemoteStore
from lsmstore.testing.daemons import Cluster, metric, s3_namespace, start_cluster
from lsmstore.testing.server_process import ServerProcess
from lsmstore.testing.servers import MOTO_ENV, WeedServer, new_bucket
from lsmstore.testing.soak import History

REPO = "hist"
BRANCH = "main"
TASKS = 6
#: Writers of objects through the S3 gateway (PutObject), beside the raw-key writers.
S3_TASKS = 2
KEYS_PER_TASK = 12
#: Seconds of load before the kill, and after it.
BEFORE_S, AFTER_S = 6.0, 8.0


@pytest.fixture
async def cluster(
    tmp_path: Path, redis_server_url: str, seaweed: WeedServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Cluster]:
    for k, v in MOTO_ENV.items():
        monkeypatch.setenv(k, v)
    c = await asyncio.to_thread(
        start_cluster, tmp_path, redis_url=redis_server_url, s3_endpoint=seaweed.endpoint
    )
    try:
        yield c
    finally:
        await asyncio.to_thread(c.stop)


def _client(d: ServerProcess, home: Path) -> RemoteStore:
    store = lsmstore.connect(
        d.url, access_key_id=d.admin[0], secret_access_key=d.admin[1], home=str(home),
        remote_timeout_s=30,
    )  # fmt: skip
    assert isinstance(store, RemoteStore)
    return store


def _s3_client(d: ServerProcess) -> Any:
    return boto3.client(
        "s3", endpoint_url=d.url, aws_access_key_id=d.admin[0],
        aws_secret_access_key=d.admin[1], region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )  # fmt: skip


class Run:
    """The writers, the committer task and what they saw."""

    def __init__(self, cluster: Cluster, repos: dict[str, RemoteRepository], seed: int) -> None:
        self.cluster = cluster
        self.repos = repos
        self.history = History()
        self.rng = random.Random(seed)
        self.ids = itertools.count()
        self.stop = asyncio.Event()
        self.read_your_writes = 0
        self.stale_reads: list[str] = []
        self.acks_after_kill = 0
        self.killed = False
        self.commits = 0
        #: The objects written through the S3 gateway: their own history, by path.
        self.objects = History()
        self.s3 = {d.url: _s3_client(d) for d in cluster.daemons}

    def _live(self) -> list[ServerProcess]:
        return self.cluster.live()

    async def writer(self, task: int) -> None:
        keys = [f"t{task}/k{j}" for j in range(KEYS_PER_TASK)]
        n = 0
        while not self.stop.is_set():
            n += 1
            live = self._live()
            via = live[(task + n) % len(live)]
            chosen = self.rng.sample(keys, self.rng.randint(1, 3))
            delete = self.rng.random() < 0.15
            values: dict[str, str | None] = {
                k: None if delete else f"{task}-{n}-{k}" for k in chosen
            }
            op = str(next(self.ids))
            self.history.record({"t": "begin", "op": op, "kind": "delete" if delete else "put",
                                 "keys": values})  # fmt: skip
            branch = self.repos[via.url].branch(BRANCH)
            try:
                if delete:
                    await branch.delete_many(chosen)
                else:
                    await branch.put_many([(k, str(v).encode()) for k, v in values.items()])
            except UnavailableError:  # through the daemon being killed: may have landed
                self.history.record({"t": "fail", "op": op})
                await asyncio.sleep(0.05)
                continue
            self.history.record({"t": "ack", "op": op})
            if self.killed:
                self.acks_after_kill += 1
            await self._read_back(via, chosen[0], values[chosen[0]])

    async def s3_writer(self, task: int) -> None:
        paths = [f"s3/t{task}/o{j}" for j in range(KEYS_PER_TASK)]
        n = 0
        while not self.stop.is_set():
            n += 1
            live = self._live()
            via = live[(task + n) % len(live)]
            path = self.rng.choice(paths)
            value = f"s3-{task}-{n}"
            op = str(next(self.ids))
            self.objects.record({"t": "begin", "op": op, "kind": "put", "keys": {path: value}})
            try:
                await asyncio.to_thread(
                    self.s3[via.url].put_object, Bucket=REPO, Key=f"{BRANCH}/{path}",
                    Body=value.encode(),
                )  # fmt: skip
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
                self.objects.record({"t": "fail", "op": op})  # the daemon being killed
                await asyncio.sleep(0.05)
                continue
            self.objects.record({"t": "ack", "op": op})

    async def _read_back(self, wrote: ServerProcess, key: str, value: str | None) -> None:
        """Read-your-writes through another live daemon (this task is the key's only
        writer, so it must see exactly its acknowledged write)."""
        others = [d for d in self._live() if d is not wrote]
        if not others:
            return
        via = self.rng.choice(others)
        try:
            got: str | None = (await self.repos[via.url].branch(BRANCH).get(key)).decode()
        except NotFoundError:
            got = None
        except UnavailableError:
            return  # that daemon was just killed: nothing read
        self.read_your_writes += 1
        if got != value:
            self.stale_reads.append(f"{key}: wrote {value!r} through {wrote.url}, "
                                    f"read {got!r} through {via.url}")  # fmt: skip

    async def committer(self) -> None:
        while not self.stop.is_set():
            await asyncio.sleep(1.5)
            via = self.rng.choice(self._live())
            try:
                await (
                    self.repos[via.url]
                    .branch(BRANCH)
                    .commit(f"commit {self.commits}", allow_empty=True)
                )
                self.commits += 1
            except LsmError:
                pass  # a commit through the daemon being killed, or a conflict: retried


async def _owner(cluster: Cluster) -> tuple[ServerProcess, list[str]]:
    """The live member that owns the branch, from the RefStore's member records."""
    store = open_refstore(cluster.refstore_url)
    try:
        members = await store.list_members()
    finally:
        await store.aclose()
    owner = rendezvous_owner(members, branch_key(REPO, BRANCH))
    assert owner is not None
    by_name = {cluster.member_name(d): d for d in cluster.daemons}
    return by_name[owner.name], sorted(m.name for m in members)


async def _until_members(cluster: Cluster, want: set[str]) -> None:
    for _ in range(600):  # 60 s at most: a bound on a broken test (lifetime 2 s)
        _, names = await _owner(cluster)
        if set(names) == want:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the members never became {want}")


async def test_history_through_three_daemons_with_a_kill(
    cluster: Cluster, seaweed: WeedServer, tmp_path: Path
) -> None:
    bucket = await new_bucket(seaweed.endpoint, "hist")
    clients = {d.url: _client(d, tmp_path / f"client{i}") for i, d in enumerate(cluster.daemons)}
    try:
        first = clients[cluster.daemons[0].url]
        await first.create_repository(
            REPO, storage_namespace=s3_namespace(bucket, REPO, seaweed.endpoint)
        )
        repos = {url: await c.get_repository(REPO) for url, c in clients.items()}
        await _until_members(cluster, {cluster.member_name(d) for d in cluster.daemons})
        run = Run(cluster, repos, seed=28)
        tasks = [asyncio.create_task(run.writer(t)) for t in range(TASKS)]
        tasks += [asyncio.create_task(run.s3_writer(t)) for t in range(S3_TASKS)]
        tasks.append(asyncio.create_task(run.committer()))

        await asyncio.sleep(BEFORE_S)
        owner, _ = await _owner(cluster)
        received_before = metric(owner, "lsmstore_forwarded_writes_total", outcome="received")
        assert received_before > 0  # the others sent it their writes of the branch
        run.killed = True
        await asyncio.to_thread(cluster.kill, owner)
        await _until_members(cluster, {cluster.member_name(d) for d in cluster.live()})
        new_owner, _ = await _owner(cluster)
        assert new_owner is not owner
        received = metric(new_owner, "lsmstore_forwarded_writes_total", outcome="received")
        await asyncio.sleep(AFTER_S)
        run.stop.set()
        await asyncio.gather(*tasks)
        # Ownership moved: the new owner received writes forwarded by the other daemon.
        assert metric(new_owner, "lsmstore_forwarded_writes_total", outcome="received") > received
        assert run.acks_after_kill > 0

        final = await repos[new_owner.url].branch(BRANCH).commit("final", allow_empty=True)
        await _check(run, final.id)
    finally:
        for c in clients.values():
            await c.aclose()


async def _check(run: Run, commit_id: str) -> None:
    assert not run.stale_reads, run.stale_reads[:5]
    assert run.read_your_writes >= 20
    assert run.commits > 0
    counts = run.history.counts()
    assert counts["put_ack"] >= 50 and counts["delete_ack"] >= 5, counts  # not vacuous
    assert counts["ops_fail"] < counts["ops_ack"] / 10, counts
    wrong: list[str] = []
    checked = 0
    for d in run.cluster.live():
        repo = run.repos[d.url]
        refs: list[Any] = [repo.branch(BRANCH), repo.ref(commit_id)]
        for ref in refs:
            for key in run.history.per_key:
                allowed, _ = run.history.allowed(key)
                try:
                    got: str | None = (await ref.get(key)).decode()
                except NotFoundError:
                    got = None
                checked += 1
                if got not in allowed:
                    wrong.append(f"{key} via {d.url} at {ref}: {got!r} not in {allowed!r}")
    objects = run.objects.counts()
    assert objects["put_ack"] >= 10 and objects["ops_fail"] < objects["ops_ack"] / 10, objects
    for d in run.cluster.live():
        repo = run.repos[d.url]
        refs = [repo.branch(BRANCH), repo.ref(commit_id)]
        for ref in refs:
            for path in run.objects.per_key:
                allowed, _ = run.objects.allowed(path)
                try:
                    reader = await ref.open(path)
                    try:
                        got = (await reader.read()).decode()
                    finally:
                        await reader.aclose()
                except NotFoundError:
                    got = None
                checked += 1
                if got not in allowed:
                    wrong.append(f"{path} via {d.url} at {ref}: {got!r} not in {allowed!r}")
    assert not wrong, wrong[:10]
    keys = len(run.history.per_key) + len(run.objects.per_key)
    assert checked == 2 * len(run.cluster.live()) * keys
