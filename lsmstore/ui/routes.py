"""The two API extensions the web UI reads, under ``/api/v1/lsm`` and with the same
authentication and permissions as every other route (any client may call them):

- ``GET /api/v1/lsm/user``: the calling key's id, role and the repositories it is
  limited to, so that a page offers only what the key may do;
- ``GET /api/v1/lsm/repositories/{repository}/refs/{ref}/preview?path=&rows=``: the
  first rows of an object (:mod:`lsmstore.ui.preview`).
"""

from __future__ import annotations

from lsmstore.server.context import Context
from lsmstore.server.errors import bad_request
from lsmstore.server.http import Request, Response, json_response
from lsmstore.server.routes.common import principal
from lsmstore.server.routes.schemas import INT, STR, obj
from lsmstore.server.routing import Param, Route
from lsmstore.ui import preview

_STRS = {"type": "array", "items": STR}
KEY_INFO = obj({"access_key_id": STR, "role": {"type": "string", "enum": ["admin", "writer",
                "reader"]}, "repositories": _STRS})  # fmt: skip
PREVIEW = obj(
    {
        "format": {"type": "string", "enum": ["parquet", "csv", "text", "binary"]},
        "size_bytes": INT,
        "columns": _STRS,
        "rows": {"type": "array", "items": {"type": "array", "items": {}}},
        "text": STR,
        "truncated": {"type": "boolean"},
    },
    {"total_rows": INT, "row_groups": INT, "schema": _STRS},
)
PATH = Param("path", {"type": "string", "minLength": 1}, required=True,
             description="relative to the ref")  # fmt: skip
ROWS = Param("rows", {"type": "integer", "minimum": 1, "maximum": preview.MAX_ROWS},
             description=f"rows to return (default {preview.DEFAULT_ROWS})")  # fmt: skip


def routes(ctx: Context) -> list[Route]:
    async def current_key(request: Request) -> Response:
        p = principal(request)
        return json_response(
            {"access_key_id": p.access_key_id, "role": p.role,
             "repositories": list(p.repositories)}
        )  # fmt: skip

    async def object_preview(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        path = request.required_arg("path")
        if len(path.encode("utf-8", "surrogatepass")) > ctx.config.server_max_path_bytes:
            raise bad_request(f"path longer than {ctx.config.server_max_path_bytes} bytes")
        rows = request.int_arg("rows", preview.DEFAULT_ROWS)
        reader = await repo.ref(request.params["ref"]).open(path)
        try:
            found = await preview.preview(reader, rows)
        finally:
            await reader.aclose()
        return json_response(found.json())

    return [
        Route("GET", "/api/v1/lsm/user", current_key, "lsmCurrentKey", "read", "lsm",
              summary="the calling key: id, role, repositories",
              responses={200: KEY_INFO}),
        Route("GET", "/api/v1/lsm/repositories/{repository}/refs/{ref}/preview",
              object_preview, "lsmPreviewObject", "read", "lsm",
              summary="the first rows of a text, CSV or Parquet object",
              query=(PATH, ROWS), responses={200: PREVIEW}, errors=(400, 404)),
    ]  # fmt: skip
