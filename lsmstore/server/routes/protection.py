"""Branch protection rules (lakeFS's ``getBranchProtectionRules`` /
``setBranchProtectionRules``): the repository's rules as a list of
``{"pattern"}`` with their ETag, replaced whole with ``If-Match``; each call one
operation of :mod:`lsmstore.operations.protection`."""

from __future__ import annotations

from typing import Any

from lsmstore.operations import protection as _protection
from lsmstore.server.context import Context
from lsmstore.server.errors import bad_request
from lsmstore.server.http import Request, Response, json_response
from lsmstore.server.routes.schemas import ref
from lsmstore.server.routing import Route

PATH = "/api/v1/repositories/{repository}/settings/branch_protection"


def _patterns(doc: Any) -> list[str]:
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise bad_request('body must be a list of branch protection rules {"pattern"}')
    out = []
    for r in doc:
        p = r.get("pattern")
        if not isinstance(p, str):
            raise bad_request("a branch protection rule needs a string 'pattern'")
        out.append(p)
    return out


def routes(ctx: Context) -> list[Route]:
    async def get_rules(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        rules = await _protection.get_rules(repo)
        return json_response(
            [{"pattern": p} for p in rules.patterns], headers={"ETag": f'"{rules.etag}"'}
        )

    async def set_rules(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        patterns = _patterns(await request.json())
        rules = await _protection.set_rules(
            repo, patterns, if_match=request.headers.get("if-match")
        )
        return Response(204, b"", None, {"ETag": f'"{rules.etag}"'})

    return [
        Route("GET", PATH, get_rules, "getBranchProtectionRules", "read", "repositories",
              responses={200: {"type": "array", "items": ref("BranchProtectionRule")}},
              response_headers=("ETag",), errors=(404,)),
        Route("PUT", PATH, set_rules, "setBranchProtectionRules", "admin", "repositories",
              body=(("application/json",
                     {"type": "array", "items": ref("BranchProtectionRule")}),),
              responses={204: None}, response_headers=("ETag",), errors=(400, 404, 412)),
    ]  # fmt: skip
