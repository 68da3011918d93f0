"""One client test suite, three transports: the embedded default, a shared RefStore
(a real redis-server) with S3 namespaces (moto over HTTP), and the server (a real
``lsmstore serve`` process reached over HTTP by the remote client).  Same calls, same
results, same typed errors (lsmstore.api)."""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import lsmstore
from lsmstore.errors import (
    EntryTooLargeError,
    InvalidInputError,
    InvalidKeyError,
    InvalidNameError,
    MergeConflictError,
    NotFoundError,
    NothingToCommitError,
    ObjectExistsError,
    ObjectNotFoundError,
    RefExistsError,
    RefNotFoundError,
    RepositoryNotFoundError,
    WorkspaceExistsError,
    WorkspaceNotFoundError,
)
from lsmstore.testing.servers import new_bucket
from lsmstore.types import Entry, ObjectLink, Stat
from tests.helpers.remote import lsm_server  # noqa: F401 - the fixture

TRANSPORTS = ["embedded", "redis_s3", "server"]


@dataclass
class Target:
    kind: str
    store: Any
    namespace: Callable[[str], str]

    async def repo(self, name: str | None = None) -> Any:
        name = name or f"r{uuid.uuid4().hex[:10]}"
        return await self.store.create_repository(name, storage_namespace=self.namespace(name))


