"""``lsmstore import SOURCE lsm://REPO/BRANCH[/PREFIX]``: bring data in as one commit;
``lsmstore import --from URI --to lsm://REPO/BRANCH[/PREFIX]``: the same through the
import API (lakectl's form, below).

SOURCE is a local directory (its files are uploaded, ``--parallelism`` at once) or an
object-store prefix (``s3://bucket/prefix/``, ``file:///dir/``: the objects are
*linked* -- their entries point at the data where it is, nothing is copied; the
prefix must be inside the repository's storage namespace or one of its allowed
external prefixes).  Then the branch is committed, so the import is one commit.

The branch must have no uncommitted changes when the import starts (else the commit
would carry them too; ``--allow-dirty`` accepts that).  A crash part-way leaves the
objects imported so far staged on the branch: run the import again (same paths are
overwritten with the same data) or ``lsmstore branch reset``.

``--from``/``--to`` is lakectl's ``import``: the object-store prefix ``--from`` is
imported by the import API (``Branch.import_start``, lsmstore.operations.imports) --
the destination prefix replaced, one commit, nothing staged on the way, staged writes
left alone -- and the command follows its status until it ends, showing the objects
listed so far; Ctrl-C cancels it.  With a server it runs on the server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import click
from rich.markup import escape

import lsmstore
from lsmstore.api import StoreAPI
from lsmstore.cli.output import Tracker, human_size
from lsmstore.cli.runtime import URI, out, parse_metadata, run
from lsmstore.cli.transfer import DEFAULT_PARALLELISM, pool, upload_file, walk
from lsmstore.operations.imports import md5_of
from lsmstore.server import models
from lsmstore.storage.url import open_object_store
from lsmstore.types import ImportPath, ObjectLink
from lsmstore.uri import LsmURI

LINK_BATCH = 1000


def _dir_prefix(path: str | None) -> str:
    p = path or ""
    return p if not p or p.endswith("/") else p + "/"


async def _import_local(
    branch: Any, root: Path, prefix: str, parallelism: int, tracker: Tracker
) -> tuple[int, int]:
    files = await asyncio.to_thread(walk, root)
    total = await asyncio.to_thread(lambda: sum(p.stat().st_size for p, _ in files))
    tracker.add_total(total)

    async def one(item: tuple[Path, str]) -> None:
        await upload_file(branch, item[0], prefix + item[1], tracker)

    await pool(files, one, parallelism)
    return len(files), total


async def _import_store(branch: Any, url: str, prefix: str, tracker: Tracker) -> tuple[int, int]:
    """Link every object under the store URL ``url`` (``scheme://bucket/dir/?query``)."""
    parts = urlsplit(url)
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    store = open_object_store(url)
    n = total = 0
    batch: list[ObjectLink] = []
    try:
        async for meta in store.list(""):
            checksum = (meta.etag or "").strip('"') or await md5_of(store, meta.key)
            batch.append(
                ObjectLink(
                    path=prefix + meta.key,
                    physical_address=f"{base}/{meta.key}",
                    size=meta.size,
                    checksum=checksum,
                )
            )
            total += meta.size
            if len(batch) >= LINK_BATCH:
                await branch.link_many(batch)
                n += len(batch)
                tracker.advance(files=len(batch))
                batch = []
        if batch:
            await branch.link_many(batch)
            n += len(batch)
            tracker.advance(files=len(batch))
    finally:
        await store.aclose()
    return n, total


@click.command("import")
@click.argument("source", required=False)
@click.argument("uri", type=URI, required=False)
@click.option("--from", "from_", metavar="URL", help="lakectl's form: the prefix to import")
@click.option("--to", metavar="URI", type=URI, help="lakectl's form: where it lands")
@click.option("--merge", is_flag=True, hidden=True)
@click.option("--no-progress", is_flag=True, hidden=True)
@click.option("-m", "--message", help="commit message (default: Import SOURCE)")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="commit metadata (repeatable)")
@click.option("--allow-dirty", is_flag=True, help="import onto a branch with staged changes")
@click.option(
    "-p",
    "--parallelism",
    type=click.IntRange(1, 256),
    default=DEFAULT_PARALLELISM,
    show_default=True,
    help="local files uploaded at once",
)
def import_(
    source: str | None,
    uri: LsmURI | None,
    from_: str | None,
    to: LsmURI | None,
    merge: bool,
    no_progress: bool,
    message: str | None,
    meta: tuple[str, ...],
    allow_dirty: bool,
    parallelism: int,
) -> None:
    """Import SOURCE (a local directory or an object-store prefix) under branch URI,
    as one commit."""
    if from_ is not None or to is not None:
        if from_ is None or to is None or source is not None or uri is not None:
            raise click.UsageError("lakectl's form is --from URI --to lsm://REPO/BRANCH/PATH")
        _import_api(from_, to, message, meta)
        return
    if source is None or uri is None:
        raise click.UsageError("expected SOURCE URI")
    uri.require(ref=True)
    metadata = {"import_source": source, **parse_metadata(meta)}
    local = Path(source)
    is_store = "://" in source
    if not is_store and not local.is_dir():
        raise click.BadParameter(f"{source} is not a directory", param_hint="SOURCE")
    o = out()

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        branch = repo.branch(uri.ref_or_error)
        head = await branch.head()
        if (head.l1 or head.l2) and not allow_dirty:
            raise lsmstore.InvalidInputError(
                f"lsm://{uri.repository}/{uri.ref} has uncommitted changes: commit or reset them "
                "first, or pass --allow-dirty to commit them with the import"
            )
        prefix = _dir_prefix(uri.path)
        if is_store:
            with o.counting(f"link {source}") as t:
                count, size = await _import_store(branch, source, prefix, t)
        else:
            with o.transfer(f"import {local.name}/", total_bytes=0) as t:
                count, size = await _import_local(branch, local, prefix, parallelism, t)
        with o.spinner(f"committing {count} objects"):
            c = await branch.commit(message or f"Import {source}", metadata=metadata)
        new_head = await branch.head()
        return {"objects": count, "bytes": size, "commit": models.commit(new_head.base, c)}

    d = run(body)
    o.done(
        f"Imported {d['objects']} object(s), {human_size(d['bytes'])}, into "
        f"{escape(str(uri))}: commit [yellow]{d['commit']['id']}[/yellow]",
        data=d,
    )


