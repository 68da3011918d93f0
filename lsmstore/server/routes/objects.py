"""Objects: upload, read, stat, list, delete, copy (over ``lsmstore.objects``)."""

from __future__ import annotations

from lsmstore.server.context import Context
from lsmstore.server.routing import Route


def routes(ctx: Context) -> list[Route]:
    return []
