"""``async with`` for resources that close with ``aclose()`` (the httpx convention):
the block's exit closes the resource whether or not the block raised."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class AsyncCloseable:
    """A mixin: ``__aenter__`` returns the resource, ``__aexit__`` awaits ``aclose()``."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
