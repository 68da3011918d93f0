"""Moving files between the local disk and a branch: bounded parallelism, streaming
with progress, a local directory walk.  Shared by ``fs upload|download|cp`` and
``import``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from lsmstore.cli.output import Tracker

T = TypeVar("T")

#: Files up to this size are read whole (one thread hop); larger ones are streamed.
SMALL_FILE = 1 << 20
CHUNK = 8 << 20
DEFAULT_PARALLELISM = 16


async def pool(
    items: Iterable[T] | AsyncIterable[T], work: Callable[[T], Awaitable[Any]], parallelism: int
) -> int:
    """Run ``work(item)`` for every item, at most ``parallelism`` at once; the first
    failure cancels the rest and is raised.  Returns the number of items."""
    queue: asyncio.Queue[T] = asyncio.Queue(maxsize=parallelism * 2)
    done = 0
    stop = object()

    async def worker() -> None:
        nonlocal done
        while True:
            item = await queue.get()
            if item is stop:
                return
            await work(item)
            done += 1

    async def feed() -> None:
        if isinstance(items, AsyncIterable):
            async for item in items:
                await queue.put(item)
        else:
            for item in items:
                await queue.put(item)
        for _ in range(parallelism):
            await queue.put(stop)  # type: ignore[arg-type]

    async with asyncio.TaskGroup() as tg:
        tg.create_task(feed())
        for _ in range(parallelism):
            tg.create_task(worker())
    return done


def walk(root: Path) -> list[tuple[Path, str]]:
    """Every regular file under ``root`` as ``(path, relative posix name)``, sorted;
    symbolic links to directories are not followed."""
    found: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_file():
                found.append((p, p.relative_to(root).as_posix()))
    return found


async def file_chunks(path: Path, tracker: Tracker, chunk: int = CHUNK) -> AsyncIterator[bytes]:
    """The file's bytes in chunks (read in a thread), advancing ``tracker``."""
    f = await asyncio.to_thread(path.open, "rb")
    try:
        while True:
            data = await asyncio.to_thread(f.read, chunk)
            if not data:
                return
            tracker.advance(len(data))
            yield data
    finally:
        await asyncio.to_thread(f.close)


async def upload_file(branch: Any, path: Path, dest: str, tracker: Tracker, **options: Any) -> Any:
    """Upload one local file as object ``dest``; returns its ObjectStats."""
    size = (await asyncio.to_thread(path.stat)).st_size
    if size <= SMALL_FILE:
        data = await asyncio.to_thread(path.read_bytes)
        stats = await branch.upload(dest, data, **options)
        tracker.advance(len(data), files=1)
        return stats
    stats = await branch.upload(dest, file_chunks(path, tracker), **options)
    tracker.advance(0, files=1)
    return stats


async def download_to(reader: Any, target: Path, tracker: Tracker) -> int:
    """Stream an open ObjectReader into ``target`` (written to a temporary name, then
    renamed, so a failed download leaves no partial file under the real name)."""
    await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.lsmstore-part")
    f = await asyncio.to_thread(tmp.open, "wb")
    n = 0
    try:
        async for chunk in reader:
            await asyncio.to_thread(f.write, chunk)
            n += len(chunk)
            tracker.advance(len(chunk))
    except BaseException:
        await asyncio.to_thread(f.close)
        await asyncio.to_thread(tmp.unlink, True)
        raise
    await asyncio.to_thread(f.close)
    await asyncio.to_thread(os.replace, tmp, target)
    tracker.advance(0, files=1)
    return n
