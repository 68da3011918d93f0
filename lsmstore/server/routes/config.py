"""Server configuration as lakeFS clients read it, lakectl's statistics, and who am I."""

from __future__ import annotations

from lsmstore.server import models, validate
from lsmstore.server.context import Context
from lsmstore.server.http import Request, Response, empty, json_response
from lsmstore.server.routes.common import principal
from lsmstore.server.routes.schemas import ref
from lsmstore.server.routing import Route
from lsmstore.server.throttle import client_address


def routes(ctx: Context) -> list[Route]:
    async def get_config(request: Request) -> Response:
        return json_response(models.config(ctx.config))

    async def get_version(request: Request) -> Response:
        return json_response(models.config(ctx.config)["version_config"])

    async def get_storage(request: Request) -> Response:
        return json_response(models.storage_config(ctx.config))

    async def post_stats(request: Request) -> Response:
        doc = await request.json_object()
        events = doc.get("events")
        if not isinstance(events, list):
            from lsmstore.server.errors import bad_request

            raise bad_request("field 'events' must be a list")
        return empty(204)

    async def current_user(request: Request) -> Response:
        p = principal(request)
        return json_response(
            {"user": {"id": p.user_id, "creation_date": p.created_at,
                      "friendly_name": f"{p.user_id} ({p.role})"}}
        )  # fmt: skip

    async def login(request: Request) -> Response:
        doc = await request.json_object()
        key_id = validate.string(doc, "access_key_id")
        secret = validate.string(doc, "secret_access_key")
        who = await ctx.auth.login(key_id, secret, client_address(request.scope))
        token, exp = await ctx.auth.issue_token(who)
        return json_response({"token": token, "token_expiration": exp})

    user = {"type": "object", "required": ["user"], "properties": {"user": ref("User")}}
    return [
        Route("GET", "/api/v1/config", get_config, "getConfig", "read", "config",
              responses={200: ref("Config")}),
        Route("GET", "/api/v1/config/version", get_version, "getLakeFSVersion", "read", "config",
              responses={200: ref("VersionConfig")}),
        Route("GET", "/api/v1/config/storage", get_storage, "getStorageConfig", "read", "config",
              responses={200: ref("StorageConfig")}),
        Route("POST", "/api/v1/statistics", post_stats, "postStatsEvents", "read", "statistics",
              body=(("application/json", ref("StatsEventsList")),), responses={204: None},
              errors=(400,)),
        Route("GET", "/api/v1/user", current_user, "getCurrentUser", "read", "auth",
              responses={200: user}),
        Route("POST", "/api/v1/auth/login", login, "login", None, "auth",
              body=(("application/json", ref("LoginInformation")),),
              responses={200: ref("AuthenticationToken")}, errors=(400, 401, 429)),
    ]  # fmt: skip
