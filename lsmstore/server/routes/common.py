"""Helpers the route modules share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from lsmstore.graveler.diff import Change
from lsmstore.server import models
from lsmstore.server.auth import Principal
from lsmstore.server.http import Request
from lsmstore.server.pagination import PARAMS as PAGE
from lsmstore.server.routes.schemas import STR
from lsmstore.server.routing import Param

REPO = "repository"
DIFF_PARAMS = (*PAGE, Param("delimiter", STR, description="fold paths into common prefixes"))


def principal(request: Request) -> Principal:
    p: Principal = request.auth
    return p


def committer(request: Request) -> str:
    p = request.auth
    return p.access_key_id if isinstance(p, Principal) else "lsmstore"


async def diff_page(
    changes: AsyncIterator[Change], request: Request, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit + 1`` lakeFS Diff entries of ``changes`` (in path order), after the
    request's ``after``, under its ``prefix``, folded on its ``delimiter``."""
    prefix = request.arg("prefix", "") or ""
    after = request.arg("after", "") or ""
    delimiter = request.arg("delimiter", "") or ""
    out: list[dict[str, Any]] = []
    last_prefix: str | None = None
    async for change in changes:
        path = change.key.decode("utf-8", "surrogateescape")
        if not path.startswith(prefix):
            if path > prefix:
                break
            continue
        if delimiter:
            cut = path.find(delimiter, len(prefix))
            if cut >= 0:
                common = path[: cut + len(delimiter)]
                if common == last_prefix or common <= after:
                    continue
                last_prefix = common
                out.append(models.diff_prefix(common))
                if len(out) > limit:
                    break
                continue
        if path <= after:
            continue
        out.append(models.diff(change))
        if len(out) > limit:
            break
    return out
