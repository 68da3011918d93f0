"""``python -m lsmstore.server`` (``lsmstore serve``): the HTTP server, and its keys.

::

    python -m lsmstore.server [--host H] [--port P] [--init] [--tls-cert F --tls-key F]
    python -m lsmstore.server credentials create --role admin|writer|reader [--repository R]...
    python -m lsmstore.server credentials list
    python -m lsmstore.server credentials delete ACCESS_KEY_ID

Settings come from the configuration (``--config`` TOML with a ``[server]`` table,
``LSMSTORE_SERVER_*`` variables); flags override them.  docs/server.md has the rest.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from lsmstore.config import Config, load_config
from lsmstore.errors import InvalidInputError, LsmError
from lsmstore.service import ExitCode, add_common_flags, configure_logging


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lsmstore serve", description=__doc__.split("\n")[0])
    add_common_flags(p)
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--tls-cert", help="PEM certificate chain: serve HTTPS")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument(
        "--drain-timeout",
        type=float,
        help="seconds to drain on SIGTERM (server_drain_timeout_s, default 30); "
        "--shutdown-timeout is the same",
    )
    p.add_argument(
        "--init", action="store_true", help="create and print an admin key if none exists"
    )
    # None: the configured server_drain_timeout_s (not the workers' default).
    p.set_defaults(shutdown_timeout=None)
    sub = p.add_subparsers(dest="command")
    cred = sub.add_parser("credentials", help="manage access keys")
    csub = cred.add_subparsers(dest="action", required=True)
    c = csub.add_parser("create", help="create a key and print its secret (once)")
    c.add_argument("--role", choices=("admin", "writer", "reader"), required=True)
    c.add_argument("--repository", action="append", default=[], help="limit the key to it")
    c.add_argument("--access-key-id", help="choose the key id (default: random)")
    c.add_argument(
        "--secret-stdin", action="store_true", help="read the secret from standard input"
    )
    csub.add_parser("list", help="list keys (never their secrets)")
    d = csub.add_parser("delete", help="delete a key")
    d.add_argument("access_key_id")
    return p


def config_from(args: argparse.Namespace) -> Config:
    overrides: dict[str, Any] = {
        "server_host": args.host,
        "server_port": args.port,
        "server_tls_cert": args.tls_cert,
        "server_tls_key": args.tls_key,
        "server_drain_timeout_s": args.drain_timeout or args.shutdown_timeout,
    }
    return load_config(args.refstore, config=args.config, **overrides)


async def _credentials(args: argparse.Namespace, config: Config) -> int:
    from lsmstore.server import credentials
    from lsmstore.server.secret import signing_key
    from lsmstore.server.serve import make_context

    seal_key = None
    if args.action == "create":
        # A new key's secret is sealed under the signing secret for S3 signature checks
        # (lsmstore.server.sealing); without one configured the key has no S3 access.
        try:
            seal_key = signing_key(config)
        except InvalidInputError as e:
            print(f"warning: {e}; the new key will not work through S3", file=sys.stderr)
    ctx = make_context(config, signing_key=seal_key)
    try:
        auth = ctx.auth
        if args.action == "create":
            secret = sys.stdin.readline().rstrip("\n") if args.secret_stdin else None
            await credentials.create(
                auth, args.role, tuple(args.repository), args.access_key_id, secret
            )
        elif args.action == "list":
            for key in await auth.list_keys():
                repos = ",".join(key.repositories) or "*"
                print(f"{key.access_key_id}\t{key.role}\t{repos}\t{key.created_at}")
        else:
            await auth.delete_key(args.access_key_id)
            print(
                f"deleted {args.access_key_id}: every server refuses it (and its tokens) "
                f"within {config.server_auth_revalidate_s:g} s"
            )
        return ExitCode.OK
    finally:
        await ctx.store.aclose()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format, service="server")
    log = logging.getLogger("lsmstore.server")
    try:
        config = config_from(args)
        if args.command != "credentials":
            from lsmstore.server.secret import signing_key

            signing_key(config)  # no secret for a shared RefStore: a configuration error
    except LsmError as e:
        log.error("bad configuration: %s", e, extra={"fields": {"event": "bad_config"}})
        return ExitCode.USAGE
    import uvloop

    try:
        if args.command == "credentials":
            return uvloop.run(_credentials(args, config))
        from lsmstore.server.serve import serve

        return uvloop.run(
            serve(
                config, init=args.init, health_host=args.health_host,
                health_port=args.health_port, status_file=args.status_file,
            )
        )  # fmt: skip
    except LsmError as e:
        log.error("%s", e, extra={"fields": {"event": "failed"}})
        return ExitCode.FAILED
    except OSError as e:  # e.g. the port is taken
        log.error("%s", e, extra={"fields": {"event": "failed"}})
        return ExitCode.UNAVAILABLE


if __name__ == "__main__":
    sys.exit(main())
