"""``python -m committer`` / ``lsmstore-committer``: run the committer worker.

::

    lsmstore-committer [--refstore URL] [--config FILE] [--once] [--interval SECONDS]
                       [--force] [--repository NAME ...] [--owner NAME]

Settings come from :mod:`lsmstore.config` (``commit_*``; file, ``LSMSTORE_*``
variables); the flags override them.  Logs are JSON lines on stdout.  SIGTERM or
SIGINT stops the worker: running commits get a grace period to finish, then are
abandoned (safe: see docs/versioning.md); the exit status is 0.  Exit status 2 means
bad arguments or configuration.

For crash tests, ``COMMITTER_PAUSE_AT=<step>`` makes the worker print
``{"event": "paused", "step": ...}`` and wait forever when a commit reaches ``step``:
``range-uploaded`` (the first new range is stored, the metarange not yet) or one of
the job's steps (``staged-read``, ``tree-written``, ``commit-written``, ``swapped``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import uvloop

from committer.job import STEPS
from committer.worker import Worker
from lsmstore import layout
from lsmstore.cache import FileCache
from lsmstore.config import load_config
from lsmstore.errors import InvalidInputError
from lsmstore.refstore.url import open_refstore
from lsmstore.storage.base import ObjectMeta, ObjectStore, PutMode

PAUSE_ENV = "COMMITTER_PAUSE_AT"
PAUSE_STEPS = ("range-uploaded", *STEPS)


class _PauseAfterRangeUpload(ObjectStore):
    """Passes everything to ``inner``; after the first committed range is stored, calls
    ``pause`` (used only for crash tests)."""

    def __init__(self, inner: ObjectStore, pause: Callable[[], Awaitable[None]]) -> None:
        self.inner = inner
        self.url = inner.url
        self._pause = pause

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return await self.inner.get_range(key, start, end)

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        await self.inner.put(key, data, mode)
        if key.startswith(layout.RANGES):
            await self._pause()

    async def head(self, key: str) -> ObjectMeta:
        return await self.inner.head(key)

    async def delete(self, key: str, *, missing_ok: bool = True) -> None:
        await self.inner.delete(key, missing_ok=missing_ok)

    def list(self, prefix: str = "", *, after: str | None = None) -> AsyncIterator[ObjectMeta]:
        return self.inner.list(prefix, after=after)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _pause_forever(step: str) -> None:
    sys.stdout.write(f'{{"event": "paused", "step": "{step}"}}\n')
    sys.stdout.flush()
    await asyncio.Event().wait()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lsmstore-committer", description="Commit branches' staged changes by policy."
    )
    p.add_argument("--refstore", help="RefStore URL (local:///dir, redis://..., dynamodb://...)")
    p.add_argument("--config", help="TOML configuration file")
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.add_argument("--interval", type=float, help="seconds between passes (commit_poll_interval_s)")
    p.add_argument("--force", action="store_true", help="commit every branch with staged changes")
    p.add_argument(
        "--repository", action="append", default=[], help="only this repository (repeatable)"
    )
    p.add_argument(
        "--owner",
        help="lease owner name (default host:pid:random); give a restarted worker the same "
        "name to take back its leases at once",
    )
    return p


async def _run(args: argparse.Namespace) -> None:
    overrides = {} if args.interval is None else {"commit_poll_interval_s": args.interval}
    config = load_config(args.refstore, config=args.config, **overrides)
    pause_at = os.environ.get(PAUSE_ENV, "")
    if pause_at and pause_at not in PAUSE_STEPS:
        raise InvalidInputError(f"{PAUSE_ENV}={pause_at!r}: expected one of {PAUSE_STEPS}")

    async def on_step(step: str) -> None:
        if step == pause_at:
            await _pause_forever(step)

    def wrap(store: ObjectStore) -> ObjectStore:
        return _PauseAfterRangeUpload(store, lambda: _pause_forever("range-uploaded"))

    refstore = open_refstore(config.refstore_url)
    # Ranges and metaranges a commit reads stay in RAM for the next commits (no disk tier:
    # a worker is stateless).
    files = FileCache(ram_bytes=config.cache_ram_bytes, disk_dir=None, disk_bytes=0)
    worker = Worker(
        refstore,
        config,
        repositories=args.repository,
        force=args.force,
        owner=args.owner,
        files=files,
        on_step=on_step if pause_at else None,
        wrap_objects=wrap if pause_at == "range-uploaded" else None,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    try:
        await worker.run(once=args.once)
    finally:
        await worker.aclose()
        await files.aclose()
        await refstore.aclose()


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(_run(args))
    except InvalidInputError as e:
        print(f"lsmstore-committer: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
