"""``lsmstore stash save|list|show|drop`` and ``lsmstore pop``: workspaces.

A branch's uncommitted changes saved under a name (``stash save``) leave the branch
clean; ``pop`` puts them on top of any branch's uncommitted changes, newer than what
is there.  Only file ids move (docs/client.md, "Workspaces").
"""

from __future__ import annotations

from typing import Any

import click

from lsmstore.api import StoreAPI
from lsmstore.cli.output import timestamp
from lsmstore.cli.runtime import URI, confirm, out, run
from lsmstore.uri import LsmURI


def workspace_fields(w: Any) -> dict[str, Any]:
    return {
        "name": w.name,
        "branch": w.branch,
        "base": w.base,
        "l1_files": len(w.l1),
        "l2_files": len(w.l2),
        "created_at": w.created_at,
    }


@click.group("stash")
def stash_group() -> None:
    """Save a branch's uncommitted changes as a named workspace, list, show, drop."""


@stash_group.command("save")
@click.argument("uri", type=URI)
@click.argument("name")
def save(uri: LsmURI, name: str) -> None:
    """Move the uncommitted changes of branch URI into workspace NAME (the branch
    becomes clean)."""
    uri.require(ref=True, no_path=True)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        w = await repo.branch(uri.ref_or_error).stash(name)
        return workspace_fields(w)

    d = run(body)
    files = d["l1_files"] + d["l2_files"]
    out().done(f"Stashed {files} staged file(s) of {uri} as workspace [bold]{name}[/bold]", data=d)


@stash_group.command("list")
@click.argument("uri", type=URI)
def list_(uri: LsmURI) -> None:
    """List the workspaces of repository URI (lsm://REPO)."""

    async def body(store: StoreAPI) -> list[dict[str, Any]]:
        repo = await store.get_repository(uri.repository)
        return [workspace_fields(w) for w in await repo.workspaces()]

    rows = run(body)
    shown = [
        {**r, "created": timestamp(r["created_at"]), "files": r["l1_files"] + r["l2_files"]}
        for r in rows
    ]
    out().table(
        shown,
        ["name", "branch", "files", "created"],
        headers=["workspace", "from branch", "files", "created"],
        styles={"name": "bold"},
        data=rows,
    )


@stash_group.command("show")
@click.argument("uri", type=URI)
@click.argument("name")
def show(uri: LsmURI, name: str) -> None:
    """Show workspace NAME of repository URI."""

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        return workspace_fields(await repo.get_workspace(name))

    d = run(body)
    out().record(
        {
            "workspace": d["name"],
            "from branch": d["branch"],
            "base commit": d["base"],
            "files": f"{d['l1_files']} L1 + {d['l2_files']} L2",
            "created": timestamp(d["created_at"]),
        },
        data=d,
    )


@stash_group.command("drop")
@click.argument("uri", type=URI)
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="do not ask for confirmation")
def drop(uri: LsmURI, name: str, yes: bool) -> None:
    """Delete workspace NAME (its changes are lost; files are collected later)."""
    confirm(f"Drop workspace {name} of {uri.repository} and its changes?", yes)

    async def body(store: StoreAPI) -> None:
        repo = await store.get_repository(uri.repository)
        await repo.drop_workspace(name)

    run(body)
    out().done(f"Workspace {name} dropped", data={"dropped": name})


@click.command("pop")
@click.argument("uri", type=URI)
@click.argument("name")
def pop(uri: LsmURI, name: str) -> None:
    """Put workspace NAME on top of branch URI's uncommitted changes and delete it."""
    uri.require(ref=True, no_path=True)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        head = await repo.branch(uri.ref_or_error).pop(name)
        return {"workspace": name, "branch": uri.ref, "l1_files": len(head.l1),
                "l2_files": len(head.l2)}  # fmt: skip

    d = run(body)
    out().done(f"Workspace {name} popped onto {uri}", data=d)


stash_group.add_command(pop, "pop")


def register(cli: click.Group) -> None:
    cli.add_command(stash_group)
    cli.add_command(pop)
