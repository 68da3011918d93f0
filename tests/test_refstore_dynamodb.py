"""The DynamoDB RefStore: the shared contract on moto's server over real HTTP.

Race tests (``test_concurrent_*``) run on ``moto_serial``: moto's threaded server does
not make conditional updates atomic, real DynamoDB does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from lsmstore.errors import RepositoryNotFoundError, UnavailableError
from lsmstore.refstore.base import MAX_FILE_IDS, Ref, Repository
from lsmstore.refstore.dynamodb import ITEM_LIMIT, REPOSITORIES, DynamoRefStore, _item_size
from lsmstore.refstore.url import open_refstore
from lsmstore.testing.refstore_contract import REPO, FakeClock, RefStoreContract, branch, ids
from lsmstore.testing.servers import MOTO_ENV, MotoServer, free_port


@asynccontextmanager
async def _fresh_table(
    request: pytest.FixtureRequest, clock: FakeClock
) -> AsyncIterator[DynamoRefStore]:
    serial = request.node.name.startswith("test_concurrent_")
    server: MotoServer = request.getfixturevalue("moto_serial" if serial else "moto")
    table = f"refs-{uuid.uuid4().hex[:12]}"
    store = DynamoRefStore(table, region="us-east-1", endpoint_url=server.endpoint, clock=clock)
    await store.create_table()
    try:
        yield store
    finally:
        if store._closed:  # the test closed it
            store = DynamoRefStore(table, region="us-east-1", endpoint_url=server.endpoint)
        await store.delete_table()
        await store.aclose()


@pytest.fixture
async def table_store(request: pytest.FixtureRequest) -> AsyncIterator[DynamoRefStore]:
    async with _fresh_table(request, FakeClock()) as store:
        yield store


class TestDynamoRefStore(RefStoreContract):
    @pytest.fixture
    async def refstore(self, request: pytest.FixtureRequest) -> AsyncIterator[DynamoRefStore]:
        self.clock = FakeClock()
        async with _fresh_table(request, self.clock) as store:
            yield store

    async def pass_time(self, seconds: float) -> None:
        self.clock.now += seconds


async def test_concurrent_long_prefix_swaps_keep_appends(table_store: DynamoRefStore) -> None:
    """Swaps too long for one condition go read-check-write; appends still survive."""
    store = DynamoRefStore(
        table_store.table,
        region="us-east-1",
        endpoint_url=table_store._endpoint_url,
        max_prefix_conditions=0,
    )
    async with store:
        await store.create_repository(Repository(REPO, "file:///d", "main"))
        await store.create_ref(REPO, "main", branch())
        consumed: list[str] = []
        done = asyncio.Event()

        async def appender() -> None:
            for f in ids("a", 60):
                await store.append_l1(REPO, "main", f)
            done.set()

        async def swapper() -> None:
            n = 0
            while not done.is_set():
                cur = await store.get_ref(REPO, "main")
                prefix = cur.l1[: len(cur.l1) // 2 + 1]
                if n % 2:
                    await store.swap_compacted(
                        REPO, "main", base=cur.base, l2_old=cur.l2, l1_prefix=prefix, l2_new=()
                    )
                else:
                    await store.swap_committed(
                        REPO,
                        "main",
                        base=cur.base,
                        l2_old=cur.l2,
                        l1_prefix=prefix,
                        new_base=f"c{n}",
                    )
                consumed.extend(prefix)
                n += 1

        await asyncio.gather(appender(), swapper())
        final = (await store.get_ref(REPO, "main")).l1
        assert sorted(consumed + list(final)) == list(ids("a", 60))


async def test_interrupted_repository_delete_is_finished(table_store: DynamoRefStore) -> None:
    await table_store.create_repository(Repository(REPO, "file:///d", "main"))
    await table_store.create_ref(REPO, "main", branch(l1=("f1",)))
    # A delete that stopped after marking the record: the refs are still there.
    await table_store._request(
        "update_item",
        "test",
        mutation=True,
        idempotent=True,
        TableName=table_store.table,
        Key={"repo": {"S": REPOSITORIES}, "name": {"S": REPO}},
        UpdateExpression="SET deleting = :t",
        ExpressionAttributeValues={":t": {"BOOL": True}},
    )
    with pytest.raises(RepositoryNotFoundError):
        await table_store.get_repository(REPO)
    with pytest.raises(RepositoryNotFoundError):
        await table_store.create_ref(REPO, "dev", branch())
    assert await table_store.list_repositories() == []
    await table_store.create_repository(Repository(REPO, "file:///new", "main"))
    assert await table_store.list_refs(REPO) == []
    assert (await table_store.get_repository(REPO)).storage_namespace == "file:///new"


async def test_create_table_twice(table_store: DynamoRefStore) -> None:
    await table_store.create_table()
    await table_store.create_repository(Repository(REPO, "file:///d", "main"))
    await table_store.create_table()
    assert [r.name for r in await table_store.list_repositories()] == [REPO]


async def test_missing_table_is_unavailable(moto: MotoServer) -> None:
    async with DynamoRefStore("no-such-table", region="us-east-1", endpoint_url=moto.endpoint) as s:
        with pytest.raises(UnavailableError, match="no-such-table"):
            await s.get_ref(REPO, "main")


async def test_unreachable_endpoint_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in MOTO_ENV.items():
        monkeypatch.setenv(k, v)
    endpoint = f"http://127.0.0.1:{free_port()}"
    async with DynamoRefStore(
        "refs", region="us-east-1", endpoint_url=endpoint, timeout=1.0, max_attempts=2
    ) as store:
        async with asyncio.timeout(10):
            with pytest.raises(UnavailableError) as e:
                await store.append_l1(REPO, "main", "f1")
            assert e.value.outcome_unknown
            with pytest.raises(UnavailableError):
                await store.get_ref(REPO, "main")


async def test_open_by_url(moto: MotoServer) -> None:
    table = f"refs-{uuid.uuid4().hex[:12]}"
    store = open_refstore(f"dynamodb://{table}?region=us-east-1&endpoint_url={moto.endpoint}")
    assert isinstance(store, DynamoRefStore) and store.table == table
    async with store:
        await store.create_table()
        await store.create_repository(Repository(REPO, "file:///d", "main"))
        await store.create_ref(REPO, "v1", Ref("tag", "c1"))
        assert await store.get_ref(REPO, "v1") == Ref("tag", "c1")
        await store.delete_table()


async def test_listings_page_through_small_pages(table_store: DynamoRefStore) -> None:
    store = DynamoRefStore(
        table_store.table,
        region="us-east-1",
        endpoint_url=table_store._endpoint_url,
        page_size=3,
    )
    async with store:
        for name in ("r0", "r1", "r2", "r3", "r4", "r5", "r6"):
            await store.create_repository(Repository(name, "file:///d", "main"))
        await store._request(  # r1..r3 being deleted: skipped, paging goes on
            "batch_write_item",
            "test",
            mutation=True,
            idempotent=True,
            RequestItems={
                store.table: [
                    {
                        "PutRequest": {
                            "Item": {
                                "repo": {"S": REPOSITORIES},
                                "name": {"S": n},
                                "deleting": {"BOOL": True},
                            }
                        }
                    }
                    for n in ("r1", "r2", "r3")
                ]
            },
        )
        assert [r.name for r in await store.list_repositories(limit=3)] == ["r0", "r4", "r5"]
        assert [r.name for r in await store.list_repositories()] == ["r0", "r4", "r5", "r6"]
        names = [f"b{i:02d}" for i in range(11)]
        for n in names:
            await store.create_ref("r0", n, branch())
        await store.create_ref("r0", "c", branch())
        assert [n for n, _ in await store.list_refs("r0", prefix="b")] == names
        assert [n for n, _ in await store.list_refs("r0", prefix="b", after="b03", limit=5)] == (
            names[4:9]
        )
        await store.delete_repository("r0")
        assert await table_store.list_repositories() == [
            await table_store.get_repository(n) for n in ("r4", "r5", "r6")
        ]


class TailMovesFirst(DynamoRefStore):
    """Before its first conditional write, another swap's tail update lands (only
    ``cver`` changes): the swap must be sent again, not reported as a conflict."""

    moved = False

    async def _write(self, repo: str, name: str, what: str, **kwargs: Any) -> dict[str, Any]:
        if what.startswith("swap") and not self.moved:
            self.moved = True
            await self._request(
                "update_item",
                "test",
                mutation=True,
                idempotent=False,
                TableName=self.table,
                Key=self._key(repo, name),
                UpdateExpression="SET #cver = :other",
                ExpressionAttributeNames={"#cver": "cver"},
                ExpressionAttributeValues={":other": {"S": "someone-else"}},
            )
        return await super()._write(repo, name, what, **kwargs)


async def test_swap_resent_when_only_the_tail_moved(table_store: DynamoRefStore) -> None:
    store = TailMovesFirst(
        table_store.table, region="us-east-1", endpoint_url=table_store._endpoint_url
    )
    async with store:
        await store.create_repository(Repository(REPO, "file:///d", "main"))
        await store.create_ref(REPO, "main", branch("c1", l1=("f1", "f2", "f3")))
        new = await store.swap_compacted(
            REPO, "main", base="c1", l2_old=(), l1_prefix=("f1",), l2_new=("g1",)
        )
        assert store.moved and new == branch("c1", ("g1",), ("f2", "f3"))
        assert await store.append_l1(REPO, "main", "f1") == new  # consumed
        store.moved = False
        new = await store.swap_committed(
            REPO, "main", base="c1", l2_old=("g1",), l1_prefix=("f2",), new_base="c2"
        )
        assert store.moved and new == branch("c2", (), ("f3",))
        for f in ("f1", "f2"):
            assert await store.append_l1(REPO, "main", f) == new


async def test_largest_ref_item_fits(table_store: DynamoRefStore) -> None:
    """L1 + L2 at MAX_FILE_IDS and a consumed tail as long, all ids of 64 characters."""
    await table_store.create_repository(Repository(REPO, "file:///d", "main"))
    long_ids = tuple(f"{i:05d}" + "x" * 59 for i in range(2 * MAX_FILE_IDS))
    old, new = long_ids[:MAX_FILE_IDS], long_ids[MAX_FILE_IDS:]
    await table_store.create_ref(REPO, "big", branch(l1=old))
    await table_store.swap_compacted(REPO, "big", base="c0", l2_old=(), l1_prefix=old, l2_new=new)
    item = await table_store._get_item(REPO, "big", "test")
    assert item is not None and item["consumed"]["S"].count(",") == MAX_FILE_IDS + 1
    assert 250 * 1024 < _item_size(item) < ITEM_LIMIT * 0.7
    # get_ref leaves the tail on the server.
    assert await table_store.get_ref(REPO, "big") == branch(l2=new)
