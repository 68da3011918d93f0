"""Bad input at the public API: every class of defect the fuzzing pass found, one test
each (settings, empty names, wrong types and shapes, URLs and local paths, cleanup),
plus the rough edges: invalid keys, merge-conflict messages, revert results.

Every rejection must be an LsmError (docs/client.md), raised before anything is
staged; the fuzz suite (tests/test_fuzz_api.py) covers the same surface at random."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import lsmstore
from lsmstore.config import Config, load_config
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.refstore.url import open_refstore
from lsmstore.storage.url import open_object_store


@pytest.fixture
async def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[lsmstore.Store]:
    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path / "home"))
    async with lsmstore.connect(batch_interval_ms=2) as s:
        yield s


@pytest.fixture
async def repo(store: lsmstore.Store, tmp_path: Path) -> lsmstore.Repository:
    r = await store.create_repository("repo", storage_namespace=(tmp_path / "ns").as_uri())
    await r.create_branch("dev")
    return r


# --- class 2: non-finite or absurd settings ------------------------------------------

_FLOATS = [f.name for f in dataclasses.fields(Config) if f.type == "float"]
_INTS = [f.name for f in dataclasses.fields(Config) if f.type == "int"]


@pytest.mark.parametrize("name", _FLOATS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "nan", "inf", "1e400", 1e300])
def test_float_settings_must_be_finite_and_sane(tmp_path: Path, name: str, bad: object) -> None:
    with pytest.raises(lsmstore.InvalidInputError, match=name):
        load_config(environ={"LSMSTORE_HOME": str(tmp_path)}, **{name: bad})


@pytest.mark.parametrize("name", _INTS)
@pytest.mark.parametrize("bad", [1.5, True, 10**30, "1e3"])
def test_int_settings_take_ints_in_range(tmp_path: Path, name: str, bad: object) -> None:
    with pytest.raises(lsmstore.InvalidInputError, match=name):
        load_config(environ={"LSMSTORE_HOME": str(tmp_path)}, **{name: bad})


@pytest.mark.parametrize(
    "name", ["stall_timeout_s", "compaction_interval_s", "commit_poll_interval_s"]
)
def test_zero_where_a_positive_value_is_needed(tmp_path: Path, name: str) -> None:
    with pytest.raises(lsmstore.InvalidInputError, match=name):
        load_config(environ={"LSMSTORE_HOME": str(tmp_path)}, **{name: 0})


def test_a_config_cannot_be_built_invalid(tmp_path: Path) -> None:
    """Config(...) validates like load_config: a writer never sees a NaN interval."""
    with pytest.raises(lsmstore.InvalidInputError, match="batch_interval_ms"):
        Config(home=tmp_path, batch_interval_ms=math.nan)
    with pytest.raises(lsmstore.InvalidInputError, match="batch_interval_ms"):
        Config(home=tmp_path).replace(batch_interval_ms=math.inf)


async def test_nan_batch_interval_is_refused_not_hung(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path))
    with pytest.raises(lsmstore.InvalidInputError, match="batch_interval_ms"):
        lsmstore.connect(batch_interval_ms=math.nan)
    monkeypatch.setenv("LSMSTORE_BATCH_INTERVAL_MS", "NaN")
    with pytest.raises(lsmstore.InvalidInputError, match="batch_interval_ms"):
        lsmstore.connect()


# --- class 3: empty string is not "not given" ----------------------------------------


async def test_empty_branch_name_is_invalid_not_the_default(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    before = await main.head()
    with pytest.raises(lsmstore.InvalidNameError):
        await repo.branch("").put("k", b"meant for another branch")
    assert await main.head() == before and not await main.exists("k")
    for call in (
        lambda: repo.merge("dev", into=""),
        lambda: repo.revert("main", branch=""),
        lambda: repo.create_branch("x", source=""),
        lambda: repo.diff_uncommitted(""),
    ):
        with pytest.raises(lsmstore.InvalidInputError):
            await call()
    with pytest.raises(lsmstore.InvalidInputError):
        [e async for e in repo.log("")]
    assert await main.head() == before
    assert "x" not in await repo.list_branches()


async def test_empty_committer_is_invalid_not_replaced(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    before = await main.head()
    with pytest.raises(lsmstore.InvalidInputError, match="committer"):
        await main.commit("m", committer="", allow_empty=True)
    await repo.branch("dev").put("k", b"v")
    await repo.branch("dev").commit("on dev")
    with pytest.raises(lsmstore.InvalidInputError, match="committer"):
        await repo.merge("dev", committer="")
    assert await main.head() == before
    c = await main.commit("m", committer="ada", allow_empty=True)
    assert c.committer == "ada"


def test_empty_settings_are_invalid_where_given(tmp_path: Path) -> None:
    env = {"LSMSTORE_HOME": str(tmp_path)}
    for name in ("home", "refstore"):
        with pytest.raises(lsmstore.InvalidInputError, match=name):
            load_config(environ=env, **{name: ""})
    with pytest.raises(lsmstore.InvalidInputError, match="refstore"):
        lsmstore.connect("")


# --- class 4: wrong types and shapes -------------------------------------------------


@pytest.mark.parametrize(
    "items",
    [
        [("k",)],
        [1],
        [("k", b"v", b"i", b"x")],
        None,
        "ab",
        b"ab",
        {"k": b"v"},
        [("k", b"v"), None],
    ],
)
async def test_malformed_put_many_items(repo: lsmstore.Repository, items: Any) -> None:
    main = repo.branch()
    before = await main.head()
    with pytest.raises(lsmstore.InvalidInputError):
        await main.put_many(items)
    assert await main.head() == before and not await main.exists("k")


async def test_wrong_types_raise_typed_errors(
    store: lsmstore.Store, repo: lsmstore.Repository
) -> None:
    main = repo.branch()
    before = await main.head()
    calls: list[Any] = [
        lambda: main.delete_many(None),
        lambda: main.delete_many("abc"),  # would delete keys "a", "b", "c"
        lambda: main.commit("m", metadata=[("a", "b")], allow_empty=True),
        lambda: main.commit("m", metadata={1: "x"}, allow_empty=True),
        lambda: main.commit("m", metadata={"": "x"}, allow_empty=True),
        lambda: main.commit(b"m", allow_empty=True),
        lambda: main.commit("m", allow_empty="yes"),
        lambda: repo.merge("dev", message=5),
        lambda: repo.merge("dev", metadata="k=v"),
        lambda: repo.revert("main", parent="1"),
        lambda: repo.revert("main", parent=True),
        lambda: store.create_repository("xyz", storage_namespace=5),
        lambda: store.create_repository("xyz", storage_namespace=b"file:///tmp/x"),
        lambda: store.list_repositories(after=b"a"),
        lambda: repo.list_branches(after=5),
        lambda: repo.list_tags(prefix=None),
        lambda: repo.list_branches(prefix="\udc80"),
        lambda: repo.list_branches(after="\udc80"),
        lambda: store.list_repositories(after="\udc80"),
        lambda: main.stage_sst(3.5),
    ]
    for call in calls:
        with pytest.raises(lsmstore.InvalidInputError):
            await call()
    for gen in (
        lambda: repo.log(first_parent="no"),
        lambda: repo.log(after=5),
        lambda: repo.log(limit=1.5),
        lambda: main.list(after=5),
        lambda: main.list(limit=True),
    ):
        with pytest.raises(lsmstore.InvalidInputError):
            [e async for e in gen()]
    assert await main.head() == before


# --- class 5: invalid characters in URLs and paths, unusable local paths, cleanup -----


@pytest.mark.parametrize(
    "url",
    [
        "file:///tmp/a\0b",
        "file:///tmp/a%00b",
        "file:///tmp/a\nb",
        "s3://[bucket/p",
        "s3://b:99999999999/p",
        "mem://a\0b",
        " file:///tmp/x",
        "",
    ],
)
def test_bad_storage_namespace_urls(url: str) -> None:
    with pytest.raises(lsmstore.InvalidURLError):
        open_object_store(url)


@pytest.mark.parametrize(
    "url",
    ["local:///tmp/a%00b", "local:///tmp/\0x", "redis://[::1/0", "redis://h:99999999/0", ""],
)
def test_bad_refstore_urls(url: str) -> None:
    with pytest.raises(lsmstore.InvalidURLError):
        open_refstore(url)


async def test_namespace_with_nul_is_refused(store: lsmstore.Store, tmp_path: Path) -> None:
    with pytest.raises(lsmstore.InvalidURLError):
        await store.create_repository("rep", storage_namespace=f"file://{tmp_path}/a\0b")
    with pytest.raises(lsmstore.RepositoryNotFoundError):
        await store.get_repository("rep")


async def test_unusable_local_paths_are_typed(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"not a directory")
    async with lsmstore.connect(f"local://{blocker}/refs", home=str(tmp_path)) as s:
        with pytest.raises(lsmstore.UnavailableError, match="refs"):
            await s.list_repositories()
    async with lsmstore.connect(home=str(tmp_path / "home")) as s:
        with pytest.raises(lsmstore.UnavailableError, match=r"(?i)not a directory"):
            await s.create_repository("rep", storage_namespace=f"file://{blocker}/ns")


@pytest.mark.parametrize("content", [b"\xff\xfe = 1", b"x = [", b"batch_interval_ms = nan"])
def test_bad_config_files(tmp_path: Path, content: bytes) -> None:
    env = {"LSMSTORE_HOME": str(tmp_path)}
    f = tmp_path / "lsm.toml"
    f.write_bytes(content)
    with pytest.raises(lsmstore.InvalidInputError, match=r"batch_interval_ms|lsm\.toml"):
        load_config(config=f, environ=env)


@pytest.mark.parametrize("path", ["/tmp/a\0b", "/tmp/\ud800", 5, ""])
def test_bad_config_file_paths(tmp_path: Path, path: Any) -> None:
    with pytest.raises(lsmstore.InvalidInputError, match="config file"):
        load_config(config=path, environ={"LSMSTORE_HOME": str(tmp_path)})
    with pytest.raises(lsmstore.InvalidInputError, match="config file"):
        load_config(config=tmp_path, environ={})  # a directory


async def test_an_unusable_cache_directory_costs_only_the_disk_tier(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"not a directory")
    async with lsmstore.connect(home=str(tmp_path), cache_dir=str(blocker / "cache")) as s:
        repo = await s.create_repository("rep", storage_namespace=(tmp_path / "ns").as_uri())
        await repo.branch().put("k", b"v")
        c = await repo.branch().commit("c")
        assert await repo.ref(c.id).get("k") == b"v"


async def test_object_calls_with_wrong_shapes_and_paths(repo: lsmstore.Repository) -> None:
    main = repo.branch()
    before = await main.head()
    for call in (
        lambda: main.link_many(None),  # type: ignore[arg-type]
        lambda: main.link_many("abc"),  # type: ignore[arg-type]
        lambda: main.delete_objects(None),  # type: ignore[arg-type]
        lambda: main.delete_objects("abc"),  # would delete objects "a", "b" and "c"
        lambda: main.upload("p", "/tmp/a\0b"),
        lambda: main.upload("p", ""),
    ):
        with pytest.raises(lsmstore.InvalidInputError):
            await call()
    assert await main.head() == before


async def test_stage_sst_path_with_nul(repo: lsmstore.Repository) -> None:
    with pytest.raises(lsmstore.InvalidInputError):
        await repo.branch().stage_sst("/tmp/a\0b")


class _CloseFails(EmbeddedRefStore):
    async def aclose(self) -> None:
        await super().aclose()
        raise lsmstore.UnavailableError("closing failed")


async def test_a_failing_close_does_not_hide_the_first_error(tmp_path: Path) -> None:
    config = load_config(environ={"LSMSTORE_HOME": str(tmp_path)})
    s = lsmstore.Store(config, refstore=_CloseFails(tmp_path / "refs"))
    with pytest.raises(lsmstore.RepositoryNotFoundError) as info:
        async with s:
            await s.get_repository("absent")
    assert "closing failed" in " ".join(getattr(info.value, "__notes__", []))
    assert s.closed
    # Closing on its own reports the failure, typed, after closing everything else.
    s2 = lsmstore.Store(config, refstore=_CloseFails(tmp_path / "refs2"))
    await s2.list_repositories()
    with pytest.raises(lsmstore.UnavailableError, match="closing failed"):
        await s2.aclose()
    assert s2.closed


# --- rough edges ---------------------------------------------------------------------


async def test_invalid_keys_raise_invalid_key_error_with_a_bounded_message(
    repo: lsmstore.Repository,
) -> None:
    main = repo.branch()
    long_key = "k" * 100_000
    for call in (
        lambda: main.get(long_key),
        lambda: main.exists(long_key),
        lambda: main.stat(long_key),
        lambda: main.put(long_key, b"v"),
        lambda: main.delete(long_key),
        lambda: repo.ref("main").get(long_key),
    ):
        with pytest.raises(lsmstore.InvalidKeyError) as info:
            await call()
        assert len(str(info.value)) < 300
    for key in ("", b""):
        with pytest.raises(lsmstore.InvalidKeyError, match="empty"):
            await main.put(key, b"v")
        with pytest.raises(lsmstore.InvalidKeyError, match="empty"):
            await main.get(key)
    with pytest.raises(lsmstore.NotFoundError) as nf:
        await main.get("absent" * 100)
    assert len(str(nf.value)) < 300


async def test_merge_conflict_names_refs_and_commits(repo: lsmstore.Repository) -> None:
    main, dev = repo.branch("main"), repo.branch("dev")
    await main.put("k", b"main")
    c_main = await main.commit("main side")
    await dev.put("k", b"dev")
    c_dev = await dev.commit("dev side")
    with pytest.raises(lsmstore.MergeConflictError) as info:
        await repo.merge("dev", into="main")
    text = str(info.value)
    assert "'dev'" in text and "'main'" in text
    assert c_dev.id[:12] in text and c_main.id[:12] in text
    for tree in (c_main.metarange_id, c_dev.metarange_id):
        assert tree[:12] not in text
    assert info.value.keys == [b"k"]


async def test_revert_result_is_what_the_docs_say(repo: lsmstore.Repository) -> None:
    """docs/versioning.md: a three-way merge with base the reverted commit, destination
    the branch's base and source the reverted commit's parent."""
    main = repo.branch()
    await main.put("a", b"1")
    first = await main.commit("one")
    await main.put("b", b"2")
    second = await main.commit("two")
    result = await repo.revert(second.id)
    assert result.merged and result.commit is not None
    assert result.merge_base == second.id
    assert result.source == first.id == second.parents[0]
    assert result.destination == second.id  # the branch's base before the revert
    assert result.commit.parents == (second.id,)
    assert not await main.exists("b") and await main.exists("a")
    # reverting an older commit: destination and merge base differ too
    await main.put("c", b"3")
    third = await main.commit("three")
    result = await repo.revert(first.id)
    assert (result.source, result.merge_base, result.destination) == (
        first.parents[0],
        first.id,
        third.id,
    )


# --- the same rules through the remote client (a real server process) -----------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from lsmstore.testing.server_process import start_server

    s = start_server(tmp_path_factory.mktemp("server"))
    yield s
    s.stop()


async def test_remote_client_checks_arguments_like_the_embedded_one(
    server: Any, tmp_path: Path
) -> None:
    key, secret = server.admin
    async with lsmstore.connect(
        server.url, home=str(tmp_path), access_key_id=key, secret_access_key=secret
    ) as store:
        repo = await store.create_repository("remote", storage_namespace="local://remote")
        await repo.create_branch("dev")
        main = repo.branch()
        before = await main.head()
        with pytest.raises(lsmstore.InvalidNameError):
            repo.branch("")
        calls: list[Any] = [
            lambda: main.put_many([("k",)]),
            lambda: main.put_many(None),
            lambda: main.put("k", b"v", identity=0.5),
            lambda: main.delete_many("abc"),
            lambda: main.link_many(None),
            lambda: main.delete_objects(None),
            lambda: main.commit("m", metadata=[("a", "b")], allow_empty=True),
            lambda: main.commit("m", committer="", allow_empty=True),
            lambda: main.stage_sst("/tmp/a\0b"),
            lambda: repo.merge("dev", into=""),
            lambda: repo.merge("dev", message=5),
            lambda: repo.revert("main", branch=""),
            lambda: repo.revert("main", parent="1"),
            lambda: repo.create_branch("x", source=""),
        ]
        for call in calls:
            with pytest.raises(lsmstore.InvalidInputError):
                await call()
        for gen in (
            lambda: main.list(delimiter=""),
            lambda: main.list(prefix="lone\udcff"),
            lambda: main.list(after=5),
            lambda: repo.log(""),
            lambda: repo.log(limit=[]),
            lambda: repo.diff(None, "main"),  # type: ignore[arg-type]
        ):
            with pytest.raises(lsmstore.InvalidInputError):
                [e async for e in gen()]
        assert await main.head() == before


async def test_missing_key_message_is_text_and_names_the_ref(repo: lsmstore.Repository) -> None:
    with pytest.raises(lsmstore.NotFoundError) as caught:
        await repo.branch("main").get(b"missing")
    assert str(caught.value).strip('"') == f"key 'missing' not found in {repo.name}/main"
    with pytest.raises(lsmstore.NotFoundError) as caught:
        await repo.ref("main").get("gone/\u00e9")
    assert "b'" not in str(caught.value) and "'gone/\u00e9'" in str(caught.value)
