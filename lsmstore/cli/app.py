"""The root ``lsmstore`` command: global options, command groups, errors -> exit codes.

Errors (click's usage errors too) print as one line on stderr (``lsmstore: error:
...``; with ``--output json`` also as one ``{"error": {...}}`` document on stdout) and
exit with the code of :mod:`lsmstore.cli.exitcodes`; ``--debug`` (or ``LSMSTORE_DEBUG=1``) adds the
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
    actions,
    auth,
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
from lsmstore.cli.output import FORMATS, StdoutClosed
from lsmstore.cli.runtime import Settings
from lsmstore.config import lakectl_base_uri
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
    "-c",
    "--config",
    "config",
    metavar="FILE",
    help="TOML settings (default: $LSMSTORE_CONFIG), or lakectl's YAML (*.yaml, *.yml; "
    "default: ~/.lakectl.yaml)",
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
@click.option(
    "--base-uri",
    metavar="URI",
    help="read URI arguments without a scheme against this one (lakectl's; default: "
    "$LAKECTL_BASE_URI)",
)
@click.option("--verbose", is_flag=True, hidden=True)  # lakectl's; errors are already typed
@click.option("--log-level", hidden=True)  # lakectl's logging flags: accepted, no effect
@click.option("--log-format", hidden=True)
@click.option("--log-output", hidden=True, multiple=True)
@click.version_option(None, "-v", "--version", package_name="lsmstore", prog_name="lsmstore")
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
    base_uri: str | None,
    verbose: bool,
    log_level: str | None,
    log_format: str | None,
    log_output: tuple[str, ...],
) -> None:
    """lsmstore: Git for data on an object store.

    Objects and refs are named by URIs: lsm://REPOSITORY/REF/PATH (lakefs:// works
    too).  The store is the --server, else the --refstore, else the configured one
    (LSMSTORE_* settings, then lakectl's ~/.lakectl.yaml and LAKECTL_* variables), else
    the embedded default.  lakectl's command forms work too (docs/cli.md).
    """
    global _debug, _json_errors
    _debug = debug
    _json_errors = output == "json"
    lakectl_config = None
    if config is not None and config.lower().endswith((".yaml", ".yml")):
        lakectl_config, config = config, None
    ctx.obj = Settings(
        refstore=refstore,
        server=server,
        config=config,
        lakectl_config=lakectl_config,
        base_uri=base_uri or lakectl_base_uri(),
        output=output,
        debug=debug,
        color=False if no_color else None,
        progress=progress,
    )


for module in (repo, branch, commits, tag, fs, importer, workspace, service, completion,
               protect, actions, auth):  # fmt: skip
    module.register(cli)


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _print_error(message: str, kind: str, code: int) -> None:
    """The one error line on stderr and, with ``-o json``, the one JSON document on
    stdout (instead of a result)."""
    message = _one_line(message)
    print(f"lsmstore: error: {message}", file=sys.stderr)
    if _json_errors:
        err = {"error": {"type": kind, "message": message, "exit_code": code}}
        try:
            sys.stdout.write(json.dumps(err, ensure_ascii=False) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            _silence_stdout()


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
    _print_error(message, type(exc).__name__, code)


def _usage_message(e: click.ClickException) -> str:
    """A click error as one line: the command, what is wrong, where help is."""
    ctx = getattr(e, "ctx", None)
    text = e.format_message()
    if isinstance(e, click.UsageError) and ctx is not None:
        sub = ctx.command_path.partition(" ")[2]
        return f"{sub + ': ' if sub else ''}{text} (see '{ctx.command_path} --help')"
    return text


def _silence_stdout() -> None:
    """The reader of stdout went away (``| head``): drop whatever is still buffered,
    so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _broken_pipe(exc: BaseException) -> bool:
    if isinstance(exc, BrokenPipeError | StdoutClosed):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_broken_pipe(e) for e in exc.exceptions)
    return False


def wants_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for JSON (read before click parses it, so even
    a usage error is reported as JSON)."""
    for i, a in enumerate(args):
        if a == "--":
            break
        if a in ("-o", "--output") and i + 1 < len(args):
            if args[i + 1] == "json":
                return True
        elif a in ("-ojson", "--output=json"):
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (documented in docs/cli.md)."""
    global _debug, _json_errors
    args = list(sys.argv[1:] if argv is None else argv)
    _debug = "--debug" in args or os.environ.get("LSMSTORE_DEBUG", "") not in ("", "0")
    _json_errors = wants_json(args)
    try:
        rv = cli.main(args, prog_name="lsmstore", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:  # a bare group: its help, as git does
        ctx = e.ctx
        if ctx is not None and not _json_errors:
            click.echo(ctx.get_help(), err=True)
            return int(ExitCode.USAGE)
        _print_error(_usage_message(e), "UsageError", int(ExitCode.USAGE))
        return int(ExitCode.USAGE)
    except click.exceptions.Abort:
        _print_error("aborted", "Aborted", int(ExitCode.INTERRUPTED))
        return int(ExitCode.INTERRUPTED)
    except click.ClickException as e:
        code = int(ExitCode.USAGE) if e.exit_code == 2 else e.exit_code
        kind = "UsageError" if isinstance(e, click.UsageError) else type(e).__name__
        _print_error(_usage_message(e), kind, code)
        return code
    except SystemExit as e:  # a dispatched service's own exit
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:
        if _broken_pipe(e):
            _silence_stdout()
            return int(ExitCode.OK)
        code = exit_code_for(e)
        _report(e, int(code))
        return int(code)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    return rv if isinstance(rv, int) else 0
