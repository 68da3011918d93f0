"""The root ``lsmstore`` command: global options, command groups, errors -> exit codes.

Errors print as one line on stderr (``lsmstore: error: ...``; with ``--output json``
also as ``{"error": {...}}`` on stderr) and exit with the code of
:mod:`lsmstore.cli.exitcodes`; ``--debug`` (or ``LSMSTORE_DEBUG=1``) adds the
traceback.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Sequence

import click

from lsmstore.cli import (
    branch,
    commits,
    completion,
    fs,
    importer,
    protect,
    repo,
    service,
    tag,
    workspace,
)
from lsmstore.cli.exitcodes import ExitCode, exit_code_for
from lsmstore.cli.output import FORMATS
from lsmstore.cli.runtime import Settings
from lsmstore.errors import LsmError

_debug = False
_json_errors = False


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--server",
    metavar="URL",
    help="an lsmstore server (http://host:8000); default: none",
)
@click.option(
    "--refstore",
    metavar="URL",
    help="a RefStore (local:///dir, redis://host:6379/0, dynamodb://table?...); "
    "default: the configured one, else the embedded store under $LSMSTORE_HOME",
)
@click.option(
    "--config", "config", metavar="FILE", help="TOML settings (default: $LSMSTORE_CONFIG)"
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="human-readable tables, or JSON for scripts",
)
@click.option("--no-color", is_flag=True, help="no colour (also: NO_COLOR=1)")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="progress bars on stderr (default: when stderr is a terminal)",
)
@click.option("--debug", is_flag=True, envvar="LSMSTORE_DEBUG", help="tracebacks on errors")
@click.version_option(package_name="lsmstore", prog_name="lsmstore")
@click.pass_context
def cli(
    ctx: click.Context,
    server: str | None,
    refstore: str | None,
    config: str | None,
    output: str,
    no_color: bool,
    progress: bool | None,
    debug: bool,
) -> None:
    """lsmstore: Git for data on an object store.

    Objects and refs are named by URIs: lsm://REPOSITORY/REF/PATH (lakefs:// works
    too).  The store is the --server, else the --refstore, else the embedded default.
    """
    global _debug, _json_errors
    _debug = debug
    _json_errors = output == "json"
    ctx.obj = Settings(
        refstore=refstore,
        server=server,
        config=config,
        output=output,
        debug=debug,
        color=False if no_color else None,
        progress=progress,
    )


for module in (repo, branch, commits, tag, fs, importer, workspace, service, completion,
               protect):  # fmt: skip
    module.register(cli)


def _report(exc: BaseException, code: int) -> None:
    if isinstance(exc, KeyboardInterrupt):
        message = "interrupted"
    elif isinstance(exc, LsmError):
        message = str(exc)
    else:
        message = f"internal error: {type(exc).__name__}: {exc}"
        if not _debug:
            message += " (run with --debug for the traceback)"
    if _debug:
        traceback.print_exception(exc)
    print(f"lsmstore: error: {message}", file=sys.stderr)
    if _json_errors:
        err = {"error": {"type": type(exc).__name__, "message": message, "exit_code": code}}
        print(json.dumps(err), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (documented in docs/cli.md)."""
    global _debug
    args = list(sys.argv[1:] if argv is None else argv)
    _debug = "--debug" in args or os.environ.get("LSMSTORE_DEBUG", "") not in ("", "0")
    try:
        rv = cli.main(args, prog_name="lsmstore", standalone_mode=False)
    except click.exceptions.Abort:
        print("lsmstore: aborted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except click.ClickException as e:
        e.show()
        return ExitCode.USAGE if e.exit_code == 2 else e.exit_code
    except SystemExit as e:  # a dispatched service's own exit
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:
        code = exit_code_for(e)
        _report(e, int(code))
        return int(code)
    return rv if isinstance(rv, int) else 0