@pytest.fixture(params=TRANSPORTS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    kind = request.param
    settings: dict[str, Any] = {"home": str(tmp_path / "home"), "batch_interval_ms": 1}
    if kind == "embedded":
        async with lsmstore.connect(**settings) as store:
            yield Target(kind, store, lambda n: (tmp_path / "ns" / n).as_uri())
    elif kind == "redis_s3":
        redis_url = request.getfixturevalue("redis_server_url")
        moto = request.getfixturevalue("moto")
        bucket = await new_bucket(moto.endpoint, "c")
        url = f"{redis_url}?prefix=c{uuid.uuid4().hex[:8]}:"
        async with lsmstore.connect(url, **settings) as store:
            yield Target(kind, store, lambda n: f"s3://{bucket}/{n}?endpoint_url={moto.endpoint}")
    else:
        server = request.getfixturevalue("lsm_server")
        key_id, secret = server.admin
        async with lsmstore.connect(
            server.url, access_key_id=key_id, secret_access_key=secret
        ) as store:
            yield Target(kind, store, lambda n: f"local://{n}")


async def test_connect_picks_the_transport(target: Target) -> None:
    from lsmstore.remote.client import RemoteStore

    assert isinstance(target.store, RemoteStore) == (target.kind == "server")


async def test_model(target: Target) -> None:
    """Random puts, deletes and batches against a dict; reads, listings and old commits
    agree with the model."""
    repo = await target.repo()
    main = repo.branch()
    rng = random.Random(7)
    model: dict[str, bytes] = {}
    keys = [f"d{d}/k{i:02d}" for d in range(3) for i in range(12)]
    snapshots: list[tuple[str, dict[str, bytes]]] = []
    for step in range(4):
        for _ in range(30):
            op = rng.random()
            k = rng.choice(keys)
            if op < 0.5:
                v = rng.randbytes(rng.randint(0, 40))
                await main.put(k, v)
                model[k] = v
            elif op < 0.7:
                await main.delete(k)
                model.pop(k, None)
            elif op < 0.85:
                batch = {rng.choice(keys): rng.randbytes(8) for _ in range(5)}
                await main.put_many(list(batch.items()))
                model.update(batch)
            else:
                gone = {rng.choice(keys) for _ in range(3)}
                await main.delete_many(sorted(gone))
                for g in gone:
                    model.pop(g, None)
        for k in keys:
            assert await main.exists(k) == (k in model), k
            if k in model:
                assert await main.get(k) == model[k]
        assert [e.path async for e in main.list()] == sorted(model)
        assert [e.path async for e in main.list(prefix="d1/", limit=3)] == sorted(
            k for k in model if k.startswith("d1/")
        )[:3]
        after = sorted(model)[len(model) // 2]
        assert [e.path async for e in main.list(after=after)] == [
            k for k in sorted(model) if k > after
        ]
        tops = [(e.path, e.common_prefix) async for e in main.list(delimiter="/")]
        assert tops == [(d, True) for d in sorted({k.split("/")[0] + "/" for k in model})]
        c = await main.commit(f"step {step}")
        snapshots.append((c.message, dict(model)))
    for n, (message, snap) in enumerate(reversed(snapshots)):
        ref = repo.ref(f"main~{n}")
        assert (await ref.commit()).message == message
        assert [e.path async for e in ref.list()] == sorted(snap)
        for k, v in snap.items():
            assert await ref.get(k) == v


async def test_version_control(target: Target) -> None:
    repo = await target.repo()
    main = repo.branch("main")
    await main.put_many([("a", b"1"), ("b", b"1"), ("c", b"1")])
    assert {(c.key, c.kind) for c in await main.diff_uncommitted()} == {
        (b"a", "added"), (b"b", "added"), (b"c", "added"),
    }  # fmt: skip
    head = await main.head()
    assert head.l1 or head.l2
    base = await main.commit("base", metadata={"job": "t"})
    assert base.metadata == {"job": "t"} and base.message == "base"
    assert not (await main.head()).l1
    with pytest.raises(NothingToCommitError):
        await main.commit("again")

    dev = await repo.create_branch("dev", source="main")
    with pytest.raises(RefExistsError):
        await repo.create_branch("dev", source="main")
    await dev.put("a", b"dev")
    await dev.delete("b")
    await dev.commit("dev work")
    assert sorted(await repo.list_branches()) == ["dev", "main"]
    assert [(c.key, c.kind) async for c in repo.diff("main", "dev")] == [
        (b"a", "changed"), (b"b", "removed"),
    ]  # fmt: skip

    await main.put("d", b"staged")  # stays staged across the merge
    result = await repo.merge("dev", into="main")
    assert result.merged
    assert await main.get("a") == b"dev" and not await main.exists("b")
    assert await main.get("d") == b"staged"
    assert not (await repo.merge("dev", into="main")).merged
    log = [e.message async for e in repo.log("main")]
    assert log[1:] == ["base", "Repository created"]
    assert [e.message async for e in repo.log("main", limit=1)] == [log[0]]

    assert len(await repo.create_tag("v1", "main")) == 64
    assert await repo.list_tags() == ["v1"]
    assert await repo.ref("v1").get("a") == b"dev"
    await repo.delete_tag("v1")
    assert await repo.list_tags() == []

    # conflict, then source-wins
    await main.commit("d")
    await main.put("c", b"main side")
    await main.commit("main c")
    await dev.put("c", b"dev side")
    await dev.commit("dev c")
    with pytest.raises(MergeConflictError):
        await repo.merge("dev", into="main")
    await repo.merge("dev", into="main", strategy="source-wins")
    assert await main.get("c") == b"dev side"

    # revert the merge, reset staged writes, delete a branch
    await repo.revert("main", branch="main")
    assert await repo.ref("main").get("c") == b"main side"
    await main.put("tmp", b"x")
    await main.reset()
    assert not await main.exists("tmp") and await main.diff_uncommitted() == []
    await repo.delete_branch("dev")
    assert await repo.list_branches() == ["main"]


async def test_merge_and_revert_report_what_they_did(target: Target) -> None:
    """A merge's and a revert's result is the operation's own (the three commits of the
    three-way merge, the commit written), the same on every transport -- not a guess
    from the branch's head before and after."""
    repo = await target.repo()
    main = repo.branch("main")
    await main.put("a", b"1")
    base = await main.commit("base")
    base_id = await _head_id(repo, "main")
    dev = await repo.create_branch("dev", source="main")
    await dev.put("a", b"2")
    dev_c = await dev.commit("dev work")
    dev_id = await _head_id(repo, "dev")
    merged = await repo.merge("dev", into="main", message="merge dev")
    assert merged.merged and merged.commit is not None
    assert merged.commit.message == "merge dev" and merged.commit.parents == (base_id, dev_id)
    assert (merged.source, merged.destination, merged.merge_base) == (dev_id, base_id, base_id)
    assert merged.commit_id == await _head_id(repo, "main")
    again = await repo.merge("dev", into="main")
    assert not again.merged and again.commit is None and again.commit_id == merged.commit_id
    reverted = await repo.revert(dev_id, branch="main", message="undo dev")
    assert reverted.merged and reverted.commit is not None
    assert reverted.commit.message == "undo dev"
    assert reverted.commit.parents == (merged.commit_id,)
    # revert: source is the reverted commit's parent, merge_base the reverted commit
    assert (reverted.source, reverted.destination, reverted.merge_base) == (
        base_id, merged.commit_id, dev_id,
    )  # fmt: skip
    assert await main.get("a") == b"1"
    assert base.message == "base" and dev_c.message == "dev work"


async def _head_id(repo: Any, branch: str) -> str:
    return (await repo.branch(branch).head()).base


async def test_revert_racing_a_writer_reports_its_own_commit(target: Target) -> None:
    """Commits by another writer landing while a revert runs never become the revert's
    result."""
    repo = await target.repo()
    main = repo.branch("main")
    commits = []
    for i in range(6):
        await main.put(f"k{i}", b"v")
        await main.commit(f"c{i}")
        commits.append(await _head_id(repo, "main"))

    async def writer() -> None:
        for i in range(8):
            await main.put(f"w{i}", b"w")
            await main.commit(f"writer {i}")

    async def reverts() -> list[Any]:
        return [
            await repo.revert(c, branch="main", message=f"revert {n}")
            for n, c in enumerate(commits)
        ]

    _, results = await asyncio.gather(writer(), reverts())
    for n, r in enumerate(results):
        assert r.merged and r.commit is not None and r.commit.message == f"revert {n}"
        assert (await repo.ref(r.commit_id).commit()).message == f"revert {n}"
        assert r.merge_base == commits[n]
    assert [await main.exists(f"k{i}") for i in range(6)] == [False] * 6


async def test_objects(target: Target) -> None:
    repo = await target.repo()
    main = repo.branch()
    data = bytes(range(256)) * 100
    st = await main.upload("tables/t/part-0", data, content_type="text/csv",
                           metadata={"owner": "etl"})  # fmt: skip
    assert st.size == len(data) and st.content_type == "text/csv"
    assert st.metadata == {"owner": "etl"}
    got = await main.stat_object("tables/t/part-0")
    assert (got.checksum, got.size, got.physical_address) == (
        st.checksum, st.size, st.physical_address,
    )  # fmt: skip
    async with await main.open("tables/t/part-0") as reader:
        assert reader.size == len(data)
        assert await reader.read(1000, 24) == data[1000:1024]
        assert await reader.read() == data
        assert b"".join([c async for c in reader]) == data
    with pytest.raises(ObjectExistsError):
        await main.upload("tables/t/part-0", b"x", if_absent=True)

    await main.upload("tables/u/part-0", b"u")
    await main.upload("top", b"t")
    listed = [
        (s.path, s.path_type) async for s in main.list_objects(prefix="tables/", delimiter="/")
    ]
    assert listed == [("tables/t/", "common_prefix"), ("tables/u/", "common_prefix")]
    assert [s.path async for s in main.list_objects(amount=2)] == [
        "tables/t/part-0",
        "tables/u/part-0",
    ]

    copy = await main.copy_object("tables/t/part-0", "copies/p0")
    assert copy.physical_address == st.physical_address
    await main.link_many([ObjectLink("linked/p0", st.physical_address, st.size, st.checksum)])
    async with await main.open("linked/p0") as reader:
        assert await reader.read(0, 10) == data[:10]
    await main.commit("objects")
    await main.delete_object("copies/p0")
    with pytest.raises(ObjectNotFoundError):
        await main.delete_object("copies/p0")
    await main.delete_objects(["tables/u/part-0", "never-there"])
    assert [s.path async for s in main.list_objects()] == ["linked/p0", "tables/t/part-0", "top"]
    old = repo.ref("main")
    assert (await old.stat_object("top")).size == 1
    with pytest.raises(ObjectNotFoundError):
        await old.stat_object("copies/p0")


async def test_link_tuples(target: Target) -> None:
    """link_many takes tuples of ObjectLink's fields in order (4 to 7 of them) beside
    ObjectLinks, with the same entries; every malformed tuple is the same typed error
    on every transport, and fails its call before anything is staged."""
    repo = await target.repo()
    main = repo.branch()
    st = await main.upload("seed", b"seed")
    base = st.physical_address.rsplit("/data/", 1)[0]
    many = [(f"t/{i:04d}", f"{base}/data/t{i}", i, f"etag{i}") for i in range(300)]
    await main.link_many(many)
    await main.link_many(
        [
            ("o/4", f"{base}/data/o4", 4, '"quoted"'),
            ("o/5", f"{base}/data/o5", 5, "e5", "text/csv"),
            ("o/6", f"{base}/data/o6", 6, "e6", None, {"k": "v"}),
            ("o/7", f"{base}/data/o7", 7, "e7", "text/plain", None, 1_700_000_000),
            ObjectLink("o/link", f"{base}/data/ol", 8, "e8"),
        ]
    )
    got = await main.stat_object("t/0123")
    assert (got.physical_address, got.size, got.checksum) == (f"{base}/data/t123", 123, "etag123")
    assert [s.path async for s in main.list_objects(prefix="t/")] == [p for p, *_ in many]
    o4, o5, o6, o7 = [await main.stat_object(f"o/{i}") for i in (4, 5, 6, 7)]
    assert (o4.checksum, o4.content_type) == ("quoted", "application/octet-stream")
    assert (o5.size, o5.content_type, o5.metadata) == (5, "text/csv", {})
    assert (o6.metadata, o6.content_type) == ({"k": "v"}, "application/octet-stream")
    assert (o7.mtime, o7.content_type) == (1_700_000_000, "text/plain")
    assert (await main.stat_object("o/link")).physical_address == f"{base}/data/ol"

    ok = ("bad/ok", f"{base}/data/ok", 1, "e")
    malformed: list[Any] = [
        ("bad/x", f"{base}/data/x", 1),  # too short
        ("bad/x", f"{base}/data/x", 1, "e", None, None, None, "extra"),  # too long
        (),
        ["bad/x", f"{base}/data/x", 1, "e"],  # a list, not a tuple
        "bad/x",
        None,
        (5, f"{base}/data/x", 1, "e"),  # path not a str
        ("", f"{base}/data/x", 1, "e"),
        ("bad/x", 5, 1, "e"),  # address not a str
        ("bad/x", "", 1, "e"),
        ("bad/x", f"{base}/data/x", "1", "e"),  # size not an int
        ("bad/x", f"{base}/data/x", 1.0, "e"),
        ("bad/x", f"{base}/data/x", True, "e"),
        ("bad/x", f"{base}/data/x", -1, "e"),
        ("bad/x", f"{base}/data/x", 1, 5),  # checksum not a str
        ("bad/x", f"{base}/data/x", 1, ""),
        ("bad/x", f"{base}/data/x", 1, "a\nb"),
        ("bad/x", f"{base}/data/x", 1, "e", 5),  # content type not a str
        ("bad/x", f"{base}/data/x", 1, "e", None, "k=v"),  # metadata not a mapping
        ("bad/x", f"{base}/data/x", 1, "e", None, {"k": 5}),
        ("bad/x", f"{base}/data/x", 1, "e", None, None, "1"),  # mtime not an int
        ("bad/x", f"{base}/data/x", 1, "e", None, None, -1),
        ("bad/x", f"{base}/data/x\n{base}/data/y", 1, "e"),
        ("bad/x", f"{base}/data/../x", 1, "e"),
    ]
    for bad in malformed:
        with pytest.raises(InvalidInputError):
            await main.link_many([ok, bad])
        with pytest.raises(InvalidInputError):
            await main.link_many([bad, ("bad/y", f"{base}/data/y", 2, "e")])
    with pytest.raises(ObjectNotFoundError):
        await main.stat_object("bad/ok")
    assert not [s async for s in main.list_objects(prefix="bad/")]


async def test_same_typed_errors(target: Target) -> None:
    with pytest.raises(RepositoryNotFoundError):
        await target.store.get_repository("nosuchrepo")
    repo = await target.repo()
    with pytest.raises(RefExistsError):
        await target.store.create_repository(
            repo.name, storage_namespace=target.namespace(repo.name)
        )
    with pytest.raises(lsmstore.NamespaceInUseError):
        await target.store.create_repository(
            repo.name + "-in", storage_namespace=target.namespace(repo.name)
        )
    main = repo.branch()
    with pytest.raises(NotFoundError):
        await main.get("missing")
    with pytest.raises(ObjectNotFoundError):
        await main.stat_object("missing")
    with pytest.raises(InvalidInputError):
        await main.put("", b"empty key")
    with pytest.raises(RefNotFoundError):
        await repo.ref("nosuchbranch").get("k")
    with pytest.raises(RefNotFoundError):
        await repo.create_branch("x", source="nosuchbranch")
    with pytest.raises(InvalidInputError):
        repo.branch("bad name")


async def test_workspaces(target: Target) -> None:
    """stash / pop / workspaces / drop: staged changes move as file ids, pop lands on
    top of another branch's staged writes, the same typed errors everywhere."""
    repo = await target.repo()
    main = repo.branch("main")
    await main.put_many([("a", b"base-a"), ("b", b"base-b")])
    await main.commit("base")
    await main.put("a", b"wip-a")
    await main.put("c", b"wip-c")
    await main.delete("b")
    before = await main.head()

    w = await main.stash("wip")
    assert (w.name, w.branch, w.base) == ("wip", "main", before.base)
    assert w.l1 or w.l2
    after = await main.head()
    assert after.base == w.base and not after.l1 and not after.l2
    assert await main.get("a") == b"base-a" and await main.get("b") == b"base-b"
    assert not await main.exists("c")
    assert [x.name for x in await repo.workspaces()] == ["wip"]
    got = await repo.get_workspace("wip")
    assert (got.name, got.branch, got.l1, got.l2) == ("wip", "main", w.l1, w.l2)

    with pytest.raises(NothingToCommitError):
        await main.stash("empty")
    await main.put("x", b"1")
    with pytest.raises(WorkspaceExistsError):
        await main.stash("wip")
    assert await main.exists("x")  # a refused stash changed nothing
    for bad in ("bad name", ""):
        with pytest.raises(InvalidNameError):
            await main.stash(bad)
        with pytest.raises(InvalidNameError):
            await repo.get_workspace(bad)

    dev = await repo.create_branch("dev", source="main")
    await dev.put("a", b"dev-a")
    await dev.put("d", b"dev-d")
    head = await dev.pop("wip")
    assert head.base == w.base and head.l1
    assert await dev.get("a") == b"wip-a"  # the workspace's write is newer
    assert await dev.get("d") == b"dev-d" and await dev.get("c") == b"wip-c"
    assert not await dev.exists("b")
    assert await repo.workspaces() == []
    with pytest.raises(WorkspaceNotFoundError):
        await dev.pop("wip")
    with pytest.raises(WorkspaceNotFoundError):
        await repo.get_workspace("wip")
    await dev.commit("popped work")
    assert await repo.ref("dev").get("c") == b"wip-c"

    names = []
    for n in range(3):
        await main.put(f"s{n}", b"s")
        names.append((await main.stash(f"s{n}")).name)
    assert [x.name for x in await repo.workspaces()] == names
    assert [x.name for x in await repo.workspaces(after="s0", limit=1)] == ["s1"]
    for name in names:
        await repo.drop_workspace(name)
    assert await repo.workspaces() == []
    with pytest.raises(WorkspaceNotFoundError):
        await repo.drop_workspace("s0")
    assert not await main.exists("x")  # stashed with s0, dropped with it


async def test_committer_metadata_and_squash_merge(target: Target) -> None:
    """What a commit, merge or revert records (committer, message, metadata) is what the
    caller gave, on every transport; a squash merge has one parent and is not redone."""
    repo = await target.repo()
    main = repo.branch("main")
    await main.put("a", b"1")
    c = await main.commit("by alice", committer="alice", metadata={"k": "v"})
    assert (c.committer, c.message, c.metadata) == ("alice", "by alice", {"k": "v"})
    assert (await repo.ref("main").commit()).committer == "alice"
    assert (await main.commit("empty", allow_empty=True)).message == "empty"

    dev = await repo.create_branch("dev", source="main")
    for k in ("b", "c"):
        await dev.put(k, k.encode())
        await dev.commit(f"dev {k}")
    head = (await main.head()).base
    r = await repo.merge(
        "dev", into="main", message="squashed", committer="bob", metadata={"pr": "7"},
        squash=True,
    )  # fmt: skip
    assert r.merged and r.commit is not None
    assert (r.commit.parents, r.commit.committer, r.commit.message, r.commit.metadata) == (
        (head,), "bob", "squashed", {"pr": "7"},
    )  # fmt: skip
    assert await main.get("c") == b"c"
    messages = [e.message async for e in repo.log("main", first_parent=False)]
    assert "dev b" not in messages and "dev c" not in messages
    assert not (await repo.merge("dev", into="main", squash=True)).merged

    rv = await repo.revert(
        "main", branch="main", message="undo", committer="carol", metadata={"why": "t"}
    )
    assert rv.merged and rv.commit is not None
    assert (rv.commit.committer, rv.commit.message, rv.commit.metadata) == (
        "carol", "undo", {"why": "t"},
    )  # fmt: skip
    assert not await main.exists("c")
    m = await repo.merge("dev", into="main", committer="dora")  # a plain merge: two parents
    assert m.commit is not None and m.commit.committer == "dora" and len(m.commit.parents) == 2
    with pytest.raises(InvalidInputError):
        await main.commit("x", committer="", allow_empty=True)
    with pytest.raises(InvalidInputError):
        await repo.merge("dev", into="main", squash="yes")


def _sha(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


async def test_raw_values(target: Target) -> None:
    """put/get/stat/list/delete of raw values: bytes keys, given identities, the
    default identity (SHA-256 of the value), staged until committed."""
    repo = await target.repo()
    main = repo.branch()
    await main.put("a/1", b"one")
    await main.put(b"\xff\x00bin", b"binary", identity=b"my-id")
    await main.put_many([("a/2", b"two"), (b"a/3", b"three", b"id3"), ("empty", b"")])
    assert await main.stat("a/1") == Stat(b"a/1", 3, _sha(b"one"), True)
    assert await main.stat(b"\xff\x00bin") == Stat(b"\xff\x00bin", 6, b"my-id", True)
    assert await main.lookup("a/3") == (b"three", Stat(b"a/3", 5, b"id3", True))
    assert await main.get("empty") == b"" and await main.exists("empty")
    assert [e async for e in main.list()] == [
        Entry(b"a/1", 3, _sha(b"one")), Entry(b"a/2", 3, _sha(b"two")), Entry(b"a/3", 5, b"id3"),
        Entry(b"empty", 0, _sha(b"")), Entry(b"\xff\x00bin", 6, b"my-id"),
    ]  # fmt: skip
    assert [e.key async for e in main.list(prefix=b"a/", after="a/1", limit=1)] == [b"a/2"]
    assert [(e.key, e.common_prefix) async for e in main.list(delimiter="/")] == [
        (b"a/", True), (b"empty", False), (b"\xff\x00bin", False),
    ]  # fmt: skip
    assert [e.key async for e in main.list(after="a/")] == [
        b"a/1", b"a/2", b"a/3", b"empty", b"\xff\x00bin",
    ]  # fmt: skip
    await main.delete(b"\xff\x00bin")
    await main.delete_many(["a/2", "never-there"])
    assert not await main.exists(b"\xff\x00bin") and not await main.exists("a/2")
    with pytest.raises(NotFoundError):
        await main.get("a/2")
    with pytest.raises(NotFoundError):
        await main.stat(b"\xff\x00bin")
    await main.commit("raw")
    assert await main.stat("a/1") == Stat(b"a/1", 3, _sha(b"one"), False)
    assert [e.key async for e in repo.ref("main").list()] == [b"a/1", b"a/3", b"empty"]
    assert await repo.ref("main").get("a/3") == b"three"


async def test_raw_errors(target: Target) -> None:
    """Bad keys, values and identities fail the caller with the embedded error types,
    and one bad item of put_many stages none."""
    repo = await target.repo()
    main = repo.branch()
    for bad_key in ("", b"", "x" * 1025, 7, None, "lone\udcff"):
        for call in (
            lambda k: main.put(k, b"v"), main.get, main.stat, main.exists, main.delete,
            lambda k: main.put_many([("ok", b"v"), (k, b"v")]),
            lambda k: main.delete_many(["ok", k]),
        ):  # fmt: skip
            with pytest.raises(InvalidKeyError):
                await call(bad_key)
    with pytest.raises(EntryTooLargeError):
        await main.put("big", b"\0" * (16 * 2**20 + 1))
    for bad_value in ("text", 7, None):
        with pytest.raises(InvalidInputError):
            await main.put("k", bad_value)  # type: ignore[arg-type]
    for bad_identity in (b"", b"i" * 256, "text"):
        with pytest.raises(InvalidInputError):
            await main.put("k", b"v", identity=bad_identity)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await main.put_many([("ok", b"v", b"")])
    with pytest.raises(InvalidInputError):
        _ = [e async for e in main.list(limit=-1)]
    head = await main.head()
    assert not head.l1 and not head.l2 and not await main.exists("ok")
    assert [e async for e in main.list()] == []
    with pytest.raises(RefNotFoundError):
        await repo.ref("nosuchbranch").exists("k")
    with pytest.raises(RefNotFoundError):
        _ = [e async for e in repo.ref("nosuchbranch").list()]


async def test_raw_values_and_objects_mix(target: Target) -> None:
    """An object's record read raw is its entry; a raw value read as an object is an
    inline object (contents = the value, checksum = hex identity, no address)."""
    repo = await target.repo()
    main = repo.branch()
    await main.put("raw", b"\xff raw")
    await main.upload("obj", b"object data")
    value, st = await main.lookup("obj")
    assert st.size == len(value) > 0 and await main.get("obj") == value
    inline = await main.stat_object("raw")
    assert (inline.size, inline.checksum, inline.physical_address, inline.mtime) == (
        5, _sha(b"\xff raw").hex(), "", 0,
    )  # fmt: skip
    async with await main.open("raw") as reader:
        assert await reader.read() == b"\xff raw" and await reader.read(1, 2) == b" r"
    assert [s.path async for s in main.list_objects()] == ["obj", "raw"]
    assert [e.key async for e in main.list()] == [b"obj", b"raw"]
    await main.put("obj", b"now raw")  # a raw overwrite of an object
    assert (await main.stat_object("obj")).physical_address == ""
    assert await main.get("obj") == b"now raw"
    await main.delete_object("raw")
    assert not await main.exists("raw")
    with pytest.raises(ObjectNotFoundError):
        await main.stat_object("raw")


async def test_raw_values_cross_between_embedded_and_server(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedded client sharing the server's RefStore and namespace, and a remote
    client: each reads the raw values the other wrote, byte for byte."""
    server = request.getfixturevalue("lsm_server")
    monkeypatch.setenv("LSMSTORE_HOME", str(server.home))  # local:// namespaces too
    key_id, secret = server.admin
    name = f"x{uuid.uuid4().hex[:10]}"
    async with (
        lsmstore.connect(server.url, access_key_id=key_id, secret_access_key=secret) as remote,
        lsmstore.connect(home=str(server.home), batch_interval_ms=1) as embedded,
    ):
        await remote.create_repository(name, storage_namespace=f"local://{name}")
        near = (await embedded.get_repository(name)).branch()
        far = (await remote.get_repository(name)).branch()
        await near.put(b"\xfe embedded", b"from embedded", identity=b"id-e")
        await far.put(b"\xfe remote", b"from remote")
        assert await far.lookup(b"\xfe embedded") == await near.lookup(b"\xfe embedded")
        assert await near.lookup(b"\xfe remote") == (
            b"from remote", Stat(b"\xfe remote", 11, _sha(b"from remote"), True),
        )  # fmt: skip
        assert [e async for e in far.list()] == [e async for e in near.list()]
        await far.delete(b"\xfe embedded")
        assert not await near.exists(b"\xfe embedded")


async def test_merges_racing_a_writer_report_their_own_commit(target: Target) -> None:
    """Merges into a branch another writer keeps committing to: each result names the
    merge commit it wrote, whose first parent is the base it merged onto."""
    repo = await target.repo()
    main = repo.branch("main")
    await main.put("base", b"b")
    await main.commit("base")
    sources = []
    for i in range(4):
        side = await repo.create_branch(f"side{i}", source="main")
        await side.put(f"s{i}", b"s")
        await side.commit(f"side {i}")
        sources.append(await _head_id(repo, f"side{i}"))

    async def writer() -> None:
        for i in range(8):
            await main.put(f"w{i}", b"w")
            await main.commit(f"writer {i}")

    async def merges() -> list[Any]:
        return [await repo.merge(f"side{i}", into="main", message=f"merge {i}")
                for i in range(4)]  # fmt: skip

    _, results = await asyncio.gather(writer(), merges())
    for i, r in enumerate(results):
        assert r.merged and r.commit is not None and r.commit.message == f"merge {i}"
        assert r.commit.parents == (r.destination, sources[i]) and r.source == sources[i]
        assert (await repo.ref(r.commit_id).commit()).message == f"merge {i}"
    assert all([await main.exists(f"s{i}") for i in range(4)])
