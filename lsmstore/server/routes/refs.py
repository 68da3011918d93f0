"""Ref-to-ref operations: diff, merge, merge base."""

from __future__ import annotations

from collections.abc import AsyncIterator

from lsmstore import refexpr
from lsmstore.errors import NothingToCommitError
from lsmstore.graveler.diff import diff_trees
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.refstore.names import check_ref_name
from lsmstore.server import models, pagination, validate
from lsmstore.server.context import Context
from lsmstore.server.errors import bad_request
from lsmstore.server.http import Request, Response, json_response
from lsmstore.server.routes.common import DIFF_PARAMS, committer, diff_page, merge_strategy
from lsmstore.server.routes.schemas import ref
from lsmstore.server.routing import Param, Route
from lsmstore.types import Change
from lsmstore.versioning import history
from lsmstore.versioning.context import RepoContext

BASE = "/api/v1/repositories/{repository}/refs"


async def _tree(rctx: RepoContext, commit_id: str | None) -> str:
    return (await rctx.commit(commit_id)).metarange_id if commit_id else EMPTY_METARANGE_ID


async def _diff(rctx: RepoContext, left: str, right: str, three_dot: bool) -> AsyncIterator[Change]:
    lc = (await refexpr.resolve(rctx, left)).commit_id
    rc = (await refexpr.resolve(rctx, right)).commit_id
    base: str | None = lc
    if three_dot:
        base = await history.merge_base(rctx, lc, rc)
    async for change in diff_trees(rctx.source, await _tree(rctx, base), await _tree(rctx, rc)):
        yield change


def routes(ctx: Context) -> list[Route]:
    async def diff_refs(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        kind = request.arg("type", "three_dot")
        if kind not in ("two_dot", "three_dot"):
            raise bad_request("query parameter 'type' must be two_dot or three_dot")
        limit = pagination.amount(request)
        changes = _diff(
            repo.context(), request.params["leftRef"], request.params["rightRef"],
            kind == "three_dot",
        )  # fmt: skip
        found = await diff_page(changes, request, limit)
        return json_response(pagination.page(found, limit, lambda d: d["path"], lambda d: d))

    async def merge(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        dest = check_ref_name(request.params["destinationBranch"])
        data = await request.body()
        doc = {}
        if data.strip():
            doc = await _parse(data)
        message = validate.string(doc, "message", required=False) or None
        metadata = validate.string_map(doc, "metadata")
        strategy = merge_strategy(doc)
        allow_empty = validate.boolean(doc, "allow_empty")
        validate.boolean(doc, "force")
        squash = validate.boolean(doc, "squash_merge")
        result = await repo.merge(
            request.params["sourceRef"], into=dest, strategy=strategy, message=message,
            committer=committer(request, doc), metadata=metadata, squash=squash,
        )  # fmt: skip
        if not result.merged and not allow_empty:
            raise NothingToCommitError(f"{repo.name}/{dest}: nothing to merge, no changes")
        return json_response(models.merge_result(result))

    async def find_merge_base(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        rctx = repo.context()
        src = (await refexpr.resolve(rctx, request.params["sourceRef"])).commit_id
        dst = (await refexpr.resolve(rctx, request.params["destinationBranch"])).commit_id
        base = await history.merge_base(rctx, dst, src)
        if base is None:
            from lsmstore.errors import NotFoundError

            raise NotFoundError("the refs share no commit")
        return json_response(
            {"source_commit_id": src, "destination_commit_id": dst, "base_commit_id": base}
        )

    merge_path = BASE + "/{sourceRef}/merge/{destinationBranch}"
    return [
        Route("GET", BASE + "/{leftRef}/diff/{rightRef}", diff_refs, "diffRefs", "read", "refs",
              query=(*DIFF_PARAMS, Param("type", {"type": "string",
                                                  "enum": ["two_dot", "three_dot"]})),
              responses={200: ref("DiffList")}, errors=(400, 404)),
        Route("POST", merge_path, merge, "mergeIntoBranch", "write", "refs",
              body=(("application/json", ref("Merge")),), body_required=False,
              responses={200: ref("MergeResult")}, errors=(400, 404, 409)),
        Route("GET", merge_path, find_merge_base, "findMergeBase", "read", "refs",
              responses={200: ref("FindMergeBaseResult")}, errors=(400, 404)),
    ]  # fmt: skip


async def _parse(data: bytes) -> dict[str, object]:
    import orjson

    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise bad_request(f"malformed JSON body: {e}") from None
    if not isinstance(doc, dict):
        raise bad_request("request body must be a JSON object")
    return doc
