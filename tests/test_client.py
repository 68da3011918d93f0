"""The public API on the embedded default: repositories, branch reads and writes, refs,
bad input, prepared SSTs, life cycle."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import lsmstore
from lsmstore import errors
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_writer import write_sst
from lsmstore.refstore.base import Ref as RefValue


@pytest.fixture
async def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[lsmstore.Store]:
    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path / "home"))
    async with lsmstore.connect(batch_interval_ms=2) as s:
        yield s


async def new_repo(
    store: lsmstore.Store, tmp_path: Path, name: str = "repo"
) -> lsmstore.Repository:
    return await store.create_repository(name, storage_namespace=(tmp_path / name).as_uri())


async def test_quickstart(store: lsmstore.Store, tmp_path: Path) -> None:
    assert store.config.refstore_url == f"local://{tmp_path / 'home' / 'refs'}"
    repo = await new_repo(store, tmp_path)
    main = repo.branch("main")
    await main.put("a/b.parquet", b"one")
    await main.put(b"a/c", b"two")
    await main.put_many([("k1", b"v1"), ("k2", b"v2")])
    assert await main.get("a/b.parquet") == b"one"
    assert await main.get("a/c") == b"two"
    assert [e.path async for e in main.list(prefix="a/")] == ["a/b.parquet", "a/c"]
    await main.delete("a/b.parquet")
    with pytest.raises(lsmstore.NotFoundError):
        await main.get("a/b.parquet")
    with pytest.raises(KeyError):  # NotFoundError is a KeyError
        await main.get("never")
    assert not await main.exists("a/b.parquet") and await main.exists("k1")
    st = await main.stat("k2")
    assert (st.size, st.staged, st.path) == (2, True, "k2")
    assert [(e.path, e.common_prefix) async for e in main.list(delimiter="/")] == [
        ("a/", True),
        ("k1", False),
        ("k2", False),
    ]


async def test_put_many_is_one_file_and_identity(store: lsmstore.Store, tmp_path: Path) -> None:
    main = (await new_repo(store, tmp_path)).branch()
    before = len((await main.head()).l1)
    await main.put_many([(f"k{i}", b"v", b"id-%d" % i) for i in range(500)])
    assert len((await main.head()).l1) == before + 1
    assert (await main.stat("k7")).identity == b"id-7"
    await main.put("x", b"value", identity=b"mine")
    assert (await main.stat("x")).identity == b"mine"
    await main.put("y", b"value")
    import hashlib

    assert (await main.stat("y")).identity == hashlib.sha256(b"value").digest()


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("", b"v", lsmstore.InvalidKeyError),
        (b"", b"v", lsmstore.InvalidKeyError),
        ("k" * 1025, b"v", lsmstore.InvalidKeyError),
        ("lone\udcff", b"v", lsmstore.InvalidKeyError),
        ("k", b"x" * (16 * 2**20 + 1), lsmstore.EntryTooLargeError),
        ("k", "not bytes", lsmstore.InvalidInputError),
        (42, b"v", lsmstore.InvalidKeyError),
    ],
)
async def test_bad_input_stages_nothing(
    store: lsmstore.Store, tmp_path: Path, key: object, value: object, error: type[Exception]
) -> None:
    main = (await new_repo(store, tmp_path)).branch()
    head = await main.head()
    with pytest.raises(error):
        await main.put(key, value)  # type: ignore[arg-type]
    with pytest.raises(error):
        await main.put_many([("fine", b"v"), (key, value)])  # type: ignore[list-item]
    assert await main.head() == head
    assert not await main.exists("fine")
    assert issubclass(error, ValueError)


async def test_key_at_the_bound_and_binary_keys(store: lsmstore.Store, tmp_path: Path) -> None:
    main = (await new_repo(store, tmp_path)).branch()
    await main.put("k" * 1024, b"max")
    await main.put(b"\xff\x00bin", b"bin")
    assert await main.get("k" * 1024) == b"max"
    assert await main.get(b"\xff\x00bin") == b"bin"
    await main.put("\N{SNOWMAN}", b"s")
    assert await main.get("\N{SNOWMAN}".encode()) == b"s"


async def test_stage_sst(store: lsmstore.Store, tmp_path: Path) -> None:
    main = (await new_repo(store, tmp_path)).branch()
    await main.put("b", b"old")
    records = [Record(b"a", b"i", b"1"), Record(b"b", b"", None), Record(b"c", b"i", b"3")]
    path = tmp_path / "prepared.sst"
    path.write_bytes(write_sst(records))
    fid = await main.stage_sst(path)
    assert (await main.head()).l1[-1] == fid
    assert [e.path async for e in main.list()] == ["a", "c"]  # b deleted by the SST
    await main.stage_sst(write_sst([Record(b"d", b"i", b"4")]))
    assert await main.get("d") == b"4"
    head = await main.head()
    for bad in (
        path.read_bytes()[:-20],
        b"garbage" * 100,
        write_sst([Record(b"k" * 2000, b"", b"")]),
    ):
        with pytest.raises((lsmstore.CorruptFileError, lsmstore.EntryTooLargeError)):
            await main.stage_sst(bad)
    with pytest.raises(lsmstore.InvalidInputError, match="cannot read"):
        await main.stage_sst(tmp_path / "missing.sst")
    assert await main.head() == head


async def test_repositories(store: lsmstore.Store, tmp_path: Path) -> None:
    repo = await new_repo(store, tmp_path, "one")
    await new_repo(store, tmp_path, "two")
    assert [r.name for r in await store.list_repositories()] == ["one", "two"]
    assert (await store.get_repository("one")).storage_namespace == repo.storage_namespace
    with pytest.raises(lsmstore.RefExistsError):
        await new_repo(store, tmp_path, "one")
    with pytest.raises(lsmstore.InvalidNameError):
        await store.create_repository("Bad Name", storage_namespace="mem://x")
    with pytest.raises(lsmstore.InvalidNameError):
        await store.create_repository("okay", storage_namespace="mem://x", default_branch="a/b")
    with pytest.raises(lsmstore.InvalidURLError):
        await store.create_repository("okay", storage_namespace="ftp://nowhere")
    # the default branch starts on an initial empty commit
    head = await repo.branch().head()
    assert head.base and head.l1 == () and head.l2 == ()
    assert [e async for e in repo.ref(head.base).list()] == []
    await repo.branch().put("k", b"v")
    await store.delete_repository("one")
    with pytest.raises(lsmstore.RepositoryNotFoundError):
        await store.get_repository("one")
    assert [r.name for r in await store.list_repositories()] == ["two"]


async def test_refs_of_commits_tags_and_branches(store: lsmstore.Store, tmp_path: Path) -> None:
    repo = await new_repo(store, tmp_path)
    main = repo.branch("main")
    base = (await main.head()).base
    await repo.refstore.create_ref(repo.name, "v1", RefValue("tag", base))
    await main.put("k", b"v")
    live, commit, tag = repo.ref("main"), repo.ref(base), repo.ref("v1")
    assert await live.get("k") == b"v"
    assert not await commit.exists("k") and not await tag.exists("k")
    assert commit.commit_id == base and tag.commit_id == base and live.commit_id is None
    await main.put("k2", b"v2")
    assert [e.path async for e in live.list()] == ["k", "k2"]  # live: sees later writes
    with pytest.raises(lsmstore.RefNotFoundError):
        await repo.ref("nosuch").get("k")
    with pytest.raises(lsmstore.InvalidRefExpressionError):
        await repo.ref("main~~x").get("k")
    with pytest.raises(lsmstore.InvalidRefExpressionError):
        await repo.ref("a b").get("k")


async def test_live_refs_share_one_ref_fetch(
    store: lsmstore.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads through fresh ``Ref`` handles of a branch (one per request in the server)
    resolve the name with the same coalesced ref fetch that gives them their snapshot:
    no resolution of their own, and they see the acknowledged writes before them."""
    from lsmstore import refexpr

    repo = await new_repo(store, tmp_path)
    await repo.branch("main").put("k", b"v")
    resolved: list[str] = []
    real = refexpr.resolve

    async def counting(ctx: Any, text: str) -> refexpr.ResolvedRef:
        resolved.append(text)
        return await real(ctx, text)

    monkeypatch.setattr(refexpr, "resolve", counting)
    before = store.refs.fetches
    got = await asyncio.gather(*(repo.ref("main").get("k") for _ in range(20)))
    assert got == [b"v"] * 20
    assert store.refs.fetches - before == 1 and resolved == []
    ref = repo.ref("main")
    assert [e.path async for e in ref.list()] == ["k"] and resolved == []
    await repo.branch("main").put("k", b"w")
    assert await ref.get("k") == b"w"  # a later read of the same handle sees the write


