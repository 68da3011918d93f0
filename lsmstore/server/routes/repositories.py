"""Repositories: list, create, get, delete, metadata."""

from __future__ import annotations

from lsmstore.client import Repository
from lsmstore.server import models, pagination, validate
from lsmstore.server.auth import forbidden
from lsmstore.server.context import Context
from lsmstore.server.errors import bad_request
from lsmstore.server.http import Request, Response, empty, json_response
from lsmstore.server.routes.common import principal
from lsmstore.server.routes.schemas import BOOL, ref
from lsmstore.server.routing import Param, Route

BASE = "/api/v1/repositories"
#: Namespace schemes a client may name (``file://`` is for the library only).
API_NAMESPACE_SCHEMES = ("local", "s3", "mem")


def routes(ctx: Context) -> list[Route]:
    store = ctx.store

    async def list_repositories(request: Request) -> Response:
        limit = pagination.amount(request)
        prefix = request.arg("prefix", "") or ""
        after = request.arg("after", "") or None
        if prefix and (after is None or after < prefix):
            after = prefix[:-1] or None  # names > prefix[:-1] include every match
        who = principal(request)
        found: list[Repository] = []
        while len(found) <= limit:
            page = await store.list_repositories(after=after, limit=1000)
            for repo in page:
                if prefix and not repo.name.startswith(prefix):
                    if repo.name > prefix:
                        page = []
                        break
                    continue
                if who.sees(repo.name):
                    found.append(repo)
            if len(page) < 1000:
                break
            after = page[-1].name
        body = pagination.page(found, limit, lambda r: r.name, models.repository)
        return json_response(body)

    async def create_repository(request: Request) -> Response:
        doc = await request.json_object()
        name = validate.string(doc, "name")
        who = principal(request)
        if not who.allows("admin", name):  # before anything tells whether it exists
            raise forbidden(who, "create repositories", name)
        namespace = validate.string(doc, "storage_namespace")
        default_branch = validate.string(doc, "default_branch", required=False, default="main")
        if namespace.split("://", 1)[0].lower() not in API_NAMESPACE_SCHEMES:
            raise bad_request(
                f"storage namespace {namespace!r}: the API accepts local://, s3:// or mem:// "
                "namespaces (a file:// path would let a client write anywhere on the server)"
            )
        validate.boolean(doc, "sample_data")
        validate.boolean(doc, "read_only")
        repo = await store.create_repository(
            name, storage_namespace=namespace, default_branch=default_branch or "main"
        )
        ctx.forget_repository(name)
        return json_response(models.repository(repo), 201)

    async def get_repository(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        return json_response(models.repository(repo))

    async def delete_repository(request: Request) -> Response:
        name = request.params["repository"]
        await ctx.repository(name)  # 404 before anything else
        await store.delete_repository(name)
        ctx.forget_repository(name)
        return empty(204)

    async def get_metadata(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        return json_response(dict(repo.info.metadata))

    item = BASE + "/{repository}"
    return [
        Route("GET", BASE, list_repositories, "listRepositories", "read", "repositories",
              query=pagination.PARAMS, responses={200: ref("RepositoryList")}),
        Route("POST", BASE, create_repository, "createRepository", "admin", "repositories",
              query=(Param("bare", BOOL),),
              body=(("application/json", ref("RepositoryCreation")),),
              responses={201: ref("Repository")}, errors=(400, 409)),
        Route("GET", item, get_repository, "getRepository", "read", "repositories",
              responses={200: ref("Repository")}, errors=(404,)),
        Route("DELETE", item, delete_repository, "deleteRepository", "admin", "repositories",
              query=(Param("force", BOOL),), responses={204: None}, errors=(404,)),
        Route("GET", item + "/metadata", get_metadata, "getRepositoryMetadata", "read",
              "repositories", responses={200: ref("RepositoryMetadata")}, errors=(404,)),
    ]  # fmt: skip
