"""lakeFS pagination (docs/server.md, "The lakeFS API subset").

Query ``after`` (exclusive), ``amount`` (absent or <= 0: 100; capped at 1000),
``prefix``.  The response's ``pagination`` always has all four fields:
``next_offset`` is the last returned item's key when ``has_more``, else ``""`` (never
null), and ``max_per_page`` is always 1000.  Handlers fetch ``amount + 1`` items and
let :func:`page` trim.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

from lsmstore.server import models
from lsmstore.server.http import Request
from lsmstore.server.routing import Param

T = TypeVar("T")


class _Named(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def commit_id(self) -> str: ...


N = TypeVar("N", bound=_Named)

DEFAULT_AMOUNT = 100
MAX_PER_PAGE = 1000

PARAMS = (
    Param("prefix", {"type": "string"}, description="return items prefixed with this value"),
    Param("after", {"type": "string"}, description="return items after this value"),
    Param(
        "amount",
        {"type": "integer", "minimum": -1, "maximum": 1000, "default": 100},
        description="how many items to return",
    ),
)


def amount(request: Request) -> int:
    n = request.int_arg("amount", DEFAULT_AMOUNT)
    if n <= 0:
        return DEFAULT_AMOUNT
    return min(n, MAX_PER_PAGE)


def page(
    items: list[T], limit: int, key: Callable[[T], str], render: Callable[[T], Any]
) -> dict[str, Any]:
    """The lakeFS list body of ``items`` (fetched as ``limit + 1`` to learn has_more)."""
    has_more = len(items) > limit
    if has_more:
        items = items[:limit]
    return {
        "pagination": {
            "has_more": has_more,
            "next_offset": key(items[-1]) if has_more and items else "",
            "results": len(items),
            "max_per_page": MAX_PER_PAGE,
        },
        "results": [render(i) for i in items],
    }


async def refs_page(request: Request, lister: Callable[..., AsyncIterator[N]]) -> dict[str, Any]:
    """The lakeFS list body of branches or tags: ``lister(prefix=, after=, limit=)``
    yields them in name order; each is rendered as a lakeFS ``Ref``."""
    limit = amount(request)
    found = [
        r
        async for r in lister(
            prefix=request.arg("prefix", "") or "",
            after=request.arg("after", "") or None,
            limit=limit + 1,
        )
    ]
    return page(found, limit, lambda r: r.name, lambda r: models.ref(r.name, r.commit_id))
