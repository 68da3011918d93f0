"""``lsmstore branch create|list|show|delete|reset|revert``."""

from __future__ import annotations

from typing import Any

import click

import lsmstore
from lsmstore.api import StoreAPI
from lsmstore.cli.output import timestamp
from lsmstore.cli.runtime import URI, confirm, list_names, out, run
from lsmstore.uri import LsmURI


def _branch_uri(uri: LsmURI) -> LsmURI:
    return uri.require(ref=True, no_path=True)


def _source_ref(source: LsmURI, uri: LsmURI) -> str:
    if source.repository != uri.repository:
        raise click.BadParameter(
            f"the source {source} is in another repository than {uri}", param_hint="--source"
        )
    return source.require(ref=True, no_path=True).ref_or_error


@click.group("branch")
def branch_group() -> None:
    """Create, list, inspect, delete, reset and revert branches."""


@branch_group.command("create")
@click.argument("uri", type=URI)
@click.option(
    "-s", "--source", type=URI, required=True, help="lsm://REPO/REF the branch starts from"
)
def create(uri: LsmURI, source: LsmURI) -> None:
    """Create branch URI (lsm://REPO/BRANCH) at the commit --source names."""
    _branch_uri(uri)
    src = _source_ref(source, uri)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        await repo.create_branch(uri.ref_or_error, source=src)
        head = await repo.branch(uri.ref_or_error).head()
        return {"id": uri.ref, "commit_id": head.base, "source": src}

    data = run(body)
    out().done(
        f"Branch [bold]{uri}[/bold] created at {data['commit_id'][:16]} (from {src})", data=data
    )


@branch_group.command("list")
@click.argument("uri", type=URI)
@click.option("--prefix", default="", help="only branches whose name starts with this")
@click.option("--after", help="list branches after this name")
@click.option("--amount", type=click.IntRange(min=1), help="at most this many")
def list_(uri: LsmURI, prefix: str, after: str | None, amount: int | None) -> None:
    """List the branches of repository URI (lsm://REPO)."""

    async def body(store: StoreAPI) -> list[dict[str, Any]]:
        repo = await store.get_repository(uri.repository)
        names = await list_names(repo.list_branches, prefix, after, amount)
        rows = []
        for name in names:
            head = await repo.branch(name).head()
            rows.append(
                {
                    "id": name,
                    "commit_id": head.base,
                    "staged_files": len(head.l1) + len(head.l2),
                    "default": name == repo.default_branch,
                }
            )
        return rows

    rows = run(body)
    shown = [{**r, "id": r["id"] + (" *" if r["default"] else "")} for r in rows]
    out().table(
        shown,
        ["id", "commit_id", "staged_files"],
        headers=["branch", "commit id", "staged files"],
        styles={"id": "bold green", "commit_id": "yellow"},
        data=rows,
    )


@branch_group.command("show")
@click.argument("uri", type=URI)
def show(uri: LsmURI) -> None:
    """Show branch URI: its commit and its uncommitted (staged) files."""
    _branch_uri(uri)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        head = await repo.branch(uri.ref_or_error).head()
        if not head.is_branch:
            raise lsmstore.InvalidInputError(f"{uri} is a tag, not a branch")
        commit = await repo.ref(head.base).commit() if head.base else None
        return {
            "id": uri.ref,
            "commit_id": head.base,
            "message": commit.message if commit else "",
            "committed": commit.created_at if commit else 0,
            "staged_l1_files": list(head.l1),
            "staged_l2_files": list(head.l2),
        }

    d = run(body)
    out().record(
        {
            "branch": d["id"],
            "commit": d["commit_id"],
            "message": d["message"],
            "committed": timestamp(d["committed"]),
            "staged": f"{len(d['staged_l1_files'])} L1 + {len(d['staged_l2_files'])} L2 files",
        },
        data=d,
    )


@branch_group.command("delete")
@click.argument("uri", type=URI)
@click.option("-y", "--yes", is_flag=True, help="do not ask for confirmation")
def delete(uri: LsmURI, yes: bool) -> None:
    """Delete branch URI and drop its uncommitted changes."""
    _branch_uri(uri)
    confirm(f"Delete branch {uri} and its uncommitted changes?", yes)

    async def body(store: StoreAPI) -> None:
        repo = await store.get_repository(uri.repository)
        await repo.delete_branch(uri.ref_or_error)

    run(body)
    out().done(f"Branch {uri} deleted", data={"deleted": str(uri)})


@branch_group.command("reset")
@click.argument("uri", type=URI)
@click.option("-y", "--yes", is_flag=True, help="do not ask for confirmation")
@click.option("--prefix", help="lakectl's: only changes under this prefix (not available)")
@click.option("--object", "object_", help="lakectl's: only this object (not available)")
def reset(uri: LsmURI, yes: bool, prefix: str | None, object_: str | None) -> None:
    """Drop every uncommitted change of branch URI."""
    _branch_uri(uri)
    if prefix is not None or object_ is not None:
        raise lsmstore.NotAvailableError(
            "resetting part of a branch (--prefix, --object) is not available in this "
            f"version of lsmstore; 'lsmstore branch reset {uri}' drops every change"
        )
    confirm(f"Drop all uncommitted changes of {uri}?", yes)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        before = await repo.branch(uri.ref_or_error).head()
        after = await repo.branch(uri.ref_or_error).reset()
        return {
            "id": uri.ref,
            "commit_id": after.base,
            "dropped_files": len(before.l1) + len(before.l2),
        }

    d = run(body)
    out().done(f"Branch {uri} reset to {d['commit_id'][:16]}", data=d)


@branch_group.command("revert")
@click.argument("uri", type=URI)
@click.argument("commits", nargs=-1, required=True)
@click.option(
    "-m", "--parent-number", type=click.IntRange(min=1), default=1, show_default=True,
    help="the parent a merge commit is reverted to",
)  # fmt: skip
@click.option("--message", help="commit message (default: Revert <commit>)")
@click.option("-y", "--yes", is_flag=True, help="do not ask for confirmation (lakectl's)")
def revert(
    uri: LsmURI, commits: tuple[str, ...], parent_number: int, message: str | None, yes: bool
) -> None:
    """Revert COMMITS (ref expressions: IDs, tags, main~2 ...) on branch URI, each as
    a new commit, in the order given."""
    _branch_uri(uri)

    async def body(store: StoreAPI) -> list[dict[str, Any]]:
        repo = await store.get_repository(uri.repository)
        results = []
        for c in commits:
            r = await repo.revert(c, branch=uri.ref_or_error, parent=parent_number, message=message)
            results.append({"reverted": c, "commit_id": r.commit_id, "changed": r.merged})
        return results

    results = run(body)
    out().lines(
        [f"Reverted {r['reverted']} on {uri}: commit {r['commit_id'][:16]}" for r in results],
        data=results,
    )


def register(cli: click.Group) -> None:
    cli.add_command(branch_group)