#: How often ``--from/--to`` reads the import's status.
POLL_S = 0.5


def _import_api(source: str, to: LsmURI, message: str | None, meta: tuple[str, ...]) -> None:
    to.require(ref=True)
    metadata = parse_metadata(meta)
    o = out()

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(to.repository)
        branch = repo.branch(to.ref_or_error)
        import_id = await branch.import_start(
            [ImportPath(source, _dir_prefix(to.path))],
            message or f"Import from {source}",
            metadata=metadata,
        )
        seen = 0
        try:
            with o.counting(f"import {source}") as t:
                while (status := await branch.import_status(import_id)).running:
                    t.advance(files=status.ingested_objects - seen)
                    seen = status.ingested_objects
                    await asyncio.sleep(POLL_S)
                t.advance(files=status.ingested_objects - seen)
        except (asyncio.CancelledError, KeyboardInterrupt):
            await branch.import_cancel(import_id)
            raise
        if status.error is not None:
            raise lsmstore.ConflictError(f"import {import_id} failed: {status.error}")
        assert status.commit is not None and status.commit_id is not None
        return {
            "id": import_id,
            "objects": status.ingested_objects,
            "commit": models.commit(status.commit_id, status.commit),
        }

    d = run(body)
    o.done(
        f"Imported {d['objects']} object(s) into {escape(str(to))}: commit "
        f"[yellow]{d['commit']['id']}[/yellow]",
        data=d,
    )


def register(cli: click.Group) -> None:
    cli.add_command(import_)
