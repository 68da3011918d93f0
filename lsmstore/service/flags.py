"""The command-line flags every lsmstore process shares (docs/operations.md).

``add_common_flags`` (server, compactor, committer): ``--config``, ``--refstore``,
``--log-level``, ``--log-format``, ``--shutdown-timeout``, ``--health-host``,
``--health-port``, ``--status-file``.  ``add_worker_flags`` (compactor, committer):
``--once``, ``--interval``, ``--concurrency``, ``--owner``.  Flags win over the
configuration file and ``LSMSTORE_*`` variables (:mod:`lsmstore.config`).
"""

from __future__ import annotations

import argparse

from lsmstore.service.logs import LOG_FORMATS, LOG_LEVELS

DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 1")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a port is 0..65535")
    return value


def add_common_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("common to every lsmstore process")
    g.add_argument("--config", help="TOML configuration file (default: $LSMSTORE_CONFIG)")
    g.add_argument(
        "--refstore",
        help="RefStore URL: local:///dir, redis://..., dynamodb://... "
        "(default: the configured one)",
    )
    g.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    g.add_argument(
        "--log-format",
        default="json",
        choices=LOG_FORMATS,
        help="json: one JSON object per line (default); text: for a terminal",
    )
    g.add_argument(
        "--shutdown-timeout",
        type=_positive,
        default=DEFAULT_SHUTDOWN_TIMEOUT_S,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long running work gets to finish before it is "
        "abandoned (default %(default)s)",
    )
    g.add_argument(
        "--health-host",
        default="127.0.0.1",
        help="address of the health port (default %(default)s)",
    )
    g.add_argument(
        "--health-port",
        type=_port,
        metavar="PORT",
        help="serve GET /healthz and /readyz on this port (0: any free port, logged)",
    )
    g.add_argument(
        "--status-file",
        metavar="PATH",
        help="keep this file holding the readiness state as JSON",
    )
    return parser


def add_worker_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = parser.add_argument_group("common to the workers")
    g.add_argument("--once", action="store_true", help="one pass, then exit")
    g.add_argument("--interval", type=_positive, metavar="SECONDS", help="seconds between passes")
    g.add_argument("--concurrency", type=_count, help="branches worked on at once")
    g.add_argument(
        "--owner",
        help="lease owner name (default host:pid:random); give a restarted worker the same "
        "name to take back its leases at once",
    )
    return parser
