"""``lsmstore branch-protect add|list|delete`` (lakectl's form): a repository's branch
protection rules, each change a replacement of the whole list under its ETag, so two
concurrent changes never lose one another (the second fails and is retried)."""

from __future__ import annotations

from typing import Any

import click

from lsmstore.api import StoreAPI
from lsmstore.cli.runtime import URI, out, run
from lsmstore.errors import InvalidInputError, PreconditionFailedError
from lsmstore.uri import LsmURI

#: Replacements retried when another client changed the rules in between.
_ATTEMPTS = 5


@click.group("branch-protect")
def protect_group() -> None:
    """Branch protection rules: a protected branch refuses direct writes, commits,
    resets and deletion; merges into it are accepted."""


def _change(uri: LsmURI, edit: Any) -> list[str]:
    uri.require(no_path=True)
    if uri.ref:
        raise click.BadParameter(f"{uri} names a ref: give lsm://REPOSITORY")

    async def body(store: StoreAPI) -> list[str]:
        repo = await store.get_repository(uri.repository)
        for attempt in range(_ATTEMPTS):
            rules = await repo.branch_protection()
            try:
                new = await repo.set_branch_protection(
                    edit(list(rules.patterns)), if_match=rules.etag
                )
            except PreconditionFailedError:
                if attempt + 1 == _ATTEMPTS:
                    raise
                continue
            return list(new.patterns)
        raise AssertionError("unreachable")  # pragma: no cover

    return run(body)


@protect_group.command("add")
@click.argument("uri", type=URI)
@click.argument("pattern")
def protect_add(uri: LsmURI, pattern: str) -> None:
    """Protect the branches of URI (lsm://REPOSITORY) matching PATTERN (a glob)."""
    patterns = _change(uri, lambda ps: ps if pattern in ps else [*ps, pattern])
    out().done(f"Branches matching {pattern!r} of {uri} are protected", data=patterns)


@protect_group.command("delete")
@click.argument("uri", type=URI)
@click.argument("pattern")
def protect_delete(uri: LsmURI, pattern: str) -> None:
    """Remove the rule PATTERN of URI (lsm://REPOSITORY)."""

    def edit(ps: list[str]) -> list[str]:
        if pattern not in ps:
            raise InvalidInputError(f"{uri} has no branch protection rule {pattern!r}")
        return [p for p in ps if p != pattern]

    patterns = _change(uri, edit)
    out().done(f"Rule {pattern!r} of {uri} deleted", data=patterns)


@protect_group.command("list")
@click.argument("uri", type=URI)
def protect_list(uri: LsmURI) -> None:
    """The branch protection rules of URI (lsm://REPOSITORY)."""
    uri.require(no_path=True)

    async def body(store: StoreAPI) -> list[str]:
        repo = await store.get_repository(uri.repository)
        return list((await repo.branch_protection()).patterns)

    patterns = run(body)
    out().lines(patterns or ["[dim]no rules[/dim]"], data=[{"pattern": p} for p in patterns])


def register(cli: click.Group) -> None:
    cli.add_command(protect_group)
