"""``python -m compactor`` / ``lsmstore-compactor``: the compactor worker (docs/compaction.md).

    lsmstore-compactor --refstore redis://127.0.0.1:6379/0            # run until SIGTERM
    lsmstore-compactor --config /etc/lsmstore.toml --once              # one pass (cron)

Settings come from the same TOML file and ``LSMSTORE_*`` variables as the client
(:mod:`lsmstore.config`); the flags win.  Exit status: 0 (also after SIGTERM/SIGINT),
1 when ``--once`` saw a job or sweep fail, 2 for bad arguments or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

import uvloop

from compactor.worker import Worker, pause_hook_from_env, setup_logging
from lsmstore.config import load_config
from lsmstore.errors import InvalidInputError
from lsmstore.refstore.url import open_refstore

log = logging.getLogger("compactor")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="lsmstore-compactor",
        description="Merge L1 into L2 on every branch that needs it, and collect garbage.",
    )
    p.add_argument("--refstore", help="RefStore URL (default: the configured one)")
    p.add_argument("--config", help="TOML configuration file (default: $LSMSTORE_CONFIG)")
    p.add_argument("--once", action="store_true", help="one pass over every branch, then exit")
    p.add_argument("--concurrency", type=int, help="branches compacted at once")
    p.add_argument("--interval", type=float, help="seconds between passes")
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="on SIGTERM, seconds running jobs get to finish before they are abandoned",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = p.parse_args(argv)
    if args.concurrency is not None and args.concurrency < 1:
        p.error("--concurrency must be >= 1")
    if args.interval is not None and not args.interval > 0:
        p.error("--interval must be > 0")
    return args


async def amain(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.refstore, config=args.config)
        refstore = open_refstore(config.refstore_url)
    except InvalidInputError as e:
        log.error("%s", e, extra={"fields": {"event": "config_error", "error": str(e)}})
        return 2
    worker = Worker(
        refstore,
        config,
        concurrency=args.concurrency,
        interval=args.interval,
        shutdown_timeout=args.shutdown_timeout,
        step=pause_hook_from_env(),
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    log.info(
        "started",
        extra={
            "fields": {
                "event": "started",
                "refstore": refstore.url,
                "once": args.once,
                "concurrency": worker.concurrency,
                "interval": worker.interval,
            }
        },
    )
    try:
        return await worker.run(once=args.once)
    except Exception as e:  # a bug or an unexpected failure: one JSON line, status 1
        log.exception("%s", e, extra={"fields": {"event": "crashed", "error": repr(e)}})
        return 1
    finally:
        await refstore.aclose()
        log.info("exited", extra={"fields": {"event": "exited"}})


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(args.log_level)
    return uvloop.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
