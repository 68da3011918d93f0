"""lakectl commands whose capability this store does not offer yet: ``actions runs
list|describe``, ``actions validate``.

Each parses lakectl's form (its arguments and flags, its URIs checked) so a lakectl
script fails on the first such line with one typed error
(:class:`~lsmstore.errors.NotAvailableError`, exit code 11) rather than a usage error,
and changes nothing.
"""

from __future__ import annotations

import click

from lsmstore.cli.runtime import URI
from lsmstore.errors import NotAvailableError
from lsmstore.uri import LsmURI


def _unavailable(what: str) -> NotAvailableError:
    return NotAvailableError(f"{what} is not available in this version of lsmstore")


@click.group("actions")
def actions_group() -> None:
    """lakeFS actions (hooks): not available yet."""


@actions_group.group("runs")
def runs_group() -> None:
    """Runs of actions: not available yet."""


@runs_group.command("list")
@click.argument("uri", type=URI)
@click.option("--branch", help="lakectl's flag")
@click.option("--commit", help="lakectl's flag")
@click.option("--after", help="lakectl's flag")
@click.option("--amount", type=click.IntRange(min=1), help="lakectl's flag")
def runs_list(
    uri: LsmURI, branch: str | None, commit: str | None, after: str | None, amount: int | None
) -> None:
    """List the action runs of repository URI (not available yet)."""
    uri.require(no_path=True)
    raise _unavailable("actions (hooks and their runs)")


@runs_group.command("describe")
@click.argument("uri", type=URI)
@click.argument("run_id")
@click.option("--after", help="lakectl's flag")
@click.option("--amount", type=click.IntRange(min=1), help="lakectl's flag")
def runs_describe(uri: LsmURI, run_id: str, after: str | None, amount: int | None) -> None:
    """Describe run RUN_ID of repository URI (not available yet)."""
    uri.require(no_path=True)
    raise _unavailable("actions (hooks and their runs)")


@actions_group.command("validate")
@click.argument("path", type=click.Path(dir_okay=False))
def validate_action(path: str) -> None:
    """Check an action file (not available yet)."""
    raise _unavailable("actions (hooks and their runs)")


def register(cli: click.Group) -> None:
    cli.add_command(actions_group)
