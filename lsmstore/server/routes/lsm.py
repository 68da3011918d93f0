"""lsmstore's extensions under ``/api/v1/lsm`` (docs/server.md): batch writes, staging
a prepared SST, reset, revert with its full result, a branch's staging state, and raw
key/value reads (:mod:`lsmstore.server.routes.kv`)."""

from __future__ import annotations

from lsmstore.errors import EntryTooLargeError
from lsmstore.refstore.names import check_ref_name
from lsmstore.server import batch, models
from lsmstore.server.context import Context
from lsmstore.server.errors import ApiError
from lsmstore.server.http import Request, Response, json_response
from lsmstore.server.routes import kv
from lsmstore.server.routes.branches import revert_request
from lsmstore.server.routes.schemas import ref
from lsmstore.server.routing import Route
from lsmstore.versioning.refs import get_branch

BASE = "/api/v1/lsm/repositories/{repository}/branches/{branch}"
_OCTETS = {"type": "string", "format": "binary"}


def routes(ctx: Context) -> list[Route]:
    async def staging_state(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        rctx = repo.context()
        value = await get_branch(rctx, name)
        commit = await rctx.commit(value.base) if value.base else None
        return json_response(models.staging_state(name, value, commit))

    async def reset(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        value = await repo.branch(name).reset()
        return json_response(models.staging_state(name, value))

    async def revert(request: Request) -> Response:
        return json_response(models.merge_result(await revert_request(ctx, request)))

    async def stage_sst(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        await get_branch(repo.context(), name)
        data = await request.body()
        ctx.metrics.writes_in_flight.inc()
        try:
            file_id = await repo.branch(name).stage_sst(data)
        except EntryTooLargeError as e:  # a record or the decoded whole over its bound
            raise ApiError(413, str(e), kind=type(e).__name__) from None
        finally:
            ctx.metrics.writes_in_flight.dec()
        return json_response({"file_id": file_id}, 201)

    return [
        Route("GET", BASE + "/staging", staging_state, "lsmStagingState", "read", "lsm",
              responses={200: ref("StagingState")}, errors=(404,)),
        Route("POST", BASE + "/reset", reset, "lsmResetBranch", "write", "lsm",
              summary="drop the branch's staged changes; its staging state after",
              responses={200: ref("StagingState")}, errors=(400, 404, 409)),
        Route("POST", BASE + "/revert", revert, "lsmRevertBranch", "write", "lsm",
              summary="lakeFS's revertBranch, answering the revert's MergeResult",
              body=(("application/json", ref("RevertCreation")),),
              responses={200: ref("MergeResult")}, errors=(400, 404, 409)),
        Route("POST", BASE + "/sst", stage_sst, "lsmStageSST", "write", "lsm",
              body=(("application/octet-stream", _OCTETS),),
              responses={201: ref("StagedSST")}, errors=(404,)),
        *batch.routes(ctx, BASE + "/batch"),
        *kv.routes(ctx),
    ]  # fmt: skip
