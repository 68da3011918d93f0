"""Ref expressions: parsing (including malformed input) and resolution against a real
embedded RefStore and a local object store."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lsmstore import refexpr
from lsmstore.errors import (
    AmbiguousRefError,
    InvalidInputError,
    InvalidRefExpressionError,
    RefNotFoundError,
)
from lsmstore.graveler.commit import next_generation, write_commit
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.refexpr import Modifier, RefExpression, parse, resolve
from lsmstore.refstore.base import Ref, Repository
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.storage.local import LocalStore
from lsmstore.types import Commit
from lsmstore.versioning.context import RepoContext

REPO = "repo"

# --- parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "base", "mods"),
    [
        ("main", "main", ()),
        ("main~", "main", (("~", 1),)),
        ("main~3", "main", (("~", 3),)),
        ("main^", "main", (("^", 1),)),
        ("main^2", "main", (("^", 2),)),
        ("main~2^2", "main", (("~", 2), ("^", 2))),
        ("main^2~1", "main", (("^", 2), ("~", 1))),
        ("main~~", "main", (("~", 1), ("~", 1))),
        ("main~0^0", "main", (("~", 0), ("^", 0))),
        ("v1.0", "v1.0", ()),
        ("feature-x_y", "feature-x_y", ()),
        ("a" * 64 + "~1", "a" * 64, (("~", 1),)),
        ("abc123", "abc123", ()),
        ("main~9999999", "main", (("~", 9_999_999),)),
    ],
)
def test_parse_valid(text: str, base: str, mods: tuple[tuple[str, int], ...]) -> None:
    expr = parse(text)
    assert expr.base == base
    assert [(m.kind, m.n) for m in expr.modifiers] == list(mods)


def test_str_round_trips_in_canonical_form() -> None:
    assert str(parse("main~~^")) == "main~1~1^1"
    assert parse(str(parse("main~2^2"))) == RefExpression(
        "main", (Modifier("~", 2), Modifier("^", 2))
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "~1",
        "^2",
        "main~x",
        "main^-1",
        "main~1x",
        "main@",
        "main@{1}",
        "ma in",
        "main/x",
        "main..x",
        ".main",
        "-main",
        "main.",
        "main:1",
        "main*",
        "main[1]",
        "main\\x",
        "main~12345678",
        "main\x00",
        "ü" * 200,
    ],
)
def test_parse_malformed(text: str) -> None:
    with pytest.raises(InvalidRefExpressionError) as info:
        parse(text)
    assert repr(text)[:20] in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value", [None, 1, b"main", ["main"]])
def test_parse_rejects_non_strings(value: object) -> None:
    with pytest.raises(InvalidRefExpressionError):
        parse(value)  # type: ignore[arg-type]


# --- resolution ------------------------------------------------------------------------


class CountingRefStore(EmbeddedRefStore):
    calls = 0

    async def _get_ref(self, repo: str, name: str) -> Ref:
        self.calls += 1
        return await super()._get_ref(repo, name)


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[RepoContext]:
    rs = CountingRefStore(tmp_path / "refs")
    await rs.create_repository(Repository(REPO, f"file://{tmp_path}/data", "main"))
    objects = LocalStore(tmp_path / "data")
    yield RepoContext(REPO, rs, objects)
    await rs.aclose()
    await objects.aclose()


async def add_commit(ctx: RepoContext, parents: tuple[str, ...], message: str) -> str:
    ps = [await ctx.commit(p) for p in parents]
    commit = Commit(
        EMPTY_METARANGE_ID, parents, "test", message, 1_700_000_000, {}, next_generation(ps)
    )
    return await write_commit(ctx.objects, commit)


@pytest.fixture
async def graph(ctx: RepoContext) -> dict[str, str]:
    """root - a - b - m(merge of b and x) - c      (main at c; tag v1 at b)
    \\- x - y                            (dev at y)"""
    ids: dict[str, str] = {}
    ids["root"] = await add_commit(ctx, (), "root")
    ids["a"] = await add_commit(ctx, (ids["root"],), "a")
    ids["b"] = await add_commit(ctx, (ids["a"],), "b")
    ids["x"] = await add_commit(ctx, (ids["a"],), "x")
    ids["y"] = await add_commit(ctx, (ids["x"],), "y")
    ids["m"] = await add_commit(ctx, (ids["b"], ids["x"]), "m")
    ids["c"] = await add_commit(ctx, (ids["m"],), "c")
    await ctx.refstore.create_ref(REPO, "main", Ref("branch", ids["c"]))
    await ctx.refstore.create_ref(REPO, "dev", Ref("branch", ids["y"]))
    await ctx.refstore.create_ref(REPO, "v1", Ref("tag", ids["b"]))
    return ids


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("main", "c"),
        ("main~0", "c"),
        ("main~1", "m"),
        ("main~", "m"),
        ("main~2", "b"),
        ("main~3", "a"),
        ("main~4", "root"),
        ("main^", "m"),
        ("main^1", "m"),
        ("main~1^2", "x"),
        ("main~1^2~1", "a"),
        ("main~1^1~1", "a"),
        ("main~1^2^0", "x"),
        ("dev", "y"),
        ("dev~1", "x"),
        ("v1", "b"),
        ("v1~2", "root"),
    ],
)
async def test_resolve_names_and_modifiers(
    ctx: RepoContext, graph: dict[str, str], text: str, target: str
) -> None:
    r = await resolve(ctx, text)
    assert r.commit_id == graph[target]


async def test_resolved_kinds(ctx: RepoContext, graph: dict[str, str]) -> None:
    main = await resolve(ctx, "main")
    assert (main.kind, main.name, main.branch) == ("branch", "main", "main")
    assert main.ref == Ref("branch", graph["c"])
    moved = await resolve(ctx, "main~1")
    assert (moved.kind, moved.branch, moved.modified) == ("branch", None, True)
    tag = await resolve(ctx, "v1")
    assert (tag.kind, tag.name, tag.branch) == ("tag", "v1", None)
    full = await resolve(ctx, graph["y"])
    assert (full.kind, full.name, full.commit_id, full.ref) == (
        "commit",
        graph["y"],
        graph["y"],
        None,
    )


async def test_full_id_and_unique_prefix(ctx: RepoContext, graph: dict[str, str]) -> None:
    for name, cid in graph.items():
        assert (await resolve(ctx, cid)).commit_id == cid, name
        # 16 digits are unique among 7 commits whatever their IDs
        assert (await resolve(ctx, cid[:16])).commit_id == cid, name
        assert (await resolve(ctx, cid[:16] + "~0")).commit_id == cid, name
    assert (await resolve(ctx, graph["c"][:20] + "~1^2")).commit_id == graph["x"]


async def test_prefix_rules(ctx: RepoContext, graph: dict[str, str]) -> None:
    cid = graph["c"]
    with pytest.raises(RefNotFoundError):
        await resolve(ctx, cid[:5])  # shorter than MIN_PREFIX: only a name
    with pytest.raises(RefNotFoundError):
        await resolve(ctx, cid[:10].upper())  # commit IDs are lowercase
    with pytest.raises(RefNotFoundError):
        await resolve(ctx, "f" * 64 if not cid.startswith("f" * 6) else "0" * 64)
    absent = next(p for p in ("000000", "ffffff", "123456") if not any(
        c.startswith(p) for c in graph.values()
    ))  # fmt: skip
    with pytest.raises(RefNotFoundError) as info:
        await resolve(ctx, absent)
    assert absent in str(info.value)


async def test_branch_and_tag_names_win_over_commit_prefixes(
    ctx: RepoContext, graph: dict[str, str]
) -> None:
    prefix = graph["a"][:8]
    await ctx.refstore.create_ref(REPO, prefix, Ref("branch", graph["y"]))
    assert (await resolve(ctx, prefix)).commit_id == graph["y"]
    assert (await resolve(ctx, graph["a"][:9])).commit_id == graph["a"]


def _colliding_messages(digits: int) -> tuple[str, str, str]:
    """Two commit messages whose commits share the first ``digits`` hex digits."""
    seen: dict[str, str] = {}
    i = 0
    while True:
        message = f"m{i}"
        cid = Commit(EMPTY_METARANGE_ID, (), "test", message, 1_700_000_000).id
        head = cid[:digits]
        if head in seen:
            return seen[head], message, head
        seen[head] = message
        i += 1


async def test_ambiguous_prefix(ctx: RepoContext) -> None:
    m1, m2, head = _colliding_messages(refexpr.MIN_PREFIX)
    c1 = await write_commit(ctx.objects, Commit(EMPTY_METARANGE_ID, (), "test", m1, 1_700_000_000))
    c2 = await write_commit(ctx.objects, Commit(EMPTY_METARANGE_ID, (), "test", m2, 1_700_000_000))
    assert c1[:6] == c2[:6] == head and c1 != c2
    with pytest.raises(AmbiguousRefError) as info:
        await resolve(ctx, head)
    assert sorted(info.value.matches) == sorted([c1, c2])
    assert head in str(info.value) and "ambiguous" in str(info.value)
    assert isinstance(info.value, InvalidInputError)
    # one more digit settles it (the IDs differ somewhere after the shared head)
    common = len(hashlib.sha256().hexdigest())
    for n in range(7, common + 1):
        if c1[:n] != c2[:n]:
            assert (await resolve(ctx, c1[:n])).commit_id == c1
            assert (await resolve(ctx, c2[:n])).commit_id == c2
            break


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("main~5", "has no parent"),
        ("main~99", "has no parent"),
        ("main^2", "has 1 parent"),
        ("main~1^3", "has 2 parents"),
        ("main~4^1", "has 0 parents"),
        ("nope", "nope"),
        ("nope~1", "nope"),
    ],
)
async def test_unknown(ctx: RepoContext, graph: dict[str, str], text: str, words: str) -> None:
    with pytest.raises(RefNotFoundError) as info:
        await resolve(ctx, text)
    assert words in str(info.value)
    assert isinstance(info.value, KeyError)


async def test_branch_without_commit(ctx: RepoContext) -> None:
    await ctx.refstore.create_ref(REPO, "empty", Ref("branch", ""))
    with pytest.raises(RefNotFoundError, match="no commit yet"):
        await resolve(ctx, "empty")


async def test_malformed_reads_nothing(ctx: RepoContext, graph: dict[str, str]) -> None:
    before = ctx.refstore.calls  # type: ignore[attr-defined]
    with pytest.raises(InvalidRefExpressionError):
        await resolve(ctx, "main~x")
    assert ctx.refstore.calls == before  # type: ignore[attr-defined]


async def test_modifiers_read_no_refs(ctx: RepoContext, graph: dict[str, str]) -> None:
    """One RefStore read for the base name; the walk reads commit objects only."""
    before = ctx.refstore.calls  # type: ignore[attr-defined]
    assert (await resolve(ctx, "main~3")).commit_id == graph["a"]
    assert ctx.refstore.calls == before + 1  # type: ignore[attr-defined]
