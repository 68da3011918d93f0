"""``lsmstore tag create|list|show|delete``."""

from __future__ import annotations

from typing import Any

import click

import lsmstore
from lsmstore.api import StoreAPI
from lsmstore.cli.output import timestamp
from lsmstore.cli.runtime import URI, confirm, list_names, out, run
from lsmstore.server import models
from lsmstore.uri import LsmURI


@click.group("tag")
def tag_group() -> None:
    """Create, list, show and delete tags (fixed names for commits)."""


@tag_group.command("create")
@click.argument("uri", type=URI)
@click.argument("target", type=URI)
@click.option("-f", "--force", is_flag=True, help="replace an existing tag of that name")
def create(uri: LsmURI, target: LsmURI, force: bool) -> None:
    """Tag URI (lsm://REPO/TAG) the commit TARGET (lsm://REPO/REF) names."""
    uri.require(ref=True, no_path=True)
    target.require(ref=True, no_path=True)
    if target.repository != uri.repository:
        raise click.BadParameter("the tag and its target must be in one repository")

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        if force:
            try:
                await repo.delete_tag(uri.ref_or_error)
            except lsmstore.RefNotFoundError:
                pass
        commit_id = await repo.create_tag(uri.ref_or_error, target.ref_or_error)
        return {"id": uri.ref, "commit_id": commit_id}

    d = run(body)
    out().done(f"Tag {uri} created on [yellow]{d['commit_id']}[/yellow]", data=d)


@tag_group.command("list")
@click.argument("uri", type=URI)
@click.option("--prefix", default="", help="only tags whose name starts with this")
@click.option("--after", help="list tags after this name")
@click.option("--amount", type=click.IntRange(min=1), help="at most this many")
def list_(uri: LsmURI, prefix: str, after: str | None, amount: int | None) -> None:
    """List the tags of repository URI (lsm://REPO)."""

    async def body(store: StoreAPI) -> list[dict[str, Any]]:
        repo = await store.get_repository(uri.repository)
        names = await list_names(repo.list_tags, prefix, after, amount)
        rows = []
        for name in names:
            ref = repo.ref(name)
            await ref.commit()
            rows.append({"id": name, "commit_id": ref.id})
        return rows

    rows = run(body)
    out().table(
        rows, ["id", "commit_id"], headers=["tag", "commit id"], styles={"commit_id": "yellow"}
    )


@tag_group.command("show")
@click.argument("uri", type=URI)
def show(uri: LsmURI) -> None:
    """Show tag URI (lsm://REPO/TAG) and its commit."""
    uri.require(ref=True, no_path=True)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        name = uri.ref_or_error
        if name not in await repo.list_tags(prefix=name, limit=1000):
            raise lsmstore.RefNotFoundError(f"{uri.repository}: no tag named {name!r}")
        ref = repo.ref(name)
        c = await ref.commit()
        return {"id": name, "commit_id": ref.id, "commit": models.commit(ref.id, c)}

    d = run(body)
    c = d["commit"]
    out().record(
        {
            "tag": d["id"],
            "commit": d["commit_id"],
            "message": c["message"],
            "committer": c["committer"],
            "date": timestamp(c["creation_date"]),
        },
        data=d,
    )


@tag_group.command("delete")
@click.argument("uri", type=URI)
@click.option("-y", "--yes", is_flag=True, help="do not ask for confirmation")
def delete(uri: LsmURI, yes: bool) -> None:
    """Delete tag URI (lsm://REPO/TAG)."""
    uri.require(ref=True, no_path=True)
    confirm(f"Delete tag {uri}?", yes)

    async def body(store: StoreAPI) -> None:
        repo = await store.get_repository(uri.repository)
        await repo.delete_tag(uri.ref_or_error)

    run(body)
    out().done(f"Tag {uri} deleted", data={"deleted": str(uri)})


def register(cli: click.Group) -> None:
    cli.add_command(tag_group)
