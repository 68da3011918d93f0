"""``lsmstore serve|compactor|committer|spark|demo``: the long-running services and the demo.

Each passes its arguments unchanged to the service's own entry point (``lsmstore
compactor --help`` shows the compactor's flags) and exits with its exit status.  A
flag the service's parser refuses is reported like any other usage error (one line,
exit code 2, JSON with ``-o json``).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import click

PASS_THROUGH = {
    "ignore_unknown_options": True,
    "allow_extra_args": True,
    "help_option_names": [],
}


@contextmanager
def _usage_errors_as_click() -> Iterator[None]:
    """While a service parses its flags, its parser's usage error is a click one."""
    original = argparse.ArgumentParser.error

    def error(self: argparse.ArgumentParser, message: str) -> NoReturn:
        raise click.UsageError(message)  # click adds the command and where help is

    argparse.ArgumentParser.error = error  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.error = original  # type: ignore[method-assign]


def _dispatch(module: str, args: Sequence[str], what: str) -> int:
    try:
        entry: Callable[[list[str]], Any] = importlib.import_module(module).main
    except ImportError as e:
        raise click.UsageError(f"{what} is not available in this installation ({e})") from e
    with _usage_errors_as_click():
        rv = entry(list(args))
    return rv if isinstance(rv, int) else 0


def _service(name: str, module: str, summary: str) -> click.Command:
    @click.command(name, context_settings=PASS_THROUGH, add_help_option=False, help=summary)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> int:
        return _dispatch(module, args, f"lsmstore {name}")

    return command


serve = _service(
    "serve",
    "lsmstore.server.__main__",
    "Run the lsmstore server (lakeFS REST API); flags: lsmstore serve --help.",
)
compactor = _service(
    "compactor",
    "compactor.__main__",
    "Run the compactor worker (L1 -> L2, garbage); flags: lsmstore compactor --help.",
)
committer = _service(
    "committer",
    "committer.__main__",
    "Run the committer worker (commits by policy); flags: lsmstore committer --help.",
)
spark = _service(
    "spark",
    "lsmstore.spark.jobs",
    "Spark jobs: import an inventory, export a ref, collect garbage (lsmstore[spark]); "
    "flags: lsmstore spark --help.",
)
demo = _service(
    "demo",
    "lsmstore.demo",
    "Run a write/read workload on the embedded default; flags: lsmstore demo --help.",
)


def register(cli: click.Group) -> None:
    for command in (serve, compactor, committer, spark, demo):
        cli.add_command(command)