async def test_closed_store_refuses_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path))
    store = lsmstore.connect(batch_interval_ms=50)
    repo = await new_repo(store, tmp_path)
    main = repo.branch()
    import asyncio

    pending = asyncio.create_task(main.put("k", b"v"))
    await asyncio.sleep(0)
    await store.aclose()
    await pending  # flushed by the close
    assert store.closed
    with pytest.raises(lsmstore.ClosedError):
        await main.put("k2", b"v")
    with pytest.raises(lsmstore.ClosedError):
        await store.list_repositories()
    await store.aclose()  # idempotent
    async with lsmstore.connect() as again:  # the data is there for the next process
        assert await (await again.get_repository("repo")).branch().get("k") == b"v"


def test_every_error_is_exported() -> None:
    for name, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, errors.LsmError):
            assert getattr(lsmstore, name) is cls, name
            assert name in lsmstore.__all__


def test_the_client_is_imported_on_first_use() -> None:
    """``import lsmstore`` (and a module of it, as a Spark worker unpickling the data
    source does) leaves the client unloaded; its names resolve on first use, every
    name in ``__all__`` does, and an unknown one is an AttributeError."""
    import subprocess
    import sys

    code = (
        "import sys, lsmstore, lsmstore.spark.tables\n"
        "assert 'lsmstore.client' not in sys.modules, 'client loaded'\n"
        "from lsmstore import Store, connect\n"
        "import lsmstore.client as c\n"
        "assert (Store, connect) == (c.Store, c.connect)\n"
        "assert all(getattr(lsmstore, n) is not None for n in lsmstore.__all__)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == b"ok", out.stderr.decode()[-2000:]
    with pytest.raises(AttributeError):
        lsmstore.no_such_name  # noqa: B018


def test_connect_reads_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'home = "{tmp_path}"\nbatch_interval_ms = 3\n')
    monkeypatch.setenv("LSMSTORE_CONFIG", str(cfg))
    monkeypatch.setenv("LSMSTORE_MAX_KEY_BYTES", "100")
    store = lsmstore.connect(batch_max_records=7)
    c = store.config
    assert (c.home, c.batch_interval_ms, c.max_key_bytes, c.batch_max_records) == (
        tmp_path,
        3,
        100,
        7,
    )
    with pytest.raises(lsmstore.InvalidInputError, match="unknown setting"):
        lsmstore.connect(batch_size=3)


async def test_stage_sst_refuses_a_file_that_decodes_past_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few kilobytes of zstd that decode to 8 MiB: past ``max_prepared_sst_bytes``
    it is refused (EntryTooLargeError) and nothing is staged."""
    from rocksdict import DBCompressionType

    from lsmstore.graveler import sst_writer

    def zstd() -> Any:
        options = sst_writer._staging_options()
        options.set_compression_type(DBCompressionType.zstd())
        return options

    zero = bytes(1 << 20)
    bomb = sst_writer._write_sst([Record(b"z%d" % i, b"i", zero) for i in range(8)], None, zstd)
    assert len(bomb) < 100_000
    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path / "home"))
    async with lsmstore.connect(batch_interval_ms=2, max_prepared_sst_bytes="4MiB") as store:
        main = (await new_repo(store, tmp_path)).branch()
        head = await main.head()
        with pytest.raises(lsmstore.EntryTooLargeError, match="decodes to more than"):
            await main.stage_sst(bomb)
        assert await main.head() == head
    async with lsmstore.connect(batch_interval_ms=2, max_prepared_sst_bytes="9MiB") as store:
        main = (await store.get_repository("repo")).branch()
        await main.stage_sst(bomb)  # within the bound: staged
        assert await main.get("z7") == zero
