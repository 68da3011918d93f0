"""Commits: get one (any ref expression), and the log of a ref."""

from __future__ import annotations

import datetime

from lsmstore import refexpr
from lsmstore.graveler.diff import diff_trees
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.server import models, pagination
from lsmstore.server.context import Context
from lsmstore.server.errors import bad_request
from lsmstore.server.http import Request, Response, json_response
from lsmstore.server.routes.schemas import BOOL, STR, ref
from lsmstore.server.routing import Param, Route
from lsmstore.types import LogEntry
from lsmstore.versioning import history
from lsmstore.versioning.context import RepoContext

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


def _since(value: str | None) -> int | None:
    """``since`` (RFC 3339 date-time) as epoch seconds."""
    if not value:
        return None
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(f"query parameter 'since': not a date-time: {value!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp())


async def _touches(
    rctx: RepoContext, entry: LogEntry, objects: list[str], prefixes: list[str]
) -> bool:
    """Whether the commit changed one of ``objects`` or a path under ``prefixes``
    (against its first parent)."""
    parents = entry.commit.parents
    base = (await rctx.commit(parents[0])).metarange_id if parents else EMPTY_METARANGE_ID
    wanted = {o.encode() for o in objects}
    starts = tuple(p.encode() for p in prefixes)
    async for change in diff_trees(rctx.source, base, entry.commit.metarange_id):
        if change.key in wanted or (starts and change.key.startswith(starts)):
            return True
    return False


def routes(ctx: Context) -> list[Route]:
    async def get_commit(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        rctx = repo.context()
        found = await refexpr.resolve(rctx, request.params["commitId"])
        c = await rctx.commit(found.commit_id)
        return json_response(models.commit(found.commit_id, c))

    async def log_commits(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        objects = request.query.get("objects") or []
        prefixes = request.query.get("prefixes") or []
        since = _since(request.arg("since"))
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
            rctx, head.commit_id, after=after, first_parent=first_parent
        ):
            if since is not None and entry.commit.created_at < since:
                break
            if (objects or prefixes) and not await _touches(rctx, entry, objects, prefixes):
                continue
            found.append(entry)
            if len(found) > limit or entry.id == stop:
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
              query=LOG_PARAMS, responses={200: ref("CommitList")}, errors=(400, 404)),
    ]  # fmt: skip
