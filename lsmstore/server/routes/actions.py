"""The actions runs API (lakeFS's ``listRepositoryRuns``, ``getRun``,
``listRunHooks``, ``getRunHookOutput``): the recorded runs of a repository's actions
(docs/actions.md), read through the embedded :class:`~lsmstore.client.Repository`.
Times are RFC 3339 (UTC); ``status`` is ``completed`` or ``failed``."""

from __future__ import annotations

from lsmstore.server import pagination
from lsmstore.server.context import Context
from lsmstore.server.http import Request, Response, json_response
from lsmstore.server.models import hook_run as hook_model
from lsmstore.server.models import run as run_model
from lsmstore.server.routes.schemas import ref
from lsmstore.server.routing import Param, Route

BASE = "/api/v1/repositories/{repository}/actions/runs"


def routes(ctx: Context) -> list[Route]:
    async def list_runs(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        limit = pagination.amount(request)
        found = await repo.action_runs(
            branch=request.arg("branch") or None, commit=request.arg("commit") or None,
            after=request.arg("after") or None, amount=limit + 1,
        )  # fmt: skip
        return json_response(pagination.page(found, limit, lambda r: r.run_id, run_model))

    async def get_run(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        return json_response(run_model(await repo.action_run(request.params["run_id"])))

    async def list_hooks(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        limit = pagination.amount(request)
        found = await repo.run_hooks(
            request.params["run_id"], after=request.arg("after") or None, amount=limit + 1
        )
        return json_response(pagination.page(found, limit, lambda h: h.hook_run_id, hook_model))

    async def get_output(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        data = await repo.hook_output(request.params["run_id"], request.params["hook_run_id"])
        return Response(200, data, "application/octet-stream")

    filters = (
        Param("branch", {"type": "string"}, description="only runs of this branch"),
        Param("commit", {"type": "string"}, description="only runs of this commit ID"),
    )
    paging = tuple(p for p in pagination.PARAMS if p.name != "prefix")
    run = BASE + "/{run_id}"
    return [
        Route("GET", BASE, list_runs, "listRepositoryRuns", "read", "actions",
              query=paging + filters, responses={200: ref("ActionRunList")}, errors=(400, 404)),
        Route("GET", run, get_run, "getRun", "read", "actions",
              responses={200: ref("ActionRun")}, errors=(400, 404)),
        Route("GET", run + "/hooks", list_hooks, "listRunHooks", "read", "actions",
              query=paging, responses={200: ref("HookRunList")}, errors=(400, 404)),
        Route("GET", run + "/hooks/{hook_run_id}/output", get_output, "getRunHookOutput",
              "read", "actions", responses={200: {"type": "string", "format": "binary"}},
              produces="application/octet-stream", errors=(400, 404)),
    ]  # fmt: skip
