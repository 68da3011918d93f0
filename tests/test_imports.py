"""Imports from an object-store prefix (``Branch.import_start`` / ``import_status`` /
``import_cancel``) through the client API, on every transport (tests/test_client_api.py
style): one commit with entries that reference the listed objects, destinations
replaced, progress, cancel, errors."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import lsmstore
from lsmstore.client import Store
from lsmstore.errors import (
    ConflictError,
    ImportNotFoundError,
    InvalidInputError,
    ProtectedBranchError,
    RefNotFoundError,
)
from lsmstore.storage.base import ForwardingStore, ObjectMeta, ObjectStore
from lsmstore.storage.url import open_object_store
from lsmstore.types import ImportPath, ImportStatus
from tests.helpers.remote import lsm_server  # noqa: F401 - a fixture
from tests.test_client_api import (
    Target,
    target,  # noqa: F401 - the fixture
)


async def wait(branch: Any, import_id: str) -> ImportStatus:
    """Poll until the import is no longer running (the status says so, no clock)."""
    while True:
        s = await branch.import_status(import_id)
        if not s.running:
            return s
        await asyncio.sleep(0.05)


async def test_import_prefix_lands_as_one_commit(target: Target) -> None:  # noqa: F811
    repo = await target.repo()
    src = repo.branch("main")
    uploaded = {}
    for i in range(5):
        st = await src.upload(f"staged/f{i}", f"data {i}".encode())
        uploaded[st.physical_address] = st
    await src.commit("some objects")  # their entries: not what is imported
    await src.upload("dest/old-only", b"replaced")  # staged, stays staged on top
    base = await src.head()
    prefix = next(iter(uploaded)).rsplit("/", 1)[0] + "/"
    iid = await src.import_start([ImportPath(prefix, "dest/")], "import data", metadata={"k": "v"})
    s = await wait(src, iid)
    assert s.completed and s.error is None, s
    assert s.ingested_objects == len(uploaded) + 1  # the staged upload's data too
    assert s.commit is not None and s.commit_id is not None
    assert s.commit.parents == (base.base,)
    assert s.commit.message == "import data" and dict(s.commit.metadata) == {"k": "v"}
    log = [e async for e in src.log(limit=2)] if hasattr(src, "log") else None
    del log
    got = {o.physical_address: o async for o in repo.ref(s.commit_id).list_objects("dest/")}
    for address, st in uploaded.items():
        assert got[address].size == st.size and got[address].checksum == st.checksum
        assert got[address].path == "dest/" + address[len(prefix) :]
    # the commit holds the old objects too, and nothing else changed
    assert [o.path async for o in repo.ref(s.commit_id).list_objects("staged/")] == [
        f"staged/f{i}" for i in range(5)
    ]


async def _uploaded_prefix(branch: Any, paths: list[str]) -> tuple[str, dict[str, Any]]:
    """Upload ``paths``; the prefix of their data objects (``<namespace>/data/``) and
    their stats by physical address."""
    stats = {}
    for p in paths:
        st = await branch.upload(p, f"contents of {p}".encode())
        stats[st.physical_address] = st
    return next(iter(stats)).rsplit("/", 1)[0] + "/", stats


async def test_import_replaces_destinations_and_places_objects(target: Target) -> None:  # noqa: F811
    repo = await target.repo()
    main = repo.branch("main")
    prefix, stats = await _uploaded_prefix(main, ["a", "b", "c"])
    await main.upload("dest/stale", b"gone after the import")
    await main.upload("dest-sibling", b"not under dest/: kept")
    await main.commit("before")
    first = next(iter(stats))
    iid = await main.import_start(
        [
            ImportPath(prefix, "dest/"),
            ImportPath(first, "single/one", type="object"),
            # the same object again, later in the list: its destination wins
            ImportPath(first, "dest/" + first[len(prefix) :] + "x", type="object"),
        ],
        "replace",
    )
    s = await wait(main, iid)
    assert s.completed, s
    paths = [o.path async for o in main.list_objects()]
    data = [p for p in paths if p.startswith("dest/")]
    assert "dest/stale" not in data and "dest-sibling" in paths
    # the data of "dest/stale" and "dest-sibling" too, and the second object source
    assert len(data) == len(stats) + 3
    one = await main.stat_object("single/one")
    assert one.physical_address == first and one.size == stats[first].size
    reader = await main.open("single/one")
    assert await reader.read() == f"contents of {stats[first].path}".encode()
    # imported objects read back through the branch
    for address, st in stats.items():
        r = await main.open("dest/" + address[len(prefix) :])
        assert await r.read() == f"contents of {st.path}".encode()


async def test_import_errors_are_typed(target: Target) -> None:  # noqa: F811
    repo = await target.repo()
    main = repo.branch("main")
    prefix, _ = await _uploaded_prefix(main, ["a"])
    for bad in (
        [],
        [ImportPath(prefix, "d/", type="folder")],
        [ImportPath(prefix, "", type="object")],
        [ImportPath("s3://some-other-bucket/data/", "d/")],
        [ImportPath(prefix.rsplit("/data/", 1)[0] + "/_lsm/", "d/")],
        [ImportPath(prefix + "../../", "d/")],
    ):
        with pytest.raises(InvalidInputError):
            await main.import_start(bad, "m")
    with pytest.raises(RefNotFoundError):
        await repo.branch("nope").import_start([ImportPath(prefix, "d/")], "m")
    with pytest.raises(ImportNotFoundError):
        await main.import_status("no-such-import")
    with pytest.raises(ImportNotFoundError):
        await main.import_cancel("no-such-import")
    iid = await main.import_start([ImportPath(prefix, "d/")], "m")
    s = await wait(main, iid)
    assert s.completed
    with pytest.raises(ImportNotFoundError):  # the id is the branch's
        await repo.branch("other").import_status(iid)
    with pytest.raises(ConflictError):
        await main.import_cancel(iid)
    await repo.set_branch_protection(["main"])
    with pytest.raises(ProtectedBranchError):
        await main.import_start([ImportPath(prefix, "d/")], "m")


async def test_an_object_source_that_is_missing_fails_the_import(target: Target) -> None:  # noqa: F811
    repo = await target.repo()
    main = repo.branch("main")
    prefix, _ = await _uploaded_prefix(main, ["a"])
    head = (await main.head()).base
    iid = await main.import_start([ImportPath(prefix + "missing", "m", type="object")], "m")
    s = await wait(main, iid)
    assert not s.completed and s.error is not None and "does not exist" in s.error
    assert (await main.head()).base == head


async def test_many_objects_from_a_local_directory(tmp_path: Path) -> None:
    """Thousands of objects, ranges cut small: the listing streams into many ranges,
    merged onto a base that has objects under the destination (and beside it: placed
    side by side); an external directory through an allowed prefix; MD5 ETags."""
    n = 6000
    outside = tmp_path / "outside"
    for i in range(n):
        p = outside / f"batch={i // 1000}" / f"part-{i:05d}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f"row {i}\n".encode())
    settings = {"home": str(tmp_path / "home"), "batch_interval_ms": 1,
                "commit_range_min_bytes": 1024, "commit_range_max_bytes": 8192}  # fmt: skip
    async with lsmstore.connect(**settings) as store:
        repo = await store.create_repository(
            "many",
            storage_namespace=(tmp_path / "ns").as_uri(),
            metadata={"lsmstore.allowed_external_prefixes": outside.as_uri() + "/"},
        )
        main = repo.branch("main")
        for i in range(0, n, 7):  # some of them already there, with other contents
            await main.upload(f"in/batch={i // 1000}/part-{i:05d}.txt", b"old")
        await main.upload("in/not-in-the-source", b"deleted by the import")
        await main.upload("other/kept", b"kept")
        await main.commit("base")
        iid = await main.import_start([ImportPath(outside.as_uri() + "/", "in/")], "many")
        s = await wait(main, iid)
        assert s.completed and s.ingested_objects == n, s
        assert s.commit is not None
        ranges = (await repo.context().source.metarange(s.commit.metarange_id)).ranges
        assert len(ranges) > 50
        got = [o async for o in main.list_objects("in/")]
        assert [o.path for o in got] == sorted(
            f"in/batch={i // 1000}/part-{i:05d}.txt" for i in range(n)
        )
        for o in got[::997]:
            data = (outside / o.path.removeprefix("in/")).read_bytes()
            assert o.checksum == hashlib.md5(data).hexdigest() and o.size == len(data)
            assert o.physical_address == (outside / o.path.removeprefix("in/")).as_uri()
            reader = await main.open(o.path)
            assert await reader.read() == data
        assert [o.path async for o in main.list_objects("other/")] == ["other/kept"]
        # a second import into a fresh prefix: the ranges go beside the base's
        iid = await main.import_start([ImportPath(outside.as_uri() + "/batch=1/", "z/")], "z")
        s = await wait(main, iid)
        assert s.completed and s.ingested_objects == 1000
        assert len([o async for o in main.list_objects("z/")]) == 1000
        assert len([o async for o in main.list_objects("in/")]) == n


class HeldListing(ForwardingStore):
    """A store whose listings wait for ``go`` (a process stopping at a known point)."""

    def __init__(self, inner: ObjectStore, go: asyncio.Event) -> None:
        super().__init__(inner)
        self.go = go

    async def _held(self, prefix: str, after: str | None) -> AsyncIterator[ObjectMeta]:
        await self.go.wait()
        async for meta in self.inner.list(prefix, after=after):
            yield meta

    def list(self, prefix: str = "", *, after: str | None = None) -> AsyncIterator[ObjectMeta]:
        return self._held(prefix, after)


async def test_closing_the_store_fails_a_running_import(tmp_path: Path) -> None:
    """An embedded import stops with its store; reopened, its status says so."""
    cfg = lsmstore.load_config(home=str(tmp_path / "home"), batch_interval_ms=1)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"x")
    go = asyncio.Event()

    def open_objects(url: str) -> ObjectStore:
        inner = open_object_store(url)
        return HeldListing(inner, go) if url.startswith("file:///") and "src" in url else inner

    meta = {"lsmstore.allowed_external_prefixes": src.as_uri() + "/"}
    async with Store(cfg, open_objects=open_objects) as store:
        repo = await store.create_repository(
            "closing", storage_namespace=(tmp_path / "ns").as_uri(), metadata=meta
        )
        main = repo.branch("main")
        head = (await main.head()).base
        iid = await main.import_start([ImportPath(src.as_uri() + "/", "d/")], "m")
        await asyncio.sleep(0)  # it starts, and waits for its listing
    go.set()
    async with lsmstore.connect(home=str(tmp_path / "home")) as store:
        main = (await store.get_repository("closing")).branch("main")
        s = await main.import_status(iid)
        assert s.error is not None and "shut down" in s.error, s
        assert (await main.head()).base == head


async def test_an_import_stopped_past_its_point_of_no_return_is_settled(tmp_path: Path) -> None:
    """The records a process leaves when it stops between taking its ``commit``
    decision and writing "completed": the status reads completed when that commit is
    in the branch's history, failed when it is not."""
    from lsmstore.operations import imports as _imports

    async with lsmstore.connect(home=str(tmp_path / "home"), batch_interval_ms=1) as store:
        repo = await store.create_repository("settle", storage_namespace=(tmp_path / "ns").as_uri())
        main = repo.branch("main")
        prefix, _ = await _uploaded_prefix(main, ["a"])
        iid = await main.import_start([ImportPath(prefix, "d/")], "m")
        done = await wait(main, iid)
        assert done.completed and done.commit_id is not None
        await main.upload("later", b"x")
        await main.commit("after the import")  # the import's commit is no longer the head
        key = f"{lsmstore.namespace.owner_id(repo.info)}:{iid}"
        record = json.loads(await store.refstore.get_record(_imports.KIND, key))
        side = await repo.create_branch("side", source="main")
        await side.upload("s", b"s")
        elsewhere = await side.commit("not on main")
        cases = ((done.commit_id, True), (elsewhere.id, False), ("0" * 64, False))
        for commit_id, completed in cases:
            stopped = {**record, "state": "running", "commit_id": commit_id}
            await store.refstore.put_record(_imports.KIND, key, json.dumps(stopped).encode())
            s = await main.import_status(iid)
            assert s.completed is completed, s
            if completed:
                assert s.commit_id == done.commit_id and s.error is None
            else:
                assert s.error is not None and "interrupted while committing" in s.error


