"""``lsmstore commit``, ``log``, ``show``, ``diff``, ``merge``, ``cherry-pick``."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

import lsmstore
from lsmstore.api import StoreAPI
from lsmstore.cli.graph import Graph
from lsmstore.cli.output import timestamp
from lsmstore.cli.runtime import URI, out, parse_metadata, run, settings
from lsmstore.server import models
from lsmstore.uri import LsmURI


@click.command("commit")
@click.argument("uri", type=URI)
@click.option("-m", "--message", required=True, help="commit message")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="metadata (repeatable)")
@click.option("--committer", help="committer name (default: lsmstore)")
@click.option("--allow-empty", is_flag=True, help="commit even with nothing staged")
def commit(
    uri: LsmURI, message: str, meta: tuple[str, ...], committer: str | None, allow_empty: bool
) -> None:
    """Commit the uncommitted changes of branch URI (lsm://REPO/BRANCH)."""
    uri.require(ref=True, no_path=True)
    metadata = parse_metadata(meta)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        with out().spinner(f"committing {uri}"):
            c = await repo.branch(uri.ref_or_error).commit(
                message, metadata=metadata, committer=committer, allow_empty=allow_empty
            )
        head = await repo.branch(uri.ref_or_error).head()
        return models.commit(head.base, c)

    d = run(body)
    out().done(f"Commit [yellow]{d['id']}[/yellow] on {uri}: {escape(message)}", data=d)


@click.command("log")
@click.argument("uri", type=URI)
@click.option("--amount", type=click.IntRange(min=1), help="at most this many commits")
@click.option("--after", metavar="COMMIT", help="start after this commit (paging)")
@click.option(
    "--first-parent/--all-parents",
    default=None,
    help="follow only first parents (the branch's own line; default without --graph)",
)
@click.option("--graph", is_flag=True, help="draw the commit graph")
def log(
    uri: LsmURI, amount: int | None, after: str | None, first_parent: bool | None, graph: bool
) -> None:
    """Commits reachable from URI (lsm://REPO/REF), newest first."""
    uri.require(ref=True, no_path=True)
    fp = (not graph) if first_parent is None else first_parent

    async def body(store: StoreAPI) -> list[dict[str, Any]]:
        repo = await store.get_repository(uri.repository)
        return [
            models.commit(e.id, e.commit)
            async for e in repo.log(uri.ref_or_error, after=after, limit=amount, first_parent=fp)
        ]

    entries = run(body)
    if settings().out.json or not graph:
        out().table(
            [{**e, "date": timestamp(e["creation_date"])} for e in entries],
            ["id", "date", "committer", "message"],
            headers=["commit", "date", "committer", "message"],
            styles={"id": "yellow"},
            data=entries,
        )
        return
    lines: list[str] = []
    g = Graph()
    for e in entries:
        for text, is_commit in g.rows(e["id"], e["parents"]):
            if is_commit:
                lines.append(
                    f"[bold]{text}[/bold] [yellow]{e['id'][:12]}[/yellow] "
                    f"{escape(e['message'])} [dim]({e['committer']}, "
                    f"{timestamp(e['creation_date'])})[/dim]"
                )
            else:
                lines.append(f"[bold]{escape(text)}[/bold]")
    out().lines(lines, data=entries)


@click.command("show")
@click.argument("uri", type=URI)
def show(uri: LsmURI) -> None:
    """Show the commit URI (lsm://REPO/REF) names."""
    uri.require(ref=True, no_path=True)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        ref = repo.ref(uri.ref_or_error)
        c = await ref.commit()
        cid = ref.id or await ref_head(repo, uri)  # a live branch: its base
        return models.commit(cid, c)

    d = run(body)
    out().record(
        {
            "commit": d["id"],
            "parents": d["parents"],
            "committer": d["committer"],
            "date": timestamp(d["creation_date"]),
            "message": d["message"],
            "metadata": d["metadata"],
            "meta range": d["meta_range_id"],
        },
        data=d,
    )


async def ref_head(repo: lsmstore.Repository, uri: LsmURI) -> str:
    return (await repo.branch(uri.ref_or_error).head()).base


_MARK = {"added": ("+", "green"), "removed": ("-", "red"), "changed": ("~", "yellow")}


@click.command("diff")
@click.argument("left", type=URI)
@click.argument("right", type=URI, required=False)
@click.option("--prefix", default="", help="only paths starting with this")
def diff(left: LsmURI, right: LsmURI | None, prefix: str) -> None:
    """Changes between two refs (LEFT -> RIGHT, both lsm://REPO/REF), or with one
    branch its uncommitted changes."""
    left.require(ref=True, no_path=True)
    if right is not None:
        right.require(ref=True, no_path=True)
        if right.repository != left.repository:
            raise click.BadParameter("both refs must be in one repository", param_hint="RIGHT")

    async def body(store: StoreAPI) -> list[dict[str, Any]]:
        repo = await store.get_repository(left.repository)
        if right is None:
            changes = await repo.branch(left.ref_or_error).diff_uncommitted()
        else:
            changes = [c async for c in repo.diff(left.ref_or_error, right.ref_or_error)]
        p = prefix.encode()
        return [
            {"type": c.kind, "path": c.key.decode("utf-8", "surrogateescape")}
            for c in changes
            if c.key.startswith(p)
        ]

    rows = run(body)
    lines = []
    for r in rows:
        mark, colour = _MARK.get(r["type"], ("?", "white"))
        lines.append(f"[{colour}]{mark} {r['type']:<8} {escape(r['path'])}[/{colour}]")
    if not rows:
        lines.append("[dim]no changes[/dim]")
    out().lines(lines, data=rows)


@click.command("merge")
@click.argument("source", type=URI)
@click.argument("destination", type=URI)
@click.option(
    "--strategy",
    type=click.Choice(["source-wins", "dest-wins"]),
    help="resolve conflicts this way (default: fail on conflicts)",
)
@click.option("-m", "--message", help="merge commit message")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="metadata (repeatable)")
@click.option("--committer", help="committer name (default: lsmstore; a server: your key)")
@click.option(
    "--squash", is_flag=True, help="one commit whose only parent is the destination's head"
)
def merge(
    source: LsmURI,
    destination: LsmURI,
    strategy: str | None,
    message: str | None,
    meta: tuple[str, ...],
    committer: str | None,
    squash: bool,
) -> None:
    """Merge SOURCE (lsm://REPO/REF) into branch DESTINATION (lsm://REPO/BRANCH)."""
    source.require(ref=True, no_path=True)
    destination.require(ref=True, no_path=True)
    if source.repository != destination.repository:
        raise click.BadParameter("source and destination must be in one repository")
    metadata = parse_metadata(meta)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(source.repository)
        with out().spinner(f"merging {source} into {destination}"):
            r = await repo.merge(
                source.ref_or_error,
                into=destination.ref_or_error,
                strategy=strategy,
                message=message,
                metadata=metadata or None,
                committer=committer,
                squash=squash,
            )
        return {
            "reference": r.commit_id,
            "merged": r.merged,
            "merge_base": r.merge_base,
            "source": r.source,
        }

    d = run(body)
    if d["merged"]:
        text = f"Merged {source} into {destination}: commit [yellow]{d['reference']}[/yellow]"
    else:
        text = f"Nothing to merge: {destination} already contains {source}"
    out().done(text, data=d)


