"""Repositories: list, create, get, delete, metadata."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from lsmstore.client import Repository
from lsmstore.config import Config
from lsmstore.namespace import namespace_key, resolve
from lsmstore.objects.addresses import import_source_list
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
API_NAMESPACE_SCHEMES = ("local", "s3", "mem")  # mem:// only when configured


def check_api_namespace(namespace: str, config: Config) -> None:
    """400 unless an API caller may name ``namespace``: ``local://`` or ``s3://`` (its
    ``endpoint_url`` one of ``server_namespace_endpoints``), ``mem://`` only with
    ``server_mem_namespaces = on``, never overlapping one of ``server_import_sources``
    (docs/security.md)."""
    scheme = namespace.split("://", 1)[0].lower()
    if scheme not in API_NAMESPACE_SCHEMES:
        raise bad_request(
            f"storage namespace {namespace!r}: the API accepts local:// or s3:// "
            "namespaces (a file:// path would let a client write anywhere on the server)"
        )
    if scheme == "mem" and config.server_mem_namespaces != "on":
        raise bad_request(
            f"storage namespace {namespace!r}: mem:// namespaces lose their data on restart; "
            "the server accepts them only with server.mem_namespaces = on (tests)"
        )
    key = namespace_key(resolve(namespace, config.home) or namespace)
    for source in import_source_list(config.server_import_sources):
        if namespace_key(resolve(source.rstrip("/"), config.home) or source).overlaps(key):
            raise bad_request(
                f"storage namespace {namespace!r} overlaps {source!r}, a place the server "
                "imports from (server.import_sources): choose another namespace"
            )
    if scheme == "s3":
        endpoints = dict(parse_qsl(urlsplit(namespace).query, keep_blank_values=True))
        endpoint = endpoints.get("endpoint_url")
        listed = config.server_namespace_endpoints.replace(",", " ").split()
        allowed = {e.rstrip("/") for e in listed}
        if endpoint is not None and endpoint.rstrip("/") not in allowed:
            raise bad_request(
                f"storage namespace {namespace!r}: endpoint {endpoint!r} is not one of the "
                "server's configured S3 endpoints (server.namespace_endpoints)"
            )


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
        check_api_namespace(namespace, ctx.config)
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
