"""The OpenAPI 3 document of exactly the routes this server implements.

Built from the route table (:mod:`lsmstore.server.routing`) and the lakeFS model
schemas (:mod:`lsmstore.server.routes.schemas`), served at ``/api/v1/openapi.json``.
Every secured operation documents 401 and 403; every operation documents its error
statuses with lakeFS's ``Error`` body.
"""

from __future__ import annotations

from typing import Any

from lsmstore.server.routes.schemas import COMPONENTS, ref
from lsmstore.server.routing import Route

_DESCRIPTIONS = {
    200: "OK", 201: "Created", 204: "No Content", 206: "Partial Content", 304: "Not Modified",
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
    412: "Precondition Failed", 413: "Payload Too Large", 416: "Range Not Satisfiable",
    429: "Too Many Requests", 501: "Not Implemented", 503: "Service Unavailable",
}  # fmt: skip

#: Answers any operation may give: a malformed request, a too-large body, a
#: backend outage or a slow client.
_COMMON_ERRORS = (400, 408, 413, 503)


def _error(status: int) -> dict[str, Any]:
    return {
        "description": _DESCRIPTIONS.get(status, "Error"),
        "content": {"application/json": {"schema": ref("Error")}},
    }


def operation(route: Route) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"name": n, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
        for n in route.path_params
    ]
    for q in route.query:
        p: dict[str, Any] = {"name": q.name, "in": "query", "required": q.required,
                             "schema": q.schema}  # fmt: skip
        if q.description:
            p["description"] = q.description
        if q.schema.get("type") == "array":
            p["style"], p["explode"] = "form", True
        params.append(p)
    op: dict[str, Any] = {"operationId": route.operation_id, "parameters": params}
    if route.tag:
        op["tags"] = [route.tag]
    if route.summary:
        op["summary"] = route.summary
    if route.body:
        op["requestBody"] = {
            "required": route.body_required,
            "content": {media: {"schema": schema} for media, schema in route.body},
        }
    responses: dict[str, Any] = {}
    for status, schema in route.responses.items():
        r: dict[str, Any] = {"description": _DESCRIPTIONS.get(status, "OK")}
        if schema is not None and route.method != "HEAD":
            r["content"] = {route.produces: {"schema": schema}}
        if route.response_headers:
            r["headers"] = {h: {"schema": {"type": "string"}} for h in route.response_headers}
        responses[str(status)] = r
    errors = set(route.errors) | set(_COMMON_ERRORS)
    if route.permission is not None:  # 429: too many failed authentications
        errors |= {401, 403, 429}
    for status in sorted(errors):
        if route.method == "HEAD":
            responses[str(status)] = {"description": _DESCRIPTIONS.get(status, "Error")}
        else:
            responses[str(status)] = _error(status)
    op["responses"] = responses
    if route.permission is None:
        op["security"] = []
    else:
        op["x-lsmstore-permission"] = route.permission
    return op


def document(routes: list[Route], version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.template, {})[route.method.lower()] = operation(route)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "lsmstore",
            "description": "The lakeFS REST API v1 subset lsmstore serves, and its own "
            "extensions under /api/v1/lsm (docs/server.md).",
            "version": version,
        },
        "servers": [{"url": "/"}],
        "security": [{"basic_auth": []}, {"jwt_token": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "basic_auth": {"type": "http", "scheme": "basic"},
                "jwt_token": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            },
            "schemas": COMPONENTS,
        },
    }
