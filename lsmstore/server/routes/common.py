"""Helpers the route modules share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from lsmstore.errors import InvalidInputError
from lsmstore.server import models
from lsmstore.server.auth import Principal
from lsmstore.server.errors import ApiError, bad_request
from lsmstore.server.http import Request
from lsmstore.server.pagination import PARAMS as PAGE
from lsmstore.server.routes.schemas import STR
from lsmstore.server.routing import Param
from lsmstore.types import STRATEGIES, Change, Strategy
from lsmstore.validate import check_committer

REPO = "repository"
DIFF_PARAMS = (*PAGE, Param("delimiter", STR, description="fold paths into common prefixes"))


def principal(request: Request) -> Principal:
    p: Principal = request.auth
    return p


def committer(request: Request, doc: Mapping[str, Any] | None = None) -> str:
    """Who a commit, merge or revert is recorded as: the authenticated access key id
    (as lakeFS records the authenticated user), or the body's ``committer`` (our
    extension) when the key is an admin's or names itself; another key naming someone
    else is refused with 403 (docs/server.md, "Committer")."""
    p = request.auth
    own = p.access_key_id if isinstance(p, Principal) else "lsmstore"
    asked = doc.get("committer") if doc is not None else None
    if asked is None or asked == own:
        return own
    if not isinstance(asked, str):
        raise bad_request("field 'committer' must be a string")
    try:
        name = check_committer(asked) or own
    except InvalidInputError as e:
        raise bad_request(str(e)) from None
    if isinstance(p, Principal) and not p.allows("admin"):
        raise ApiError(
            403, f"access key {own} may not commit as {asked!r}: only an admin key names "
            "another committer",
        )  # fmt: skip
    return name


def merge_strategy(doc: Mapping[str, Any]) -> Strategy | None:
    """The body's merge ``strategy`` (None, ``source-wins`` or ``dest-wins``), or 400."""
    strategy = doc.get("strategy") or None
    if strategy is not None and strategy not in STRATEGIES:
        raise bad_request(f"unknown merge strategy {strategy!r}")
    return strategy


def diff_start(request: Request) -> bytes:
    """The smallest key a page of a diff can hold (its ``prefix`` or ``after``,
    whichever is larger): the diff starts there (b"" when neither is UTF-8)."""
    try:
        prefix = (request.arg("prefix", "") or "").encode()
        after = (request.arg("after", "") or "").encode()
    except UnicodeEncodeError:
        return b""
    return max(prefix, after)


async def diff_page(
    changes: AsyncIterator[Change], request: Request, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit + 1`` lakeFS Diff entries of ``changes`` (in path order), after the
    request's ``after``, under its ``prefix``, folded on its ``delimiter``.  Raw keys that
    are not UTF-8 name no path and are left out, as object listings leave them out."""
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
                if common == last_prefix or common <= after or not _is_text(common):
                    continue
                last_prefix = common
                out.append(models.diff_prefix(common))
                if len(out) > limit:
                    break
                continue
        if path <= after or not _is_text(path):
            continue
        out.append(models.diff(change))
        if len(out) > limit:
            break
    return out


def _is_text(path: str) -> bool:
    """Whether ``path`` (decoded with ``surrogateescape``) was valid UTF-8."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
