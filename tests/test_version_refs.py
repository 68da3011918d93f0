"""Branches and tags on a real embedded RefStore and local object store: creation from
ref expressions, compare-and-delete, listing, tag immutability, diffs of committed and
uncommitted states."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers.versioning import REPO, close, make_repo, rec, stage, tree_of

from lsmstore.commit.job import commit_branch
from lsmstore.errors import (
    ConflictError,
    InvalidInputError,
    InvalidNameError,
    RefExistsError,
    RefNotFoundError,
)
from lsmstore.refstore.base import Ref
from lsmstore.versioning.changes import diff_refs, diff_uncommitted
from lsmstore.versioning.context import RepoContext
from lsmstore.versioning.refs import (
    BranchInfo,
    TagInfo,
    create_branch,
    create_tag,
    delete_branch,
    delete_tag,
    init_default_branch,
    list_branches,
    list_tags,
)


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[RepoContext]:
    c = await make_repo(tmp_path)
    yield c
    await close(c)


async def commit(ctx: RepoContext, branch: str, *records: object, msg: str = "m") -> str:
    await stage(ctx, branch, records)  # type: ignore[arg-type]
    return (await commit_branch(ctx, branch, msg, committer="t")).commit_id


async def test_create_branch_from_expressions(ctx: RepoContext) -> None:
    c1 = await commit(ctx, "main", rec("a", "1"))
    c2 = await commit(ctx, "main", rec("a", "2"))
    await stage(ctx, "main", [rec("staged", "s")])
    assert await create_branch(ctx, "dev", "main") == BranchInfo("dev", c2)
    assert await create_branch(ctx, "old", "main~1") == BranchInfo("old", c1)
    assert await create_branch(ctx, "byid", c1[:10]) == BranchInfo("byid", c1)
    dev = await ctx.refstore.get_ref(REPO, "dev")
    assert dev == Ref("branch", c2)  # committed state only: nothing staged is copied
    await create_tag(ctx, "v1", "old")
    assert await create_branch(ctx, "fromtag", "v1") == BranchInfo("fromtag", c1)


async def test_names_are_unique_across_branches_and_tags(ctx: RepoContext) -> None:
    await create_branch(ctx, "dev", "main")
    with pytest.raises(RefExistsError):
        await create_branch(ctx, "dev", "main")
    with pytest.raises(RefExistsError):
        await create_tag(ctx, "dev", "main")
    await create_tag(ctx, "v1", "main")
    with pytest.raises(RefExistsError):
        await create_tag(ctx, "v1", "main")  # tags never move
    with pytest.raises(RefExistsError):
        await create_branch(ctx, "v1", "main")


@pytest.mark.parametrize("name", ["", "a/b", "a..b", "x~1", "x^", "-x", "a b", "x@"])
async def test_bad_names(ctx: RepoContext, name: str) -> None:
    with pytest.raises(InvalidNameError):
        await create_branch(ctx, name, "main")
    with pytest.raises(InvalidNameError):
        await create_tag(ctx, name, "main")
    assert [b.name async for b in list_branches(ctx)] == ["main"]


async def test_unknown_source(ctx: RepoContext) -> None:
    with pytest.raises(RefNotFoundError):
        await create_branch(ctx, "dev", "nope")
    with pytest.raises(RefNotFoundError):
        await create_tag(ctx, "t", "main~1")  # the first commit has no parent
    assert [b.name async for b in list_branches(ctx)] == ["main"]


async def test_delete_branch(ctx: RepoContext) -> None:
    await create_branch(ctx, "dev", "main")
    f = await stage(ctx, "dev", [rec("a", "1")])
    deleted = await delete_branch(ctx, "dev")
    assert deleted.l1 == (f,)
    with pytest.raises(RefNotFoundError):
        await ctx.refstore.get_ref(REPO, "dev")
    with pytest.raises(RefNotFoundError):
        await delete_branch(ctx, "dev")
    with pytest.raises(InvalidInputError, match="default branch"):
        await delete_branch(ctx, "main")


async def test_delete_branch_with_expected_value(ctx: RepoContext) -> None:
    await create_branch(ctx, "dev", "main")
    seen = await ctx.refstore.get_ref(REPO, "dev")
    await stage(ctx, "dev", [rec("a", "1")])  # the branch moves on
    with pytest.raises(ConflictError):
        await delete_branch(ctx, "dev", expected=seen)
    assert (await ctx.refstore.get_ref(REPO, "dev")).l1
    await delete_branch(ctx, "dev", expected=await ctx.refstore.get_ref(REPO, "dev"))


async def test_tags(ctx: RepoContext) -> None:
    c1 = await commit(ctx, "main", rec("a", "1"))
    assert await create_tag(ctx, "v1", "main") == TagInfo("v1", c1)
    await commit(ctx, "main", rec("a", "2"))
    assert (await ctx.refstore.get_ref(REPO, "v1")).base == c1  # did not move
    assert await tree_of(ctx, c1) == {b"a": b"1"}
    await create_tag(ctx, "v0", "main~2")
    assert [t.name async for t in list_tags(ctx)] == ["v0", "v1"]
    with pytest.raises(RefNotFoundError, match="is a branch"):
        await delete_tag(ctx, "main")
    assert await delete_tag(ctx, "v1") == TagInfo("v1", c1)
    with pytest.raises(RefNotFoundError):
        await delete_tag(ctx, "v1")
    assert [t.name async for t in list_tags(ctx)] == ["v0"]


async def test_listing_pages(ctx: RepoContext) -> None:
    for i in range(12):
        await create_branch(ctx, f"b{i:02d}", "main")
        await create_tag(ctx, f"t{i:02d}", "main")
    names = [b.name async for b in list_branches(ctx)]
    assert names == [f"b{i:02d}" for i in range(12)] + ["main"]
    assert [b.name async for b in list_branches(ctx, prefix="b0", after="b03", limit=3)] == [
        "b04",
        "b05",
        "b06",
    ]
    assert [t.name async for t in list_tags(ctx, prefix="t1")] == ["t10", "t11"]
    assert [b.name async for b in list_branches(ctx, limit=0)] == []
    with pytest.raises(InvalidInputError):
        [b async for b in list_branches(ctx, limit=-1)]


async def test_init_default_branch_is_idempotent(ctx: RepoContext) -> None:
    c1 = await commit(ctx, "main", rec("a", "1"))
    assert await init_default_branch(ctx) == c1  # an existing branch is kept


async def test_diff_between_refs(ctx: RepoContext) -> None:
    await commit(ctx, "main", *[rec(f"k{i:04d}", "v") for i in range(3000)])
    await create_branch(ctx, "dev", "main")
    await commit(
        ctx, "dev", rec("k0001", "changed"), rec("k0002", None), rec("k0002a", "added"), msg="d"
    )
    changes = [(c.key, c.kind) async for c in diff_refs(ctx, "main", "dev")]
    assert changes == [(b"k0001", "changed"), (b"k0002", "removed"), (b"k0002a", "added")]
    back = [(c.key, c.kind) async for c in diff_refs(ctx, "dev", "main")]
    assert back == [(b"k0001", "changed"), (b"k0002", "added"), (b"k0002a", "removed")]
    assert [c async for c in diff_refs(ctx, "main", "dev~1")] == []
    first = await anext(diff_refs(ctx, "main", "dev"))
    assert first.left is not None and first.left.value == b"v"
    assert first.right is not None and first.right.value == b"changed"


async def test_diff_uncommitted(ctx: RepoContext) -> None:
    await commit(ctx, "main", rec("a", "1"), rec("b", "1"), rec("c", "1"))
    await stage(ctx, "main", [rec("a", "2"), rec("b", None), rec("d", "new")])
    await stage(ctx, "main", [rec("c", "1"), rec("e", None), rec("d", "newer")])
    changes = [(c.key, c.kind, c.right.value if c.right else None)
               async for c in diff_uncommitted(ctx, "main")]  # fmt: skip
    assert changes == [
        (b"a", "changed", b"2"),
        (b"b", "removed", None),
        (b"d", "added", b"newer"),
    ]
    await ctx.refstore.create_ref(
        REPO, "t", Ref("tag", (await ctx.refstore.get_ref(REPO, "main")).base)
    )
    with pytest.raises(InvalidInputError, match="tag"):
        [c async for c in diff_uncommitted(ctx, "t")]


async def test_diff_uncommitted_from_a_start_key(ctx: RepoContext) -> None:
    """A page after a key starts there: the same changes as the whole diff from it on."""
    await commit(ctx, "main", *[rec(f"k{i:03d}", "v") for i in range(300)])
    await stage(ctx, "main", [rec(f"k{i:03d}", None) for i in range(0, 300, 3)])
    await stage(ctx, "main", [rec(f"k{i:03d}x", "new") for i in range(0, 300, 7)])
    whole = [(c.key, c.kind) async for c in diff_uncommitted(ctx, "main")]
    for start in [b"", b"k", b"k000", b"k100", b"k1005", b"k299", b"k299x", b"l"]:
        got = [(c.key, c.kind) async for c in diff_uncommitted(ctx, "main", start=start)]
        assert got == [c for c in whole if c[0] >= start], start
