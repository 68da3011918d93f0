"""Tasks shared by several waiters (single-flight loads).

A load that many callers await through :func:`asyncio.shield` may end with every
caller gone (cancelled); :func:`retrieve_exception`, as its done callback, marks its
exception retrieved so asyncio does not log "exception was never retrieved" for a
failure nobody was waiting for any more.
"""

from __future__ import annotations

import asyncio
from typing import Any


def retrieve_exception(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
