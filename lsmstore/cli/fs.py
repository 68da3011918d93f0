"""``lsmstore fs ls|stat|cat|upload|download|rm|cp``: objects on a ref.

A URI path ending with ``/`` (or, for ``ls``, any path) names a directory: the paths
that start with it.  Directory transfers (``-r``) run ``--parallelism`` files at once
and show one progress bar (bytes, rate, ETA) on stderr.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

import lsmstore
from lsmstore.api import StoreAPI
from lsmstore.cli.output import human_size, timestamp
from lsmstore.cli.runtime import URI, out, parse_metadata, run
from lsmstore.cli.transfer import (
    CHUNK,
    DEFAULT_PARALLELISM,
    download_to,
    pool,
    upload_file,
    walk,
)
from lsmstore.errors import ObjectNotFoundError
from lsmstore.types import ObjectStats
from lsmstore.uri import LsmURI

DELETE_BATCH = 1000


def stats_fields(s: ObjectStats) -> dict[str, Any]:
    """An object as lakeFS's ObjectStats JSON names its fields."""
    return {
        "path": s.path,
        "path_type": s.path_type,
        "physical_address": s.physical_address,
        "checksum": s.checksum,
        "size_bytes": s.size,
        "mtime": s.mtime,
        "content_type": s.content_type,
        "metadata": dict(s.metadata),
    }


def _dir_prefix(path: str | None) -> str:
    p = path or ""
    return p if not p or p.endswith("/") else p + "/"


parallelism_option = click.option(
    "-p",
    "--parallelism",
    "--parallel",
    type=click.IntRange(1, 256),
    default=DEFAULT_PARALLELISM,
    show_default=True,
    help="files transferred at once",
)
#: lakectl's ways of reaching the data (straight to the object store, presigned
#: URLs): accepted, with no effect -- data always goes through this store's client.
direct_option = click.option("-d", "--direct", is_flag=True, hidden=True)
presign_option = click.option("--pre-sign", is_flag=True, hidden=True)


async def _not_an_object(ref: Any, uri: LsmURI, command: str) -> ObjectNotFoundError:
    """The error for a path that is no object: when objects live under it, say it
    is a prefix and suggest -r."""
    async for _ in ref.list_objects(prefix=_dir_prefix(uri.path), amount=1):
        hint = {
            "fs rm": f"use 'lsmstore fs rm -r {uri}' to delete every object under it",
        }.get(
            command,
            f"use 'lsmstore fs ls {uri}' to list it, or 'lsmstore fs download -r {uri}' "
            "to read every object under it",
        )
        return ObjectNotFoundError(uri.path_or_empty, f"{uri} is a prefix, not an object: {hint}")
    return ObjectNotFoundError(uri.path_or_empty, f"no object at {uri}")


@click.group("fs")
def fs_group() -> None:
    """List, read, write, copy and delete objects (lsm://REPO/REF/PATH)."""


@fs_group.command("ls")
@click.argument("uri", type=URI)
@click.option("-r", "--recursive", is_flag=True, help="every object under the path")
@click.option("--after", help="start after this path (paging)")
@click.option("--amount", type=click.IntRange(min=1), help="at most this many entries")
def ls(uri: LsmURI, recursive: bool, after: str | None, amount: int | None) -> None:
    """List the objects and directories under URI (lsm://REPO/REF[/PREFIX])."""
    uri.require(ref=True)
    prefix = _dir_prefix(uri.path)

    async def body(store: StoreAPI) -> list[dict[str, Any]]:
        repo = await store.get_repository(uri.repository)
        ref = repo.ref(uri.ref_or_error)
        return [
            stats_fields(s)
            async for s in ref.list_objects(
                prefix=prefix, delimiter="" if recursive else "/", after=after, amount=amount
            )
        ]

    rows = run(body)
    shown = []
    for r in rows:
        directory = r["path_type"] == "common_prefix"
        shown.append(
            {
                "type": "dir" if directory else "object",
                "modified": "" if directory else timestamp(r["mtime"]),
                "size": "" if directory else human_size(r["size_bytes"]),
                "path": r["path"][len(prefix) :],
            }
        )
    out().table(shown, ["type", "modified", "size", "path"], styles={"path": "bold"}, data=rows)


