"""Tags: list, create, get, delete."""

from __future__ import annotations

import functools

from lsmstore.errors import RefNotFoundError
from lsmstore.operations import tags as _tags
from lsmstore.refstore.names import check_ref_name
from lsmstore.server import models, pagination, validate
from lsmstore.server.context import Context
from lsmstore.server.http import Request, Response, empty, json_response
from lsmstore.server.routes.schemas import ref
from lsmstore.server.routing import Route
from lsmstore.versioning import refs as _refs

BASE = "/api/v1/repositories/{repository}/tags"


def routes(ctx: Context) -> list[Route]:
    async def list_tags(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        lister = functools.partial(_refs.list_tags, repo.context())
        return json_response(await pagination.refs_page(request, lister))

    async def create_tag(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        doc = await request.json_object()
        name = validate.string(doc, "id")
        target = validate.string(doc, "ref")
        if validate.boolean(doc, "force"):
            try:
                await _tags.delete(repo, name)
            except RefNotFoundError:
                pass
        commit_id = await _tags.create(repo, name, target)
        return json_response(models.ref(name, commit_id), 201)

    async def get_tag(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["tag"], "tag")
        value = await repo.refstore.get_ref(repo.name, name)
        if value.kind != "tag":
            raise RefNotFoundError(f"{repo.name}: no tag named {name!r}")
        return json_response(models.ref(name, value.base))

    async def delete_tag(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        await _tags.delete(repo, request.params["tag"])
        return empty(204)

    item = BASE + "/{tag}"
    return [
        Route("GET", BASE, list_tags, "listTags", "read", "tags",
              query=pagination.PARAMS, responses={200: ref("RefList")}, errors=(404,)),
        Route("POST", BASE, create_tag, "createTag", "write", "tags",
              body=(("application/json", ref("TagCreation")),),
              responses={201: ref("Ref")}, errors=(400, 404, 409)),
        Route("GET", item, get_tag, "getTag", "read", "tags",
              responses={200: ref("Ref")}, errors=(400, 404)),
        Route("DELETE", item, delete_tag, "deleteTag", "write", "tags",
              responses={204: None}, errors=(400, 404)),
    ]  # fmt: skip