@click.command("cherry-pick")
@click.argument("commit_uri", metavar="COMMIT", type=URI)
@click.argument("branch", type=URI)
@click.option(
    "-m", "--parent-number", type=click.IntRange(min=1, max=2), default=1, show_default=True,
    help="for a merge commit: the parent whose changes are taken as the base",
)  # fmt: skip
@click.option(
    "--strategy",
    type=click.Choice(["source-wins", "dest-wins"]),
    help="resolve conflicts this way (default: fail on conflicts)",
)
@click.option("--message", help="commit message (default: the picked commit's)")
@click.option("--committer", help="committer name (default: lsmstore; a server: your key)")
def cherry_pick(
    commit_uri: LsmURI,
    branch: LsmURI,
    parent_number: int,
    strategy: str | None,
    message: str | None,
    committer: str | None,
) -> None:
    """Apply the changes of COMMIT (lsm://REPO/REF) to BRANCH (lsm://REPO/BRANCH) as a
    new commit (lakectl's ``cherry-pick``)."""
    commit_uri.require(ref=True, no_path=True)
    branch.require(ref=True, no_path=True)
    if commit_uri.repository != branch.repository:
        raise click.BadParameter("the commit and the branch must be in one repository")

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(branch.repository)
        c = await repo.branch(branch.ref_or_error).cherry_pick(
            commit_uri.ref_or_error, parent_number=parent_number, strategy=strategy,
            message=message, committer=committer,
        )  # fmt: skip
        return models.commit(c.id, c)

    d = run(body)
    text = f"Cherry-picked {commit_uri} onto {branch}: commit [yellow]{d['id']}[/yellow]"
    out().done(text, data=d)


def register(cli: click.Group) -> None:
    for command in (commit, log, show, diff, merge, cherry_pick):
        cli.add_command(command)
