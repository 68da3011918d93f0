"""lakectl commands whose capability this store does not offer yet: ``cherry-pick``,
``actions runs list|describe``, ``actions validate``, ``branch-protect add|list|delete``.

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


@click.command("cherry-pick")
@click.argument("commit", type=URI)
@click.argument("branch", type=URI)
@click.option("-m", "--parent-number", type=click.IntRange(min=1), help="lakectl's flag")
def cherry_pick(commit: LsmURI, branch: LsmURI, parent_number: int | None) -> None:
    """Apply the changes of COMMIT (lsm://REPO/REF) to BRANCH as a new commit
    (lakectl's form; not available yet)."""
    commit.require(ref=True, no_path=True)
    branch.require(ref=True, no_path=True)
    raise _unavailable("cherry-pick")


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


@click.group("branch-protect")
def protect_group() -> None:
    """Branch protection rules: not available yet."""


@protect_group.command("add")
@click.argument("uri", type=URI)
@click.argument("pattern")
def protect_add(uri: LsmURI, pattern: str) -> None:
    """Protect the branches of URI matching PATTERN (not available yet)."""
    uri.require(no_path=True)
    raise _unavailable("branch protection")


@protect_group.command("list")
@click.argument("uri", type=URI)
def protect_list(uri: LsmURI) -> None:
    """List the protection rules of URI (not available yet)."""
    uri.require(no_path=True)
    raise _unavailable("branch protection")


@protect_group.command("delete")
@click.argument("uri", type=URI)
@click.argument("pattern")
def protect_delete(uri: LsmURI, pattern: str) -> None:
    """Delete the protection rule PATTERN of URI (not available yet)."""
    uri.require(no_path=True)
    raise _unavailable("branch protection")


def register(cli: click.Group) -> None:
    for command in (cherry_pick, actions_group, protect_group):
        cli.add_command(command)
