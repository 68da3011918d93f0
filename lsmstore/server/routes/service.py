"""Operations routes: health (lakeFS's and the probes), metrics, the OpenAPI document."""

from __future__ import annotations

import asyncio

from lsmstore.errors import ObjectNotFoundError
from lsmstore.namespace import location_of
from lsmstore.server.auth import forbidden
from lsmstore.server.context import Context
from lsmstore.server.http import Request, Response, empty, error_response, json_response
from lsmstore.server.metrics import CONTENT_TYPE
from lsmstore.server.routes.common import principal
from lsmstore.server.routing import Route

#: A dependency check of /readyz gives up after this long.
READY_TIMEOUT_S = 2.0


async def ready_problem(ctx: Context) -> str | None:
    """Why the server is not ready, or None: draining, or the RefStore does not answer."""
    if ctx.draining:
        return "draining"
    try:
        await asyncio.wait_for(ctx.store.refstore.list_repositories(limit=1), READY_TIMEOUT_S)
    except Exception as e:
        return f"refstore: {type(e).__name__}: {e}"
    repos = await ctx.store.refstore.list_repositories(limit=1)
    for info in repos:  # one repository's object store answers
        try:
            objects = ctx.store.objects(location_of(info))
            await asyncio.wait_for(objects.head("_lsm/ready-probe"), READY_TIMEOUT_S)
        except ObjectNotFoundError:
            pass
        except Exception as e:
            return f"object store of {info.name}: {type(e).__name__}: {e}"
    return None


def routes(ctx: Context, openapi: Response) -> list[Route]:
    async def healthcheck(request: Request) -> Response:
        return empty(204)

    async def liveness(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readiness(request: Request) -> Response:
        problem = await ready_problem(ctx)
        if problem is not None:
            return error_response(503, f"not ready: {problem}")
        return json_response({"status": "ready"})

    async def metrics(request: Request) -> Response:
        who = principal(request)
        if who.repositories:  # the labels name every repository and branch
            raise forbidden(who, "read metrics (they name every repository)", None)
        ctx.metrics.collect(ctx.store)
        return Response(200, ctx.metrics.render(), CONTENT_TYPE)

    async def openapi_doc(request: Request) -> Response:
        return openapi

    status = {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string"}},
    }
    return [
        Route("GET", "/api/v1/healthcheck", healthcheck, "healthCheck", None, "healthCheck",
              responses={204: None}),
        Route("GET", "/healthz", liveness, "liveness", None, "healthCheck",
              responses={200: status}),
        Route("GET", "/readyz", readiness, "readiness", None, "healthCheck",
              responses={200: status}, errors=(503,)),
        Route("GET", "/metrics", metrics, "metrics", "read", "healthCheck",
              responses={200: {"type": "string"}}, produces="text/plain"),
        Route("GET", "/api/v1/openapi.json", openapi_doc, "getOpenAPI", None, "healthCheck",
              responses={200: {"type": "object"}}),
    ]  # fmt: skip
