"""``python -m committer`` / ``lsmstore-committer``: run the committer worker.

::

    lsmstore-committer [common flags] [--once] [--interval SECONDS] [--concurrency N]
                       [--owner NAME] [--force] [--repository NAME ...]

Flags, log lines, signals and exit codes are those of every lsmstore process
(:mod:`lsmstore.service`, docs/operations.md).  Settings come from
:mod:`lsmstore.config` (``commit_*``; file, ``LSMSTORE_*`` variables); the flags
override them.

Crash tests run it through :mod:`lsmstore.testing.pause`, which passes hooks to
:func:`main` that pause a commit at a named step.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence

from committer.worker import Worker
from lsmstore.cache import FileCache
from lsmstore.config import load_config
from lsmstore.refstore.url import open_refstore
from lsmstore.service import (
    ExitCode,
    Service,
    add_common_flags,
    add_worker_flags,
    run_service,
)
from lsmstore.storage.base import ObjectStore

#: Awaited with the step's name at each step of a commit.
StepHook = Callable[[str], Awaitable[None]]

log = logging.getLogger("committer")


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


async def body(
    service: Service,
    on_step: StepHook | None = None,
    wrap_objects: Callable[[ObjectStore], ObjectStore] | None = None,
) -> int:
    args = service.args
    overrides = {} if args.concurrency is None else {"commit_concurrency": args.concurrency}
    config = load_config(args.refstore, config=args.config, **overrides)
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
        on_step=on_step,
        wrap_objects=wrap_objects,
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


def main(
    argv: Sequence[str] | None = None,
    *,
    on_step: StepHook | None = None,
    wrap_objects: Callable[[ObjectStore], ObjectStore] | None = None,
) -> int:
    """Run the worker.  ``on_step`` is awaited at each step of every commit and
    ``wrap_objects`` wraps each repository's object store (crash tests pass both through
    :mod:`lsmstore.testing.pause`)."""

    async def run(service: Service) -> int:
        return await body(service, on_step, wrap_objects)

    return run_service("committer", parser().parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(ExitCode(main()))