@fs_group.command("stat")
@click.argument("uri", type=URI)
@presign_option
def stat(uri: LsmURI, pre_sign: bool) -> None:
    """Show the object at URI: size, checksum, physical address, metadata."""
    uri.require(path=True)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        ref = repo.ref(uri.ref_or_error)
        try:
            return stats_fields(await ref.stat_object(uri.path_or_empty))
        except ObjectNotFoundError:
            raise await _not_an_object(ref, uri, "fs stat") from None

    d = run(body)
    out().record(
        {
            "path": d["path"],
            "size": f"{d['size_bytes']} ({human_size(d['size_bytes'])})",
            "modified": timestamp(d["mtime"]),
            "checksum": d["checksum"],
            "content type": d["content_type"],
            "physical address": d["physical_address"],
            "metadata": d["metadata"],
        },
        data=d,
    )


@fs_group.command("cat")
@click.argument("uri", type=URI)
@direct_option
@presign_option
def cat(uri: LsmURI, direct: bool, pre_sign: bool) -> None:
    """Write the object at URI to stdout."""
    uri.require(path=True)
    o = out()

    async def body(store: StoreAPI) -> None:
        repo = await store.get_repository(uri.repository)
        ref = repo.ref(uri.ref_or_error)
        try:
            reader = await ref.open(uri.path_or_empty)
        except ObjectNotFoundError:
            raise await _not_an_object(ref, uri, "fs cat") from None
        async with reader:
            async for chunk in reader:
                o.write_bytes(chunk)

    run(body)


def _upload_operands(
    operands: tuple[str, ...], source_option: str | None, ctx: click.Context
) -> tuple[str, LsmURI]:
    """``LOCAL URI`` (ours) or ``URI -s LOCAL`` (lakectl's) -> (local, uri)."""
    if source_option is not None:
        if len(operands) != 1:
            raise click.UsageError("with -s/--source give one URI (lakectl's form)", ctx)
        return source_option, URI.convert(operands[0], None, ctx)
    if len(operands) != 2:
        raise click.UsageError("expected LOCAL URI, or URI -s LOCAL (lakectl's form)", ctx)
    return operands[0], URI.convert(operands[1], None, ctx)


async def _stdin_chunks() -> AsyncIterator[bytes]:
    while data := await asyncio.to_thread(sys.stdin.buffer.read, CHUNK):
        yield data


