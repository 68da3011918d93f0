"""Import cost: wall time, objects/s and peak memory of importing N objects as one commit.

``python -m bench imports [--objects 1000000] [--dir DIR] [--tracemalloc]
[--cache-ram-mib MIB] [--destination PREFIX]``

The source is a prefix of the repository's own (local) namespace whose listing is
*generated*: ``landing/<i>`` with sizes and ETags derived from ``i``, never stored, so
nothing but the import holds the listing (the namespace's store is wrapped through the
store's ``open_objects`` seam; every other call goes to the real local store).  The
import runs as the client's ``Branch.import_start`` does it, in this process: the
listing streamed into committed ranges, grafted onto the branch (which holds 1,000
committed objects, a few of them under the destination, which are replaced), one
commit.  Reported: seconds, objects per second, ranges, and the process's peak RSS
(``ru_maxrss``) before and after, so the import's own peak is their difference -- flat
in N when the listing is not held.  ``--tracemalloc`` also reports Python's traced
peak (slower: every allocation is traced).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import resource
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lsmstore.client import Store
from lsmstore.config import load_config
from lsmstore.storage.base import ForwardingStore, ObjectMeta, ObjectStore
from lsmstore.storage.url import open_object_store
from lsmstore.types import ImportPath

PREFIX = "landing/"


class GeneratedListing(ForwardingStore):
    """The namespace's store, with ``n`` generated objects listed under ``landing/``."""

    def __init__(self, inner: ObjectStore, n: int) -> None:
        super().__init__(inner)
        self.n = n

    def list(self, prefix: str = "", *, after: str | None = None) -> AsyncIterator[ObjectMeta]:
        if prefix.startswith(PREFIX):
            return self._generated(prefix, after)
        return super().list(prefix, after=after)

    async def _generated(self, prefix: str, after: str | None) -> AsyncIterator[ObjectMeta]:
        for i in range(self.n):
            key = f"{PREFIX}{i // 1000:05d}/part-{i % 1000:04d}.parquet"
            if key.startswith(prefix) and (after is None or key > after):
                etag = hashlib.md5(key.encode(), usedforsecurity=False).hexdigest()
                yield ObjectMeta(key, 1 + i % 100_000, etag)
            if i % 1000 == 999:
                await asyncio.sleep(0)  # a listing page


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run(
    n: int, work: Path, traced: bool, cache_mib: int | None, destination: str
) -> dict[str, float]:
    ns = (work / "ns").as_uri()

    def open_objects(url: str) -> ObjectStore:
        inner = open_object_store(url)
        return GeneratedListing(inner, n) if url.rstrip("/") == ns else inner

    cache: dict[str, Any] = {} if cache_mib is None else {"cache_ram_bytes": cache_mib << 20}
    cfg = load_config(home=str(work / "home"), batch_interval_ms=1, **cache)
    async with Store(cfg, open_objects=open_objects) as store:
        repo = await store.create_repository("bench", storage_namespace=ns)
        main = repo.branch("main")
        await asyncio.gather(
            *(main.upload(f"{'dest' if i < 10 else 'other'}/{i:04d}", b"x") for i in range(1000))
        )
        await main.commit("base")
        before = _rss_mib()
        if traced:
            tracemalloc.start()
        t0 = time.perf_counter()
        iid = await main.import_start([ImportPath(f"{ns}/{PREFIX}", destination)], "bench import")
        while (status := await main.import_status(iid)).running:  # noqa: ASYNC110 - polled as a client does
            await asyncio.sleep(0.2)
        seconds = time.perf_counter() - t0
        traced_peak = tracemalloc.get_traced_memory()[1] / 2**20 if traced else 0.0
        if traced:
            tracemalloc.stop()
        if status.error is not None:
            raise SystemExit(f"import failed: {status.error}")
        assert status.ingested_objects == n and status.commit is not None
        mr = await repo.context().source.metarange(status.commit.metarange_id)
        return {
            "objects": n,
            "seconds": seconds,
            "objects_per_s": n / seconds,
            "ranges": len(mr.ranges),
            "rss_before_mib": before,
            "rss_peak_mib": _rss_mib(),
            "traced_peak_mib": traced_peak,
        }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench imports", description=__doc__)
    p.add_argument("--objects", type=int, default=100_000)
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp one)")
    p.add_argument("--tracemalloc", action="store_true", help="also trace Python allocations")
    p.add_argument(
        "--destination",
        default="dest/",
        help="where the objects land (dest/: replaces 10 committed objects, so the tree is "
        "merged onto the base; another prefix: placed beside the base's ranges)",
    )
    p.add_argument(
        "--cache-ram-mib", type=int, default=None, help="the file cache's RAM tier (default: 256)"
    )
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        r = asyncio.run(
            run(args.objects, Path(tmp), args.tracemalloc, args.cache_ram_mib, args.destination)
        )
    print(
        f"import of {r['objects']:,} objects: {r['seconds']:.1f} s, "
        f"{r['objects_per_s']:,.0f} objects/s, {r['ranges']} ranges; peak RSS "
        f"{r['rss_before_mib']:.0f} MiB before the import, {r['rss_peak_mib']:.0f} MiB after"
        + (f"; traced Python peak {r['traced_peak_mib']:.1f} MiB" if args.tracemalloc else "")
    )
    return 0
