"""Workspaces over HTTP (docs/server.md, "Workspaces"): stash a branch's staged changes
under a name, pop them onto a branch, list, show and drop them.

Stash and pop are the operations layer's (:mod:`lsmstore.operations.workspaces`: the
branch's exclusive lock, one atomic RefStore move), so a crash of the server leaves
either the old state or the new one, never half of it; a client whose answer was lost
reads the workspace back (GET) to learn which.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from lsmstore.client import Branch
from lsmstore.refstore.base import Workspace
from lsmstore.refstore.names import check_ref_name
from lsmstore.server import models, pagination, validate
from lsmstore.server.context import Context
from lsmstore.server.http import Request, Response, empty, json_response
from lsmstore.server.routes.schemas import ref
from lsmstore.server.routing import Route

REPO = "/api/v1/lsm/repositories/{repository}"
ITEM = REPO + "/workspaces/{workspace}"
BRANCH = REPO + "/branches/{branch}"

T = TypeVar("T")


def workspace(w: Workspace) -> dict[str, Any]:
    """The ``Workspace`` JSON of ``w``."""
    return {
        "name": w.name,
        "branch": w.branch,
        "base": w.base,
        "l1": list(w.l1),
        "l2": list(w.l2),
        "created_at": w.created_at,
    }


def routes(ctx: Context) -> list[Route]:
    async def list_workspaces(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        limit = pagination.amount(request)
        after = request.arg("after", "") or None
        found = await repo.workspaces(after=after, limit=limit + 1)
        return json_response(pagination.page(found, limit, lambda w: w.name, workspace))

    async def get_workspace(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        return json_response(workspace(await repo.get_workspace(request.params["workspace"])))

    async def drop_workspace(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        await repo.drop_workspace(request.params["workspace"])
        return empty(204)

    async def _move(request: Request, move: Callable[[Branch, str], Awaitable[T]]) -> T:
        """``move(branch, name)``: a stash or pop of the request's branch."""
        repo = await ctx.repository(request.params["repository"])
        branch = check_ref_name(request.params["branch"])
        doc = await request.json_object()
        name = check_ref_name(validate.string(doc, "name"), "workspace")
        return await move(repo.branch(branch), name)

    async def stash(request: Request) -> Response:
        w = await _move(request, lambda branch, name: branch.stash(name))
        return json_response(workspace(w), 201)

    async def pop(request: Request) -> Response:
        value = await _move(request, lambda branch, name: branch.pop(name))
        return json_response(models.staging_state(request.params["branch"], value))

    body = (("application/json", ref("WorkspaceName")),)
    return [
        Route("GET", REPO + "/workspaces", list_workspaces, "lsmListWorkspaces", "read", "lsm",
              query=pagination.PARAMS[1:], responses={200: ref("WorkspaceList")}, errors=(404,)),
        Route("GET", ITEM, get_workspace, "lsmGetWorkspace", "read", "lsm",
              responses={200: ref("Workspace")}, errors=(404,)),
        Route("DELETE", ITEM, drop_workspace, "lsmDropWorkspace", "write", "lsm",
              responses={204: None}, errors=(404,)),
        Route("POST", BRANCH + "/stash", stash, "lsmStashBranch", "write", "lsm",
              summary="move the branch's staged changes into a new workspace", body=body,
              responses={201: ref("Workspace")}, errors=(404, 409)),
        Route("POST", BRANCH + "/pop", pop, "lsmPopWorkspace", "write", "lsm",
              summary="put a workspace on top of the branch's staged changes, delete it",
              body=body, responses={200: ref("StagingState")}, errors=(404, 409)),
    ]  # fmt: skip
