"""Tag life cycle: create and delete, with their actions.

Creation runs ``pre-create-tag`` and ``post-create-tag``, deletion ``pre-delete-tag``
and ``post-delete-tag`` (:mod:`lsmstore.actions.runner`), the action files read from
the tagged commit, as lakeFS.  A failing pre-hook raises HookFailedError and the tag
is not created (deleted).  Tags never move: creation is create-if-absent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsmstore import refexpr
from lsmstore.actions import runner as _actions
from lsmstore.operations import branches as _branches
from lsmstore.refstore.names import check_ref_name
from lsmstore.versioning import refs as _refs

if TYPE_CHECKING:
    from lsmstore.client import Repository


async def create(repo: Repository, name: str, target: str) -> str:
    """Tag the commit ``target`` names; its commit ID.  RefExistsError if the name is
    taken (checked before the hooks run, and again when the tag is written)."""
    ctx = repo.context()
    if not _actions.enabled(repo):
        return (await _refs.create_tag(ctx, name, target)).commit_id
    check_ref_name(name, "tag")
    commit_id = (await refexpr.resolve(ctx, target)).commit_id
    await _branches.require_absent(repo, name)
    event = _actions.Event("pre-create-tag", commit_id, tag_id=name, commit_id=commit_id)
    await _actions.pre(repo, event)
    created = (await _refs.create_tag(ctx, name, commit_id)).commit_id
    await _actions.post(repo, event.post())
    return created


async def delete(repo: Repository, name: str) -> str:
    """Delete tag ``name``; the commit it named.  RefNotFoundError if there is none."""
    ctx = repo.context()
    if _actions.enabled(repo):
        check_ref_name(name, "tag")
        found = await repo.refstore.get_ref(repo.name, name)
        if found.kind == "tag":
            event = _actions.Event("pre-delete-tag", found.base, tag_id=name, commit_id=found.base)
            await _actions.pre(repo, event)
            deleted = (await _refs.delete_tag(ctx, name)).commit_id
            await _actions.post(repo, event.post())
            return deleted
    return (await _refs.delete_tag(ctx, name)).commit_id
