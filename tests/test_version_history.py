"""History walks on a commit graph written to a real local object store: first-parent
log with paging, all ancestors by generation, merge bases, ancestry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers.versioning import close, make_repo

from lsmstore.errors import InvalidInputError, RefNotFoundError
from lsmstore.graveler.commit import next_generation, write_commit
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.types import Commit
from lsmstore.versioning.context import RepoContext
from lsmstore.versioning.history import ancestors, is_ancestor, log, merge_base


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[RepoContext]:
    c = await make_repo(tmp_path)
    yield c
    await close(c)


async def add(ctx: RepoContext, name: str, *parents: str, at: int = 1_700_000_000) -> str:
    ps = [await ctx.commit(p) for p in parents]
    commit = Commit(EMPTY_METARANGE_ID, parents, "t", name, at, {}, next_generation(ps))
    return await write_commit(ctx.objects, commit)


@pytest.fixture
async def g(ctx: RepoContext) -> dict[str, str]:
    """
    r - a - b - m1 - c - m2          main line: r a b m1 c m2
         \\     /         /
          x - y ------- z            side line: x y z (m1 merges y, m2 merges z)
    q                                 an unrelated root
    """
    ids: dict[str, str] = {}
    ids["r"] = await add(ctx, "r")
    ids["a"] = await add(ctx, "a", ids["r"])
    ids["b"] = await add(ctx, "b", ids["a"])
    ids["x"] = await add(ctx, "x", ids["a"])
    ids["y"] = await add(ctx, "y", ids["x"])
    ids["m1"] = await add(ctx, "m1", ids["b"], ids["y"])
    ids["c"] = await add(ctx, "c", ids["m1"])
    ids["z"] = await add(ctx, "z", ids["y"])
    ids["m2"] = await add(ctx, "m2", ids["c"], ids["z"])
    ids["q"] = await add(ctx, "q")
    return ids


async def messages(it: AsyncIterator[object]) -> list[str]:
    return [e.message async for e in it]  # type: ignore[attr-defined]


async def test_first_parent_log(ctx: RepoContext, g: dict[str, str]) -> None:
    assert await messages(log(ctx, g["m2"])) == ["m2", "c", "m1", "b", "a", "r"]
    assert await messages(log(ctx, g["z"])) == ["z", "y", "x", "a", "r"]
    entry = await anext(log(ctx, g["m2"]))
    assert entry.id == g["m2"] and entry.parents == (g["c"], g["z"])
    assert entry.generation == (await ctx.commit(g["m2"])).generation


async def test_paging_with_after_and_limit(ctx: RepoContext, g: dict[str, str]) -> None:
    pages: list[list[str]] = []
    after: str | None = None
    while True:
        page = [e async for e in log(ctx, g["m2"], after=after, limit=4)]
        if not page:
            break
        pages.append([e.message for e in page])
        after = page[-1].id
    assert pages == [["m2", "c", "m1", "b"], ["a", "r"]]
    assert await messages(log(ctx, g["m2"], limit=0)) == []


async def test_all_ancestors_by_generation(ctx: RepoContext, g: dict[str, str]) -> None:
    seen = await messages(log(ctx, g["m2"], first_parent=False))
    assert sorted(seen) == sorted(["m2", "c", "m1", "b", "a", "r", "x", "y", "z"])
    gens = [(await ctx.commit(g[m])).generation for m in seen]
    assert gens == sorted(gens, reverse=True)
    # paging over the full history
    first = [e async for e in log(ctx, g["m2"], first_parent=False, limit=3)]
    rest = await messages(log(ctx, g["m2"], first_parent=False, after=first[-1].id))
    assert [e.message for e in first] + rest == seen
    assert [e.id async for e in ancestors(ctx, g["r"])] == [g["r"]]


@pytest.mark.parametrize(
    ("left", "right", "base"),
    [
        ("m2", "z", "z"),
        ("c", "z", "y"),
        ("b", "y", "a"),
        ("b", "x", "a"),
        ("m1", "y", "y"),
        ("y", "m1", "y"),
        ("r", "m2", "r"),
        ("c", "c", "c"),
        ("c", "q", None),
        ("q", "r", None),
    ],
)
async def test_merge_base(
    ctx: RepoContext, g: dict[str, str], left: str, right: str, base: str | None
) -> None:
    found = await merge_base(ctx, g[left], g[right])
    assert found == (g[base] if base else None)


async def test_criss_cross_picks_a_nearest_base(ctx: RepoContext) -> None:
    r = await add(ctx, "r")
    a = await add(ctx, "a", r)
    b = await add(ctx, "b", r)
    m1 = await add(ctx, "m1", a, b)
    m2 = await add(ctx, "m2", b, a)
    found = await merge_base(ctx, m1, m2)
    assert found == min(a, b)  # both are nearest; ties go to the smallest ID


@pytest.mark.parametrize(
    ("ancestor", "descendant", "expected"),
    [
        ("r", "m2", True),
        ("y", "m2", True),
        ("z", "m2", True),
        ("b", "z", False),
        ("m2", "r", False),
        ("c", "c", True),
        ("q", "m2", False),
        ("x", "b", False),
    ],
)
async def test_is_ancestor(
    ctx: RepoContext, g: dict[str, str], ancestor: str, descendant: str, expected: bool
) -> None:
    assert await is_ancestor(ctx, g[ancestor], g[descendant]) is expected


async def test_errors(ctx: RepoContext, g: dict[str, str]) -> None:
    with pytest.raises(InvalidInputError):
        [e async for e in log(ctx, g["m2"], limit=-1)]
    with pytest.raises(RefNotFoundError):
        [e async for e in log(ctx, "0" * 64)]
    with pytest.raises(InvalidInputError):
        await merge_base(ctx, "nope", g["r"])
