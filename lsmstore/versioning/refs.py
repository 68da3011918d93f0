"""Branches and tags: create, delete, list; and a repository's first commit.

A branch is created from any ref expression and starts at that commit's *committed*
state: its base is the resolved commit, its L1 and L2 are empty (staged writes of a
source branch are not copied).  A tag names one commit forever: created if absent,
never moved, deleted only as a whole.  Branches and tags share one namespace per
repository (one RefStore table), so a tag cannot take a branch's name.

Every mutation is one compare-and-set on the RefStore: creating fails with
:class:`RefExistsError` when the name is taken; deleting names the value it expects
and fails with :class:`ConflictError` when the ref changed meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from lsmstore import validate
from lsmstore.errors import ConflictError, InvalidInputError, RefExistsError, RefNotFoundError
from lsmstore.graveler.commit import write_commit
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.refexpr import resolve
from lsmstore.refstore.base import Ref, RefKind
from lsmstore.refstore.names import check_new_branch_name, check_new_tag_name, check_ref_name
from lsmstore.types import Commit
from lsmstore.versioning.context import RepoContext

INITIAL_COMMITTER = "lsmstore"
INITIAL_MESSAGE = "Repository created"
#: Reads-and-deletes of a branch that keeps changing before delete_branch gives up.
DELETE_ATTEMPTS = 5
_PAGE = 1000


@dataclass(frozen=True, slots=True)
class BranchInfo:
    name: str
    commit_id: str  # the branch's base: its last commit
    l1: tuple[str, ...] = ()  # staged files (ids), newest last
    l2: tuple[str, ...] = ()

    @property
    def staged_files(self) -> int:
        return len(self.l1) + len(self.l2)


@dataclass(frozen=True, slots=True)
class TagInfo:
    name: str
    commit_id: str


async def write_initial_commit(ctx: RepoContext, created_at: int) -> str:
    """Write a repository's first commit (the empty tree, no parents); its ID."""
    commit = Commit(EMPTY_METARANGE_ID, (), INITIAL_COMMITTER, INITIAL_MESSAGE, created_at)
    commit_id = await write_commit(ctx.objects, commit)
    ctx.remember(commit_id, commit)
    return commit_id


async def init_default_branch(
    ctx: RepoContext, branch: str | None = None, *, created_at: int | None = None
) -> str:
    """Give a repository its first commit (made at ``created_at``, default now) and its
    default branch on it; the commit ID.

    Idempotent: a branch already there is left as it is (this also repairs a repository
    whose creation stopped between writing its record and creating the branch).
    """
    name = branch or ctx.default_branch
    when = int(ctx.clock()) if created_at is None else created_at
    commit_id = await write_initial_commit(ctx, when)
    try:
        await ctx.refstore.create_ref(ctx.name, name, Ref("branch", commit_id))
    except RefExistsError:
        return (await ctx.refstore.get_ref(ctx.name, name)).base
    return commit_id


async def create_branch(ctx: RepoContext, name: str, source: str) -> BranchInfo:
    """Create branch ``name`` (lakeFS's rule for new names) at the commit ``source``
    resolves to."""
    check_new_branch_name(name)
    resolved = await resolve(ctx, source)
    ref = Ref("branch", resolved.commit_id)
    await ctx.refstore.create_ref(ctx.name, name, ref)
    return BranchInfo(name, resolved.commit_id)


async def get_branch(ctx: RepoContext, name: str) -> Ref:
    """The branch's value; RefNotFoundError if absent, InvalidInputError for a tag."""
    ref = await ctx.refstore.get_ref(ctx.name, name)
    if not ref.is_branch:
        raise InvalidInputError(f"{ctx.name}/{name} is a tag, not a branch")
    return ref


async def delete_branch(ctx: RepoContext, name: str, *, expected: Ref | None = None) -> Ref:
    """Delete branch ``name``; the value it had (its staged files are now garbage).

    With ``expected``, delete only if the branch still has exactly that value
    (ConflictError otherwise).  Without, read and delete, retrying a few times while
    writes keep landing.  The repository's default branch cannot be deleted
    (InvalidInputError).
    """
    check_ref_name(name, "branch")
    if name == ctx.default_branch:
        raise InvalidInputError(
            f"{ctx.name}/{name} is the repository's default branch and cannot be deleted"
        )
    for attempt in range(1, DELETE_ATTEMPTS + 1):
        ref = expected if expected is not None else await get_branch(ctx, name)
        if not ref.is_branch:
            raise InvalidInputError(f"{ctx.name}/{name}: expected value is not a branch")
        try:
            await ctx.refstore.delete_ref(ctx.name, name, ref)
            return ref
        except ConflictError:
            if expected is not None or attempt == DELETE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def create_tag(ctx: RepoContext, name: str, target: str) -> TagInfo:
    """Create tag ``name`` (lakeFS's rules for new names) at the commit ``target``
    resolves to (RefExistsError if taken)."""
    check_new_tag_name(name)
    resolved = await resolve(ctx, target)
    await ctx.refstore.create_ref(ctx.name, name, Ref("tag", resolved.commit_id))
    return TagInfo(name, resolved.commit_id)


async def delete_tag(ctx: RepoContext, name: str) -> TagInfo:
    """Delete tag ``name``; RefNotFoundError if there is none (a branch is not a tag)."""
    check_ref_name(name, "tag")
    ref = await ctx.refstore.get_ref(ctx.name, name)
    if ref.kind != "tag":
        raise RefNotFoundError(f"{ctx.name}: no tag named {name!r} ({name!r} is a branch)")
    await ctx.refstore.delete_ref(ctx.name, name, ref)
    return TagInfo(name, ref.base)


async def _list(
    ctx: RepoContext, kind: RefKind, prefix: str, after: str | None, limit: int | None
) -> AsyncIterator[tuple[str, Ref]]:
    validate.check_optional_int(limit, "listing limit", min_value=0)
    produced = 0
    while limit is None or produced < limit:
        page = await ctx.refstore.list_refs(ctx.name, prefix=prefix, after=after, limit=_PAGE)
        for name, ref in page:
            if ref.kind != kind:
                continue
            yield name, ref
            produced += 1
            if limit is not None and produced >= limit:
                return
        if len(page) < _PAGE:
            return
        after = page[-1][0]


async def list_branches(
    ctx: RepoContext, *, prefix: str = "", after: str | None = None, limit: int | None = None
) -> AsyncIterator[BranchInfo]:
    """Branches in name order, with ``prefix``, strictly after ``after``."""
    async for name, ref in _list(ctx, "branch", prefix, after, limit):
        yield BranchInfo(name, ref.base, ref.l1, ref.l2)


async def list_tags(
    ctx: RepoContext, *, prefix: str = "", after: str | None = None, limit: int | None = None
) -> AsyncIterator[TagInfo]:
    """Tags in name order, with ``prefix``, strictly after ``after``."""
    async for name, ref in _list(ctx, "tag", prefix, after, limit):
        yield TagInfo(name, ref.base)
