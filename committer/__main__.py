"""``python -m committer`` / ``lsmstore-committer``: run the committer worker.

::

    lsmstore-committer [common flags] [--once] [--interval SECONDS] [--concurrency N]
                       [--owner NAME] [--force] [--repository NAME ...]

Flags, log lines, signals and exit codes are those of every lsmstore process
(:mod:`lsmstore.service`, docs/operations.md).  Settings come from
:mod:`lsmstore.config` (``commit_*``; file, ``LSMSTORE_*`` variables); the flags
override them.

For crash tests, ``COMMITTER_PAUSE_AT=<step>`` makes the worker log
``{"event": "paused", "step": ...}`` and wait forever when a commit reaches ``step``:
``range-uploaded`` (the first new range is stored, the metarange not yet) or one of
the job's steps (``staged-read``, ``tree-written``, ``commit-written``, ``swapped``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence

from lsmstore.commit.job import STEPS
from committer.worker import Worker
from lsmstore import layout
from lsmstore.cache import FileCache
from lsmstore.config import load_config
from lsmstore.errors import InvalidInputError
from lsmstore.refstore.url import open_refstore
from lsmstore.service import (
    ExitCode,
    Service,
    add_common_flags,
    add_worker_flags,
    log_event,
    run_service,
)
from lsmstore.storage.base import ForwardingStore, ObjectStore, PutMode

PAUSE_ENV = "COMMITTER_PAUSE_AT"
PAUSE_STEPS = ("range-uploaded", *STEPS)

log = logging.getLogger("committer")


class _PauseAfterRangeUpload(ForwardingStore):
    """Passes everything to ``inner``; after the first committed range is stored, calls
    ``pause`` (used only for crash tests)."""

    def __init__(self, inner: ObjectStore, pause: Callable[[], Awaitable[None]]) -> None:
        super().__init__(inner)
        self._pause = pause

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        await self.inner.put(key, data, mode)
        if key.startswith(layout.RANGES):
            await self._pause()


async def _pause_forever(step: str) -> None:
    log_event(log, "paused", level=logging.WARNING, step=step, pid=os.getpid())
    for h in logging.getLogger().handlers:
        h.flush()
    await asyncio.Event().wait()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lsmstore-committer", description="Commit branches' staged changes by policy."
    )
    add_common_flags(p)
    add_worker_flags(p)
    g = p.add_argument_group("committer")
    g.add_argument("--force", action="store_true", help="commit every branch with staged changes")
    g.add_argument(
        "--repository", action="append", default=[], help="only this repository (repeatable)"
    )
    return p


async def body(service: Service) -> int:
    args = service.args
    overrides = {} if args.concurrency is None else {"commit_concurrency": args.concurrency}
    config = load_config(args.refstore, config=args.config, **overrides)
    pause_at = os.environ.get(PAUSE_ENV, "")
    if pause_at and pause_at not in PAUSE_STEPS:
        raise InvalidInputError(f"{PAUSE_ENV}={pause_at!r}: expected one of {PAUSE_STEPS}")

    async def on_step(step: str) -> None:
        if step == pause_at:
            await _pause_forever(step)

    def wrap(store: ObjectStore) -> ObjectStore:
        return _PauseAfterRangeUpload(store, lambda: _pause_forever("range-uploaded"))

    refstore = open_refstore(config.refstore_url)
    # Ranges and metaranges a commit reads stay in RAM for the next commits (no disk tier:
    # a worker is stateless).
    files = FileCache(ram_bytes=config.cache_ram_bytes, disk_dir=None, disk_bytes=0)
    worker = Worker(
        refstore,
        config,
        repositories=args.repository,
        force=args.force,
        owner=args.owner,
        files=files,
        on_step=on_step if pause_at else None,
        wrap_objects=wrap if pause_at == "range-uploaded" else None,
        shutdown_timeout_s=args.shutdown_timeout,
        interval_s=args.interval,
        readiness=service.readiness,
    )
    service.shutdown.on_request(worker.stop)
    try:
        return await worker.run(once=args.once)
    finally:
        await worker.aclose()
        await files.aclose()
        await refstore.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    return run_service("committer", parser().parse_args(argv), body)


if __name__ == "__main__":
    sys.exit(ExitCode(main()))
