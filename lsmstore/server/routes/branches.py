"""Branches: list, create, get, delete, reset, revert, commit, uncommitted diff -- each
write one call of the operations layer (:mod:`lsmstore.operations`)."""

from __future__ import annotations

import functools

from lsmstore.errors import InvalidInputError, RefNotFoundError
from lsmstore.operations import branches as _branches
from lsmstore.refstore.names import check_ref_name
from lsmstore.server import models, pagination, validate
from lsmstore.server.context import Context
from lsmstore.server.errors import bad_request
from lsmstore.server.http import Request, Response, empty, json_response, text_response
from lsmstore.server.routes.common import (
    DIFF_PARAMS,
    committer,
    diff_page,
    diff_start,
    merge_strategy,
)
from lsmstore.server.routes.schemas import BOOL, STR, ref
from lsmstore.server.routing import Param, Route
from lsmstore.types import Commit, MergeResult
from lsmstore.versioning import changes as _changes
from lsmstore.versioning import refs as _refs

BASE = "/api/v1/repositories/{repository}/branches"
ITEM = BASE + "/{branch}"


async def revert_request(ctx: Context, request: Request) -> MergeResult:
    """The revert a ``RevertCreation`` body asks for, done."""
    repo = await ctx.repository(request.params["repository"])
    name = check_ref_name(request.params["branch"])
    doc = await request.json_object()
    target = validate.string(doc, "ref")
    parent = validate.integer(doc, "parent_number", required=True)
    validate.boolean(doc, "force")
    validate.boolean(doc, "allow_empty")
    overrides = doc.get("commit_overrides") or {}
    if not isinstance(overrides, dict):
        raise bad_request("field 'commit_overrides' must be an object")
    message = validate.string(overrides, "message", required=False) or None
    metadata = validate.string_map(overrides, "metadata")
    strategy = merge_strategy(doc)
    return await repo.revert(
        target, branch=name, parent=max(parent, 1), strategy=strategy, message=message,
        committer=committer(request, doc), metadata=metadata,
    )  # fmt: skip


def routes(ctx: Context) -> list[Route]:
    async def list_branches(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        lister = functools.partial(_refs.list_branches, repo.context())
        return json_response(await pagination.refs_page(request, lister))

    async def create_branch(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        doc = await request.json_object()
        name = validate.string(doc, "name")
        source = validate.string(doc, "source")
        validate.boolean(doc, "force")
        validate.boolean(doc, "hidden")
        if not source:
            raise bad_request("field 'source' must not be empty")
        return text_response(await _branches.create(repo, name, source), 201)

    async def get_branch(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        try:
            value = await _refs.get_branch(repo.context(), name)
        except InvalidInputError:
            raise RefNotFoundError(f"{repo.name}: no branch named {name!r}") from None
        return json_response(models.ref(name, value.base))

    async def delete_branch(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        try:
            await _refs.get_branch(repo.context(), name)
        except InvalidInputError:
            raise RefNotFoundError(f"{repo.name}: no branch named {name!r}") from None
        try:
            await repo.delete_branch(name)
        finally:
            ctx.forget_branch(repo.name, name)
        return empty(204)

    async def reset_branch(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        doc = await request.json_object()
        kind = validate.string(doc, "type")
        validate.boolean(doc, "force")
        path = validate.string(doc, "path", required=False)
        if kind == "reset":
            await repo.branch(name).reset()
        elif kind in ("object", "common_prefix"):
            if not path:
                raise bad_request(f"reset of type {kind!r} needs a 'path'")
            await _branches.reset_paths(repo.branch(name), path, prefix=kind == "common_prefix")
        else:
            raise bad_request("field 'type' must be one of reset, object, common_prefix")
        return empty(204)

    async def revert_branch(request: Request) -> Response:
        await revert_request(ctx, request)
        return empty(204)

    async def commit(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        doc = await request.json_object()
        message = validate.string(doc, "message")
        metadata = validate.string_map(doc, "metadata")
        allow_empty = validate.boolean(doc, "allow_empty")
        validate.boolean(doc, "force")
        validate.integer(doc, "date")
        who = committer(request, doc)
        c: Commit = await repo.branch(name).commit(
            message, metadata=metadata, committer=who, allow_empty=allow_empty
        )
        return json_response(models.commit(c.id, c), 201)

    async def diff_branch(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        limit = pagination.amount(request)
        changes = _changes.diff_uncommitted(repo.context(), name, start=diff_start(request))
        found = await diff_page(changes, request, limit)
        return json_response(pagination.page(found, limit, lambda d: d["path"], lambda d: d))

    return [
        Route("GET", BASE, list_branches, "listBranches", "read", "branches",
              query=pagination.PARAMS, responses={200: ref("RefList")}, errors=(404,)),
        Route("POST", BASE, create_branch, "createBranch", "write", "branches",
              body=(("application/json", ref("BranchCreation")),),
              responses={201: STR}, produces="text/html", errors=(400, 404, 409)),
        Route("GET", ITEM, get_branch, "getBranch", "read", "branches",
              responses={200: ref("Ref")}, errors=(400, 404)),
        Route("DELETE", ITEM, delete_branch, "deleteBranch", "write", "branches",
              query=(Param("force", BOOL),), responses={204: None}, errors=(400, 404)),
        Route("PUT", ITEM, reset_branch, "resetBranch", "write", "branches",
              body=(("application/json", ref("ResetCreation")),),
              responses={204: None}, errors=(400, 404)),
        Route("POST", ITEM + "/revert", revert_branch, "revertBranch", "write", "branches",
              body=(("application/json", ref("RevertCreation")),),
              responses={204: None}, errors=(400, 404, 409)),
        Route("POST", ITEM + "/commits", commit, "commit", "write", "commits",
              query=(Param("source_metarange", STR),),
              body=(("application/json", ref("CommitCreation")),),
              responses={201: ref("Commit")}, errors=(400, 404, 409)),
        Route("GET", ITEM + "/diff", diff_branch, "diffBranch", "read", "branches",
              query=DIFF_PARAMS, responses={200: ref("DiffList")}, errors=(400, 404)),
    ]  # fmt: skip
