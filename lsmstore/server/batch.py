"""The batch write endpoint (docs/server.md, "Batch write"): filled in over the
object layer's entries."""

from __future__ import annotations

from lsmstore.server.context import Context
from lsmstore.server.routing import Route


def routes(ctx: Context, path: str) -> list[Route]:
    return []
