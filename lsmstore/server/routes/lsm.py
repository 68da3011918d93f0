"""lsmstore's extensions under ``/api/v1/lsm`` (docs/server.md)."""

from __future__ import annotations

from lsmstore.server.context import Context
from lsmstore.server.routing import Route


def routes(ctx: Context) -> list[Route]:
    return []
