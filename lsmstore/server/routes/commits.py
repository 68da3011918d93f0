"""Commits: get one (any ref expression), and the log of a ref."""

from __future__ import annotations

from lsmstore import refexpr
from lsmstore.server import models, pagination
from lsmstore.server.context import Context
from lsmstore.server.errors import ApiError
from lsmstore.server.http import Request, Response, json_response
from lsmstore.server.routes.schemas import BOOL, STR, ref
from lsmstore.server.routing import Param, Route
from lsmstore.versioning import history

LOG_PARAMS = (
    Param("after", STR, description="a commit ID: list the commits after it"),
    Param("amount", {"type": "integer", "minimum": -1, "maximum": 1000, "default": 100}),
    Param("objects", {"type": "array", "items": STR}),
    Param("prefixes", {"type": "array", "items": STR}),
    Param("limit", BOOL),
    Param("first_parent", BOOL),
    Param("since", {"type": "string", "format": "date-time"}),
    Param("stop_at", STR),
)


def routes(ctx: Context) -> list[Route]:
    async def get_commit(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        rctx = repo.context()
        found = await refexpr.resolve(rctx, request.params["commitId"])
        c = await rctx.commit(found.commit_id)
        return json_response(models.commit(found.commit_id, c))

    async def log_commits(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        if request.query.get("objects") or request.query.get("prefixes"):
            raise ApiError(501, "log filtered by objects or prefixes is not implemented")
        if request.arg("since"):
            raise ApiError(501, "log 'since' is not implemented")
        limit = pagination.amount(request)
        rctx = repo.context()
        head = await refexpr.resolve(rctx, request.params["ref"])
        after = request.arg("after", "") or None
        stop_at = request.arg("stop_at", "") or None
        stop = (await refexpr.resolve(rctx, stop_at)).commit_id if stop_at else None
        if after is not None:
            after = (await refexpr.resolve(rctx, after)).commit_id
        first_parent = request.bool_arg("first_parent", False)
        found = []
        async for entry in history.log(
            rctx, head.commit_id, after=after, limit=limit + 1, first_parent=first_parent
        ):
            found.append(entry)
            if entry.id == stop:
                break
        body = pagination.page(
            found, limit, lambda e: e.id, lambda e: models.commit(e.id, e.commit)
        )
        return json_response(body)

    repo = "/api/v1/repositories/{repository}"
    return [
        Route("GET", repo + "/commits/{commitId}", get_commit, "getCommit", "read", "commits",
              responses={200: ref("Commit")}, errors=(400, 404)),
        Route("GET", repo + "/refs/{ref}/commits", log_commits, "logCommits", "read", "refs",
              query=LOG_PARAMS, responses={200: ref("CommitList")}, errors=(400, 404, 501)),
    ]  # fmt: skip