@fs_group.command("upload")
@click.argument("operands", nargs=-1, metavar="LOCAL URI | URI -s LOCAL")
@click.option(
    "-s", "--source", "source_option", metavar="LOCAL", help="the local file or directory, "
    "or - for stdin (lakectl's form)",
)  # fmt: skip
@click.option("-r", "--recursive", is_flag=True, help="upload a directory's files")
@click.option("--content-type", help="content type of the objects")
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="user metadata (repeatable)")
@parallelism_option
@direct_option
@presign_option
@click.pass_context
def upload(
    ctx: click.Context,
    operands: tuple[str, ...],
    source_option: str | None,
    recursive: bool,
    content_type: str | None,
    meta: tuple[str, ...],
    parallelism: int,
    direct: bool,
    pre_sign: bool,
) -> None:
    """Upload a local file (or, with -r, a directory) to branch URI.

    A URI path ending with / receives the file under its own name (or the
    directory's files under their relative names)."""
    local, uri = _upload_operands(operands, source_option, ctx)
    uri.require(ref=True)
    options: dict[str, Any] = {"content_type": content_type, "metadata": parse_metadata(meta)}
    o = out()
    if local == "-":
        uri.require(path=True)
        if uri.path_or_empty.endswith("/"):
            raise click.UsageError(f"{uri} names a directory: give the object's path", ctx)

        async def from_stdin(store: StoreAPI) -> dict[str, Any]:
            repo = await store.get_repository(uri.repository)
            branch = repo.branch(uri.ref_or_error)
            s = await branch.upload(uri.path_or_empty, _stdin_chunks(), **options)
            return {"objects": 1, "bytes": s.size, "uploaded": [stats_fields(s)]}

        d = run(from_stdin)
        o.done(f"Uploaded 1 object, {human_size(d['bytes'])}, to {escape(str(uri))}", data=d)
        return
    source = Path(local)
    if not source.exists():
        raise click.BadParameter(f"{local}: no such file or directory", ctx, param_hint="LOCAL")
    is_dir = source.is_dir()
    if is_dir and not recursive:
        raise click.UsageError(f"{source} is a directory: use -r to upload it")
    size = 0 if is_dir else source.stat().st_size

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        branch = repo.branch(uri.ref_or_error)
        if not is_dir:
            dest = uri.path_or_empty
            if not dest or dest.endswith("/"):
                dest += source.name
            with o.transfer(f"upload {source.name}", total_bytes=size) as t:
                s = await upload_file(branch, source, dest, t, **options)
            return {"objects": 1, "bytes": s.size, "uploaded": [stats_fields(s)]}
        files = await asyncio.to_thread(walk, source)
        total = await asyncio.to_thread(lambda: sum(p.stat().st_size for p, _ in files))
        prefix = _dir_prefix(uri.path)
        with o.transfer(f"upload {source.name}/", total_bytes=total) as t:

            async def one(item: tuple[Path, str]) -> None:
                await upload_file(branch, item[0], prefix + item[1], t, **options)

            await pool(files, one, parallelism)
        return {"objects": len(files), "bytes": total}

    d = run(body)
    o.done(
        f"Uploaded {d['objects']} object(s), {human_size(d['bytes'])}, to {escape(str(uri))}",
        data=d,
    )


@fs_group.command("download")
@click.argument("uri", type=URI)
@click.argument("target_text", metavar="TARGET", type=click.Path(), required=False)
@click.option("-r", "--recursive", is_flag=True, help="download every object under the path")
@parallelism_option
@direct_option
@presign_option
def download(
    uri: LsmURI,
    target_text: str | None,
    recursive: bool,
    parallelism: int,
    direct: bool,
    pre_sign: bool,
) -> None:
    """Download the object at URI (or, with -r, every object under it) to TARGET
    (default: the current directory).  A TARGET ending with / or naming a directory
    receives the object under its own name (the directory is created)."""
    uri.require(ref=True)
    o = out()
    into_dir = target_text is not None and target_text.endswith(("/", os.sep))
    target = Path(target_text) if target_text is not None else None

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        ref = repo.ref(uri.ref_or_error)
        if not recursive:
            path = uri.path_or_empty
            if not path or path.endswith("/"):
                raise click.UsageError(f"{uri} names a directory: use -r to download it")
            dest = target or Path(posixpath.basename(path))
            if into_dir or dest.is_dir():
                dest = dest / posixpath.basename(path)
            try:
                opened = await ref.open(path)
            except ObjectNotFoundError:
                raise await _not_an_object(ref, uri, "fs download") from None
            async with opened as reader:
                with o.transfer(
                    f"download {posixpath.basename(path)}", total_bytes=reader.size
                ) as t:
                    n = await download_to(reader, dest, t)
            return {"objects": 1, "bytes": n, "target": str(dest)}
        prefix = _dir_prefix(uri.path)
        root = target or Path(posixpath.basename(prefix.rstrip("/")) or uri.repository)
        objects = [s async for s in ref.list_objects(prefix=prefix)]
        total = sum(s.size for s in objects)
        with o.transfer(f"download {prefix or '/'}", total_bytes=total) as t:

            async def one(s: ObjectStats) -> None:
                rel = s.path[len(prefix) :]
                dest = (root / rel).resolve()
                if not dest.is_relative_to(root.resolve()):
                    raise lsmstore.InvalidInputError(f"object path {s.path!r} leaves {root}")
                async with await ref.open(s.path) as reader:
                    await download_to(reader, dest, t)

            await pool(objects, one, parallelism)
        return {"objects": len(objects), "bytes": total, "target": str(root)}

    d = run(body)
    o.done(
        f"Downloaded {d['objects']} object(s), {human_size(d['bytes'])}, to {escape(d['target'])}",
        data=d,
    )


