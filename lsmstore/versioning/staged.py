"""A branch's staged changes (L1 + L2) as one sorted stream of records.

The files a ref names are fetched in parallel (at most :data:`FETCH_CONCURRENCY` at once)
and parsed lazily: a file's blocks are decoded only as the merge reaches them.  The
stream is the newest-wins merge of the L1 files, newest first, over the L2 files
(older than every L1 file, and non-overlapping); tombstones are kept, so a committer
can apply them to the base.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from lsmstore import layout
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.refstore.base import Ref
from lsmstore.staging.merge import merge_newest
from lsmstore.versioning.context import RepoContext

FETCH_CONCURRENCY = 8


async def open_staged(ctx: RepoContext, branch: str, ref: Ref) -> list[SSTReader]:
    """Readers of the ref's staging files in precedence order: L1 newest first, then L2."""
    limit = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def fetch(level: layout.Level, file_id: str) -> SSTReader:
        async with limit:
            return await ctx.staging_reader(branch, level, file_id)

    wanted: list[tuple[layout.Level, str]] = [("L1", f) for f in reversed(ref.l1)]
    wanted += [("L2", f) for f in ref.l2]
    tasks = [asyncio.ensure_future(fetch(level, f)) for level, f in wanted]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:  # the first failure is raised as is (a typed error)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def merged(readers: list[SSTReader], start: bytes = b"") -> Iterator[Record]:
    """One record per key (the newest), tombstones included, in key order, from key
    ``start`` on."""
    return merge_newest([r.seek(start) for r in readers] if start else readers)
