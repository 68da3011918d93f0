"""``lsmstore repo create|list|delete``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from lsmstore.api import StoreAPI
from lsmstore.cli.output import timestamp
from lsmstore.cli.runtime import URI, confirm, out, run
from lsmstore.uri import LsmURI


def repo_fields(r: Any) -> dict[str, Any]:
    return {
        "id": r.name,
        "storage_namespace": r.storage_namespace,
        "default_branch": r.default_branch,
        "creation_date": int(r.created_at),
    }


@click.group("repo")
def repo_group() -> None:
    """Create, list and delete repositories."""


@repo_group.command("create")
@click.argument("uri", type=URI)
@click.argument("storage_namespace", required=False)
@click.option("-d", "--default-branch", default="main", show_default=True)
def create(uri: LsmURI, storage_namespace: str | None, default_branch: str) -> None:
    """Create repository URI (lsm://NAME) on STORAGE_NAMESPACE.

    STORAGE_NAMESPACE is where its data lives: s3://bucket/prefix, file:///dir, ...;
    by default a directory under the embedded store's home ($LSMSTORE_HOME/data/NAME),
    or local://NAME (under the server's home) with --server.
    """
    uri.require(no_path=True)
    if uri.ref is not None:
        raise click.BadParameter("expected lsm://REPOSITORY (no ref)", param_hint="URI")

    async def body(store: StoreAPI) -> dict[str, Any]:
        from lsmstore.remote.client import RemoteStore

        if storage_namespace:
            ns = storage_namespace
        elif isinstance(store, RemoteStore):
            ns = f"local://{uri.repository}"  # under the server's home
        else:
            ns = (Path(store.config.home) / "data" / uri.repository).as_uri()
        r = await store.create_repository(
            uri.repository, storage_namespace=ns, default_branch=default_branch
        )
        return repo_fields(r)

    data = run(body)
    out().done(
        f"Repository [bold]{data['id']}[/bold] created on {data['storage_namespace']} "
        f"(default branch {data['default_branch']})",
        data=data,
    )


@repo_group.command("list")
@click.option("--after", help="list repositories after this name")
@click.option("--amount", type=click.IntRange(min=1), help="at most this many")
def list_(after: str | None, amount: int | None) -> None:
    """List repositories."""

    async def body(store: StoreAPI) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        cursor = after
        while amount is None or len(rows) < amount:
            page = await store.list_repositories(after=cursor, limit=1000)
            rows.extend(repo_fields(r) for r in page)
            if len(page) < 1000:
                break
            cursor = page[-1].name
        return rows[:amount] if amount else rows

    rows = run(body)
    shown = [{**r, "created": timestamp(r["creation_date"])} for r in rows]
    out().table(
        shown,
        ["id", "created", "default_branch", "storage_namespace"],
        headers=["repository", "created", "default branch", "storage namespace"],
        styles={"id": "bold cyan"},
        data=rows,
    )


@repo_group.command("delete")
@click.argument("uri", type=URI)
@click.option("-y", "--yes", is_flag=True, help="do not ask for confirmation")
def delete(uri: LsmURI, yes: bool) -> None:
    """Delete repository URI (its refs; the data stays until garbage collection)."""
    if uri.ref is not None:
        raise click.BadParameter("expected lsm://REPOSITORY (no ref)", param_hint="URI")
    confirm(f"Delete repository {uri.repository}?", yes)

    async def body(store: StoreAPI) -> None:
        await store.get_repository(uri.repository)  # RepositoryNotFoundError if absent
        await store.delete_repository(uri.repository)

    run(body)
    out().done(f"Repository {uri.repository} deleted", data={"deleted": uri.repository})


def register(cli: click.Group) -> None:
    cli.add_command(repo_group)