@fs_group.command("rm")
@click.argument("uri", type=URI)
@click.option("-r", "--recursive", is_flag=True, help="delete every object under the path")
@click.option("-C", "--concurrency", type=click.IntRange(min=1), hidden=True)  # lakectl's
def rm(uri: LsmURI, recursive: bool, concurrency: int | None) -> None:
    """Delete the object at URI (or, with -r, every object under it) from its branch."""
    uri.require(ref=True)
    if not recursive:
        uri.require(path=True)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(uri.repository)
        branch = repo.branch(uri.ref_or_error)
        if not recursive:
            try:
                await branch.delete_object(uri.path_or_empty)
            except ObjectNotFoundError:
                raise await _not_an_object(branch, uri, "fs rm") from None
            return {"deleted": 1}
        prefix = _dir_prefix(uri.path)
        batch: list[str] = []
        n = 0
        async for s in branch.list_objects(prefix=prefix):
            batch.append(s.path)
            if len(batch) >= DELETE_BATCH:
                await branch.delete_objects(batch)
                n += len(batch)
                batch = []
        if batch:
            await branch.delete_objects(batch)
            n += len(batch)
        return {"deleted": n}

    d = run(body)
    out().done(f"Deleted {d['deleted']} object(s) under {escape(str(uri))}", data=d)


@fs_group.command("cp")
@click.argument("source", type=URI)
@click.argument("destination", type=URI)
@click.option("-r", "--recursive", is_flag=True, help="copy every object under the path")
@parallelism_option
def cp(source: LsmURI, destination: LsmURI, recursive: bool, parallelism: int) -> None:
    """Copy objects from SOURCE (lsm://REPO/REF/PATH) to branch DESTINATION.

    Within a repository no data is copied (the new entry shares the physical
    address); across repositories the data is streamed through this process."""
    source.require(ref=True)
    destination.require(ref=True)
    if not recursive:
        source.require(path=True)
    o = out()

    async def body(store: StoreAPI) -> dict[str, Any]:
        src_repo = await store.get_repository(source.repository)
        dst_repo = await store.get_repository(destination.repository)
        src_ref = src_repo.ref(source.ref_or_error)
        dst = dst_repo.branch(destination.ref_or_error)
        same_repo = source.repository == destination.repository

        async def copy(src_path: str, dst_path: str) -> None:
            if same_repo:
                await dst.copy_object(src_path, dst_path, src_ref=source.ref_or_error)
                return
            async with await src_ref.open(src_path) as reader:
                st = reader.stats
                await dst.upload(
                    dst_path,
                    reader.iter_chunks(),
                    content_type=st.content_type or None,
                    metadata=st.metadata,
                )

        if not recursive:
            src_path = source.path_or_empty
            dst_path = destination.path_or_empty
            if not dst_path or dst_path.endswith("/"):
                dst_path += posixpath.basename(src_path)
            await copy(src_path, dst_path)
            return {"copied": 1}
        sp, dp = _dir_prefix(source.path), _dir_prefix(destination.path)
        objects = [s.path async for s in src_ref.list_objects(prefix=sp)]
        with o.counting(f"copy {sp or '/'}", total=len(objects)) as t:

            async def one(path: str) -> None:
                await copy(path, dp + path[len(sp) :])
                t.advance(files=1)

            await pool(objects, one, parallelism)
        return {"copied": len(objects)}

    d = run(body)
    o.done(f"Copied {d['copied']} object(s) to {escape(str(destination))}", data=d)


def register(cli: click.Group) -> None:
    cli.add_command(fs_group)
