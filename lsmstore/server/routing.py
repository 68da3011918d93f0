"""The route table: lakeFS-style path templates matched segment by segment.

A :class:`Route` names its operation (lakeFS's ``operationId``, used for metrics, logs
and the OpenAPI document), the permission it needs (``read``, ``write``, ``admin`` or
None for the open health routes), and what the OpenAPI document says of it.  Matching
is by segment count, then literal segments; a path that matches a template with another
method answers 405, one that matches nothing 404 (lakeFS routes we do not implement
answer 501, see :mod:`lsmstore.server.app`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from lsmstore.server.http import Request, Response

Handler = Callable[[Request], Awaitable[Response]]
Permission = Literal["read", "write", "admin"] | None


@dataclass(frozen=True, slots=True)
class Param:
    """A query parameter as the OpenAPI document shows it."""

    name: str
    schema: dict[str, Any]
    required: bool = False
    description: str = ""


@dataclass(slots=True)
class Route:
    method: str
    template: str  # e.g. "/api/v1/repositories/{repository}"
    handler: Handler
    operation_id: str
    permission: Permission
    tag: str = ""
    summary: str = ""
    query: tuple[Param, ...] = ()
    #: Request body: ``(media type, schema)`` pairs, or empty.
    body: tuple[tuple[str, dict[str, Any]], ...] = ()
    body_required: bool = True
    #: Responses: status -> schema (None: no body); errors are added by openapi.py.
    responses: dict[int, dict[str, Any] | None] = field(default_factory=dict)
    #: Extra (status -> description) error codes this operation can answer.
    errors: tuple[int, ...] = ()
    #: Content type of the success body when not JSON (e.g. "application/octet-stream").
    produces: str = "application/json"
    #: Response headers to document for the success status.
    response_headers: tuple[str, ...] = ()
    #: A write to the branch named by the ``repository`` and ``branch`` parameters that
    #: the branch's owner should batch (:mod:`lsmstore.server.forwarding`).
    forward: bool = False
    segments: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.segments = tuple(self.template.strip("/").split("/"))

    @property
    def path_params(self) -> list[str]:
        return [s[1:-1] for s in self.segments if s.startswith("{")]


Match = tuple[Route | None, dict[str, str], bool]


class Router:
    #: Matches remembered, by method and path (clients repeat the same few paths:
    #: one repository and branch, the stat or upload route); cleared when full.
    CACHE_ENTRIES = 4096
    #: Longer paths are matched each time (the cache stays small).
    CACHE_PATH_CHARS = 512

    def __init__(self) -> None:
        self.routes: list[Route] = []
        self._by_len: dict[int, list[Route]] = {}
        self._cache: dict[tuple[str, str], Match] = {}

    def add(self, route: Route) -> None:
        self.routes.append(route)
        self._by_len.setdefault(len(route.segments), []).append(route)
        self._cache.clear()

    def match(self, method: str, path: str) -> Match:
        """``(route, path params, path known)``; ``path known`` tells 405 from 404.
        HEAD falls back to the GET route of the same path.  The params are the
        caller's own (a copy of a remembered match)."""
        hit = self._cache.get((method, path))
        if hit is None:
            hit = self._match(method, path)
            if len(path) > self.CACHE_PATH_CHARS:
                return hit
            if len(self._cache) >= self.CACHE_ENTRIES:
                self._cache.clear()
            self._cache[(method, path)] = hit
        return hit[0], hit[1].copy(), hit[2]

    def _match(self, method: str, path: str) -> Match:
        segs = path.strip("/").split("/")
        fallback: tuple[Route, dict[str, str]] | None = None
        known = False
        for route in self._by_len.get(len(segs), ()):
            params = _bind(route.segments, segs)
            if params is None:
                continue
            known = True
            if route.method == method:
                return route, params, True
            if method == "HEAD" and route.method == "GET":
                fallback = (route, params)
        if fallback is not None:
            return fallback[0], fallback[1], True
        return None, {}, known


def _bind(template: tuple[str, ...], segs: list[str]) -> dict[str, str] | None:
    params: dict[str, str] = {}
    for tmpl, seg in zip(template, segs, strict=True):
        if tmpl[:1] == "{":
            if not seg:
                return None
            params[tmpl[1:-1]] = seg
        elif tmpl != seg:
            return None
    return params
