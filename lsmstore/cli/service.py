"""``lsmstore serve|compactor|committer|spark|demo``: the long-running services and the demo.

``serve``, ``compactor``, ``committer`` and ``spark`` pass their arguments unchanged
to the service's own entry point (which the service's own program, e.g.
``lsmstore-compactor``, runs too) and exit with its exit status; ``--help`` lists the
service's flags in click's layout, like every other command.  A flag the service
refuses is reported like any other usage error (one line, exit code 2, JSON with
``-o json``).  ``demo`` is a click command.
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


def _flag_help(action: argparse.Action) -> str:
    """An argparse flag's help as plain text: its default filled in, or dropped
    where there is none to show."""
    text = action.help or ""
    if action.default is None or action.default is argparse.SUPPRESS:
        text = text.replace(" (default %(default)s)", "").replace("(default %(default)s)", "")
    text = text.replace("%(default)s", str(action.default)).replace("%%", "%")
    if action.choices and "{" not in text:
        text = f"{text} [{'|'.join(map(str, action.choices))}]".strip()
    return text


def _plain(text: str) -> str:
    """reStructuredText's inline markup dropped (````x```` -> ``x``)."""
    return text.replace("``", "")


class ServiceCommand(click.Command):
    """A service behind its own argparse parser: arguments pass through unchanged;
    ``--help`` (as the only argument) shows the parser's flags in click's layout."""

    def __init__(self, name: str, module: str, summary: str) -> None:
        super().__init__(
            name,
            context_settings=PASS_THROUGH,
            add_help_option=False,
            help=summary,
            params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
            callback=self._run,
        )
        self.module = module

    def _run(self, args: tuple[str, ...]) -> int:
        if list(args) in (["--help"], ["-h"]) and self._parser() is not None:
            click.echo(self.get_help(click.get_current_context()))
            return 0
        return _dispatch(self.module, args, f"lsmstore {self.name}")

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] [COMMAND] [ARGS]...")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        parser = self._parser()
        if parser is None:
            return
        for group in parser._action_groups:
            rows: list[tuple[str, str]] = []
            for action in group._group_actions:
                if isinstance(action, argparse._SubParsersAction):
                    rows.extend(
                        (name, _plain(choice.help or ""))
                        for name, choice in zip(
                            action.choices, action._choices_actions, strict=False
                        )
                    )
                    continue
                if action.help == argparse.SUPPRESS or "-h" in action.option_strings:
                    continue
                metavar = str(action.metavar or action.dest.upper())
                flags = ", ".join(action.option_strings) or metavar
                if action.option_strings and action.nargs != 0:
                    flags += f" {metavar}"
                rows.append((str(flags), _plain(_flag_help(action))))
            if rows:
                title = "Options" if group.title in ("options", "optional arguments") else (
                    "Commands" if group.title == "positional arguments" else group.title
                )
                with formatter.section(str(title).capitalize()):
                    formatter.write_dl(rows)

    def _parser(self) -> argparse.ArgumentParser | None:
        try:
            module = importlib.import_module(self.module)
        except ImportError:
            return None
        factory = getattr(module, "parser", None)
        return factory() if callable(factory) else None


def _service(name: str, module: str, summary: str) -> click.Command:
    return ServiceCommand(name, module, summary)


serve = _service(
    "serve",
    "lsmstore.server.__main__",
    "Run the lsmstore server (lakeFS REST API).",
)
compactor = _service(
    "compactor",
    "compactor.__main__",
    "Run the compactor worker (L1 -> L2, garbage).",
)
committer = _service(
    "committer",
    "committer.__main__",
    "Run the committer worker (commits by policy).",
)
spark = _service(
    "spark",
    "lsmstore.spark.jobs",
    "Spark jobs: import an inventory, export a ref, collect garbage (lsmstore[spark]).",
)


@click.command("demo")
@click.option("--puts", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="single puts")
@click.option("--tasks", type=click.IntRange(min=1), default=1000, show_default=True,
              help="concurrent put tasks")
@click.option("--batch", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="records per put_many call")
@click.option("--keep", is_flag=True, help="keep the temporary directory")
def demo(puts: int, tasks: int, batch: int, keep: bool) -> None:
    """Run a write/read workload on the embedded default (in $LSMSTORE_HOME when set,
    else in a temporary directory)."""  # fmt: skip
    if puts < tasks:
        raise click.UsageError("need --puts >= --tasks")
    from lsmstore.demo import run_demo

    run_demo(puts, tasks, batch, keep=keep)


def register(cli: click.Group) -> None:
    for command in (serve, compactor, committer, spark, demo):
        cli.add_command(command)