async def test_an_import_runs_the_commit_hooks(tmp_path: Path) -> None:
    """As lakeFS: the import's commit runs pre-commit (a failing hook fails the
    import, nothing committed) and post-commit hooks."""
    from lsmstore.testing.webhook_server import WebhookServer

    with WebhookServer() as hooks:
        async with lsmstore.connect(
            home=str(tmp_path / "home"), batch_interval_ms=1, actions_webhook_allow="127.0.0.1"
        ) as store:
            repo = await store.create_repository(
                "hooked", storage_namespace=(tmp_path / "ns").as_uri()
            )
            main = repo.branch("main")
            action = (
                "name: require owner\non:\n  pre-commit:\n    branches: [main]\nhooks:\n"
                "  - id: owner\n    type: webhook\n    properties:\n"
                f"      url: {hooks.url('/require')}\n"
                "      query_params:\n        key: owner\n"
                "  - id: seen\n    type: webhook\n    properties:\n"
                f"      url: {hooks.url('/seen')}\n"
            )
            post = (
                "name: after\non:\n  post-commit:\n    branches: [main]\nhooks:\n"
                "  - id: after\n    type: webhook\n    properties:\n"
                f"      url: {hooks.url('/seen')}\n"
            )
            await main.upload("_lakefs_actions/require.yaml", action.encode())
            await main.upload("_lakefs_actions/after.yaml", post.encode())
            prefix, _ = await _uploaded_prefix(main, ["a", "b"])
            await main.commit("actions", metadata={"owner": "ops"})
            head = (await main.head()).base
            iid = await main.import_start([ImportPath(prefix, "d/")], "no owner")
            s = await wait(main, iid)
            assert not s.completed and s.error is not None, s
            assert "pre-commit hook aborted" in s.error
            assert (await main.head()).base == head
            iid = await main.import_start(
                [ImportPath(prefix, "d/")], "with owner", metadata={"owner": "me"}
            )
            s = await wait(main, iid)
            assert s.completed and s.commit_id is not None, s
            bodies = [c.body for c in hooks.calls_to("/seen")]
            assert [b["event_type"] for b in bodies][-2:] == ["pre-commit", "post-commit"]
            assert bodies[-1]["commit_id"] == s.commit_id
            assert bodies[-2]["commit_message"] == "with owner"
