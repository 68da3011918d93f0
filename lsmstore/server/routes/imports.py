"""Imports (lakeFS's ``importStart`` / ``importStatus`` / ``importCancel``): each call
one operation of :mod:`lsmstore.operations.imports`; the import runs in this daemon's
background, its state in the RefStore (any daemon answers status and cancel)."""

from __future__ import annotations

import datetime
from typing import Any

from lsmstore.refstore.names import check_ref_name
from lsmstore.server import models, validate
from lsmstore.server.context import Context
from lsmstore.server.errors import bad_request
from lsmstore.server.http import Request, Response, empty, json_response
from lsmstore.server.routes.common import committer
from lsmstore.server.routes.schemas import STR, ref
from lsmstore.server.routing import Param, Route
from lsmstore.types import ImportPath, ImportStatus

PATH = "/api/v1/repositories/{repository}/branches/{branch}/import"
ID = (Param("id", STR, required=True, description="the import's id"),)


def _paths(doc: dict[str, Any]) -> list[ImportPath]:
    items = doc.get("paths")
    if not isinstance(items, list) or not all(isinstance(p, dict) for p in items):
        raise bad_request("field 'paths' must be a list of {type, path, destination}")
    return [
        ImportPath(
            validate.string(p, "path"),
            validate.string(p, "destination", required=False),
            validate.string(p, "type"),
        )
        for p in items
    ]


def status_model(s: ImportStatus) -> dict[str, Any]:
    """lakeFS's ``ImportStatus``."""
    when = datetime.datetime.fromtimestamp(s.update_time, datetime.UTC)
    out: dict[str, Any] = {
        "completed": s.completed,
        "update_time": when.isoformat().replace("+00:00", "Z"),
        "ingested_objects": s.ingested_objects,
    }
    if s.metarange_id is not None:
        out["metarange_id"] = s.metarange_id
    if s.commit is not None and s.commit_id is not None:
        out["commit"] = models.commit(s.commit_id, s.commit)
    if s.error is not None:
        out["error"] = {"message": s.error}
    return out


def routes(ctx: Context) -> list[Route]:
    async def start(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        branch = repo.branch(check_ref_name(request.params["branch"]))
        doc = await request.json_object()
        commit = doc.get("commit")
        if not isinstance(commit, dict):
            raise bad_request("field 'commit' must be an object {message, metadata}")
        validate.boolean(doc, "force")
        import_id = await branch.import_start(
            _paths(doc),
            validate.string(commit, "message"),
            metadata=validate.string_map(commit, "metadata"),
            committer=committer(request, commit),
        )
        return json_response({"id": import_id}, 202)

    async def status(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        branch = repo.branch(check_ref_name(request.params["branch"]))
        s = await branch.import_status(request.required_arg("id"))
        return json_response(status_model(s))

    async def cancel(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        branch = repo.branch(check_ref_name(request.params["branch"]))
        await branch.import_cancel(request.required_arg("id"))
        return empty(204)

    return [
        Route("POST", PATH, start, "importStart", "write", "import",
              body=(("application/json", ref("ImportCreation")),),
              responses={202: ref("ImportCreationResponse")}, errors=(400, 403, 404)),
        Route("GET", PATH, status, "importStatus", "read", "import",
              query=ID, responses={200: ref("ImportStatus")}, errors=(400, 404)),
        Route("DELETE", PATH, cancel, "importCancel", "write", "import",
              query=ID, responses={204: None}, errors=(400, 404, 409)),
    ]  # fmt: skip
