"""``python -m compactor`` / ``lsmstore-compactor``: the compactor worker (docs/compaction.md).

    lsmstore-compactor --refstore redis://127.0.0.1:6379/0            # run until SIGTERM
    lsmstore-compactor --config /etc/lsmstore.toml --once              # one pass (cron)

Flags, log lines, signals and exit codes are those of every lsmstore process
(:mod:`lsmstore.service`, docs/operations.md).  Settings come from the same TOML file
and ``LSMSTORE_*`` variables as the client (:mod:`lsmstore.config`); the flags win.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from compactor.worker import Worker
from lsmstore.compaction.job import StepHook
from lsmstore.config import load_config
from lsmstore.refstore.url import open_refstore
from lsmstore.service import (
    ExitCode,
    Service,
    add_common_flags,
    add_worker_flags,
    log_event,
    run_service,
)

log = logging.getLogger("compactor")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lsmstore-compactor",
        description="Merge L1 into L2 on every branch that needs it, and collect garbage.",
    )
    add_common_flags(p)
    add_worker_flags(p)
    return p


async def body(service: Service, step: StepHook | None = None) -> int:
    args = service.args
    config = load_config(args.refstore, config=args.config)
    refstore = open_refstore(config.refstore_url)
    try:
        worker = Worker(
            refstore,
            config,
            concurrency=args.concurrency,
            interval=args.interval,
            shutdown_timeout=args.shutdown_timeout,
            step=step,
            owner=args.owner,
            readiness=service.readiness,
        )
        service.shutdown.on_request(worker.stop)
        log_event(
            log,
            "configured",
            refstore=refstore.url,
            once=args.once,
            concurrency=worker.concurrency,
            interval=worker.interval,
        )
        return await worker.run(once=args.once)
    finally:
        await refstore.aclose()


def main(argv: Sequence[str] | None = None, *, step: StepHook | None = None) -> int:
    """Run the worker; ``step`` is awaited at each step of every job (crash tests pass
    one through :mod:`lsmstore.testing.pause`)."""

    async def run(service: Service) -> int:
        return await body(service, step)

    return run_service("compactor", parser().parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(ExitCode(main()))
