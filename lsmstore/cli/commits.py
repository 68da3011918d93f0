"""``lsmstore commit``, ``log``, ``show``, ``diff``, ``merge``."""

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
@click.option("-m", "--message", help="commit message")
@click.option("--allow-empty-message", is_flag=True, help="commit without a message")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="metadata (repeatable)")
@click.option(
    "--committer",
    help="committer name (default: the user setting, LSMSTORE_USER, else the OS user; "
    "a server: your key)",
)
@click.option(
    "--allow-empty", "--allow-empty-commit", "allow_empty", is_flag=True,
    help="commit even with nothing staged",
)  # fmt: skip
def commit(
    uri: LsmURI,
    message: str | None,
    allow_empty_message: bool,
    meta: tuple[str, ...],
    committer: str | None,
    allow_empty: bool,
) -> None:
    """Commit the uncommitted changes of branch URI (lsm://REPO/BRANCH)."""
    uri.require(ref=True, no_path=True)
    if not message and not allow_empty_message:
        raise click.UsageError("a commit needs a message: -m MESSAGE (or --allow-empty-message)")
    message = message or ""
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
@click.option("--dot", is_flag=True, help="the commit graph in Graphviz's dot language")
@click.option("--limit", is_flag=True, hidden=True)  # lakectl's: --amount already limits
@click.option("--show-meta-range-id", is_flag=True, hidden=True)  # always in the JSON
@click.option(
    "--objects", "--prefixes", "paths", multiple=True, metavar="PATH[,PATH...]",
    help="only commits that change one of these paths (or prefixes)",
)  # fmt: skip
def log(
    uri: LsmURI,
    amount: int | None,
    after: str | None,
    first_parent: bool | None,
    graph: bool,
    dot: bool,
    limit: bool,
    show_meta_range_id: bool,
    paths: tuple[str, ...],
) -> None:
    """Commits reachable from URI (lsm://REPO/REF), newest first."""
    uri.require(ref=True, no_path=True)
    fp = (not graph and not dot) if first_parent is None else first_parent
    wanted = tuple(p.encode() for arg in paths for p in arg.split(",") if p)

    async def touches(repo: Any, entry: Any) -> bool:
        parents = entry.commit.parents
        if not parents:
            return False
        async for change in repo.diff(parents[0], entry.id):
            if change.key.startswith(wanted):
                return True
        return False

    async def body(store: StoreAPI) -> list[dict[str, Any]]:
        repo = await store.get_repository(uri.repository)
        found: list[dict[str, Any]] = []
        limit_ = None if wanted else amount
        async for e in repo.log(uri.ref_or_error, after=after, limit=limit_, first_parent=fp):
            if wanted and not await touches(repo, e):
                continue
            found.append(models.commit(e.id, e.commit))
            if amount is not None and len(found) >= amount:
                break
        return found

    entries = run(body)
    if dot and not settings().out.json:
        graph_lines = ["digraph {", '  rankdir="BT"']
        for e in entries:
            label = escape(e["message"]).replace('"', "'")
            graph_lines.append(f'  "{e["id"]}" [label="{e["id"][:8]} {label}"]')
            graph_lines.extend(f'  "{e["id"]}" -> "{p}"' for p in e["parents"])
        graph_lines.append("}")
        out().lines(graph_lines, data=entries)
        return
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
@click.argument("operands", nargs=-1, required=True, metavar="[commit] URI")
@click.option("--show-meta-range-id", is_flag=True, hidden=True)  # lakectl's; always shown
@click.pass_context
def show(ctx: click.Context, operands: tuple[str, ...], show_meta_range_id: bool) -> None:
    """Show the commit URI (lsm://REPO/REF) names (lakectl: show commit URI)."""
    if len(operands) == 2 and operands[0] == "commit":
        operands = operands[1:]
    if len(operands) != 1:
        raise click.UsageError("expected URI or 'commit URI'", ctx)
    uri = URI.convert(operands[0], None, ctx).require(ref=True, no_path=True)

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


async def merge_base(repo: Any, left: str, right: str) -> str:
    """The newest commit reachable from both refs (the start of a three-dot diff)."""
    seen = {e.id async for e in repo.log(left, first_parent=False)}
    async for e in repo.log(right, first_parent=False):
        if e.id in seen:
            return str(e.id)
    raise lsmstore.InvalidInputError(f"{left} and {right} have no commit in common")


async def ref_head(repo: lsmstore.Repository, uri: LsmURI) -> str:
    return (await repo.branch(uri.ref_or_error).head()).base


_MARK = {"added": ("+", "green"), "removed": ("-", "red"), "changed": ("~", "yellow")}


@click.command("diff")
@click.argument("left", type=URI)
@click.argument("right", type=URI, required=False)
@click.option("--prefix", default="", help="only paths starting with this")
@click.option(
    "--two-way/--three-way",
    default=None,
    help="LEFT's tip to RIGHT's tip (two-dot; the default with lsm://), or from their "
    "merge base to RIGHT (three-dot; lakectl's default, so the default with lakefs://)",
)
def diff(left: LsmURI, right: LsmURI | None, prefix: str, two_way: bool | None) -> None:
    """Changes between two refs (LEFT -> RIGHT, both lsm://REPO/REF), or with one
    branch its uncommitted changes."""
    left.require(ref=True, no_path=True)
    if right is not None:
        right.require(ref=True, no_path=True)
        if right.repository != left.repository:
            raise click.BadParameter("both refs must be in one repository", param_hint="RIGHT")
    three_way = not two_way if two_way is not None else settings().lakefs_scheme

    async def body(store: StoreAPI) -> list[dict[str, Any]]:
        repo = await store.get_repository(left.repository)
        if right is None:
            changes = await repo.branch(left.ref_or_error).diff_uncommitted()
        else:
            start = left.ref_or_error
            if three_way:
                start = await merge_base(repo, start, right.ref_or_error)
            changes = [c async for c in repo.diff(start, right.ref_or_error)]
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
@click.option(
    "--committer",
    help="committer name (default: the user setting, LSMSTORE_USER, else the OS user; "
    "a server: your key)",
)
@click.option(
    "--squash", is_flag=True, help="one commit whose only parent is the destination's head"
)
@click.option("--allow-empty", is_flag=True, hidden=True)  # lakectl's; nothing to merge is fine
def merge(
    source: LsmURI,
    destination: LsmURI,
    strategy: str | None,
    message: str | None,
    meta: tuple[str, ...],
    committer: str | None,
    squash: bool,
    allow_empty: bool,
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


def register(cli: click.Group) -> None:
    for command in (commit, log, show, diff, merge):
        cli.add_command(command)
