"""A store for the Spark data source's tests: an embedded RefStore in a temporary
directory, repository ``rep`` on a local namespace beside it, and the data-source
options that name them."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import lsmstore
from lsmstore import gc
from lsmstore.gc.retention import Retention
from lsmstore.storage.url import open_object_store


class SparkEnv:
    def __init__(self, tmp: Path, store: lsmstore.Store, defaults: Mapping[str, str]) -> None:
        self.tmp = tmp
        self.store = store
        self.refstore_url = f"local://{tmp / 'refs'}"
        self.ns = (tmp / "ns").as_uri()
        self._defaults = dict(defaults)

    def opts(self, **extra: str) -> dict[str, str]:
        """The data source's options: the RefStore, the file's defaults, ``extra``."""
        return {"refstore": self.refstore_url, **self._defaults, **extra}


@asynccontextmanager
async def spark_env(
    tmp: Path, defaults: Mapping[str, str], **config: Any
) -> AsyncIterator[SparkEnv]:
    """A :class:`SparkEnv` in ``tmp`` (store settings ``config``), closed on exit."""
    async with lsmstore.connect(
        f"local://{tmp / 'refs'}", batch_interval_ms=2, compaction_in_process="off", **config
    ) as store:
        env = SparkEnv(tmp, store, defaults)
        await store.create_repository("rep", storage_namespace=env.ns)
        yield env


#: The grace period of :func:`collect_twice`.
GRACE = 600.0


async def collect_twice(env: SparkEnv) -> None:
    """Two GC runs of ``rep`` a grace period apart (a fake clock): what both find
    unreferenced goes."""
    now = [time.time()]
    objects = open_object_store(env.ns)
    try:
        for _ in range(2):
            await gc.collect_repository(
                env.store.refstore, "rep", objects, Retention(), grace_s=GRACE,
                clock=lambda: now[0],
            )  # fmt: skip
            now[0] += GRACE
    finally:
        await objects.aclose()
