"""Compaction throughput, and random point reads before and after compaction.

``python -m bench compaction [--files 10,100,1000] [--records 1000] [--reads 3000]
[--dir DIR] [--seed 1] [--rounds 1]``

For each file count F: a fresh branch (embedded RefStore, local object store under
``--dir``) gets F L1 files of ``--records`` records each (random 40-byte keys from a
space 4x the record count, so files overlap; ~150-byte values; 32-byte identities),
written the way the writer writes them.  Then:

* **reads before**: ``--reads`` random point reads of written keys through the real
  read path (:class:`lsmstore.staging.reader.Snapshot`, every file already parsed in
  an in-memory cache, so this is the CPU cost of consulting F files' sidecars and SSTs);
* **compaction**: one job over all F files (``compaction_job_files = F``), timed from
  reading the ref to the swap -- records and MB (SST bytes read) per second;
* **reads after**: the same reads against the compacted branch (L2 only);
* **loop stall**: how long a 1 ms ticker task waited for the event loop during the
  compaction (what a writer in the same process would wait: in-process compaction),
  99th percentile and maximum, and the maximum over one idle second before it (the
  noise floor of a shared machine);
* for the largest F, if over 128, also the default policy (jobs of at most 128 files,
  each merged with the L2 the previous ones wrote), timed end to end.

Prints a Markdown table (with ``--rounds N``, the fastest of N runs of each case); the
load average at the start is printed with it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import platform
import random
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from lsmstore import layout
from lsmstore.compaction.merge_worker import MergeWorker
from lsmstore.compaction.runner import Compactor
from lsmstore.graveler.record import Record
from lsmstore.graveler.source import DirectSource
from lsmstore.refstore.base import Ref, RefStore, Repository
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.files import SIDECAR_SUFFIX, SST_SUFFIX, encode_staging_file, new_file_id
from lsmstore.staging.reader import Files, SidecarCache, Snapshot
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.local import LocalStore
from lsmstore.testing.compaction import make_config

T = TypeVar("T")
REPO = "bench"
BRANCH = "main"


def make_key(i: int) -> bytes:
    return (b"tables/events/obj-%012d.parquet" % i).ljust(40, b"_")[:40]


def make_value(rng: random.Random) -> bytes:
    return b'{"etag":"%s","size":%d,"mtime":%d,"class":"STANDARD","owner":"%s","t":"%s"}' % (
        rng.randbytes(16).hex().encode(),
        rng.randrange(1 << 30),
        1_700_000_000 + rng.randrange(1 << 24),
        rng.randbytes(8).hex().encode(),
        b"application/octet-stream",
    )


class DictCache:
    """A FileCacheLike keeping every parsed file in RAM (a warm cache)."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], Any] = {}

    async def get(
        self, store: ObjectStore, key: str, parse: Callable[[bytes, str], T], *, kind: str = ""
    ) -> T:
        k = (store.url, key)
        if k not in self.items:
            self.items[k] = parse(await store.get(key), key)
        found: T = self.items[k]
        return found

    def peek(self, store: ObjectStore, key: str, *, kind: str = "") -> Any:
        return self.items.get((store.url, key))


async def write_l1(
    refstore: RefStore, objects: ObjectStore, files: int, records: int, rng: random.Random
) -> list[bytes]:
    space = files * records * 4
    written: list[bytes] = []
    for _ in range(files):
        keys = sorted({make_key(rng.randrange(space)) for _ in range(records)})
        recs = []
        for k in keys:
            v = make_value(rng)
            recs.append(Record(k, hashlib.sha256(v).digest(), v))
        sst, meta, _ = await asyncio.to_thread(encode_staging_file, recs, 0.01)
        fid = new_file_id()
        await objects.put(layout.staging_key(BRANCH, "L1", fid, SIDECAR_SUFFIX), meta)
        await objects.put(layout.staging_key(BRANCH, "L1", fid, SST_SUFFIX), sst)
        await refstore.append_l1(REPO, BRANCH, fid)
        written.extend(keys)
    return written


async def read_rate(
    refstore: RefStore, objects: ObjectStore, keys: list[bytes]
) -> tuple[float, int]:
    """Point reads per second through a snapshot whose files are all cached."""
    ref = await refstore.get_ref(REPO, BRANCH)
    files = Files(objects, DictCache(), DirectSource(objects), SidecarCache(100_000))
    snap = await Snapshot.load(ref, files, BRANCH)
    for k in keys:  # warm: every file parsed once
        await snap.lookup(k)
    t0 = time.perf_counter()
    found = 0
    for k in keys:
        rec, _ = await snap.lookup(k)
        found += rec is not None
    return len(keys) / (time.perf_counter() - t0), found


async def tick(stalls: list[float]) -> None:
    """A 1 ms ticker: how long the event loop was unavailable (writers in the same
    process wait that long)."""
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        stalls.append(time.perf_counter() - t0 - 0.001)


def _hwm_mib(pid: int | None) -> float:
    """Peak resident memory of a process (``VmHWM``), MiB; NaN if unknown."""
    if pid is None:
        return float("nan")
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


async def one(
    root: Path,
    files: int,
    records: int,
    reads: int,
    seed: int,
    default_policy: bool,
    merge: str = "loop",
) -> dict[str, Any]:
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(seed)
    async with EmbeddedRefStore(root / "refs", synchronous="NORMAL") as refstore:
        objects = LocalStore(root / "data")
        await refstore.create_repository(Repository(REPO, (root / "data").as_uri(), BRANCH))
        await refstore.create_ref(REPO, BRANCH, Ref("branch", ""))
        keys = await write_l1(refstore, objects, files, records, rng)
        probes = [rng.choice(keys) for _ in range(reads)]
        before, found_before = await read_rate(refstore, objects, probes)
        job_files = 128 if default_policy else files
        cfg = make_config(compaction_job_files=job_files, compaction_job_bytes="4GiB")
        merger = MergeWorker() if merge == "process" else None
        compactor = Compactor(refstore, cfg, on_result=lambda doc: None, merger=merger)
        idle: list[float] = []
        ticker = asyncio.create_task(tick(idle))
        await asyncio.sleep(1.0)  # the noise floor: the same ticker with nothing to do
        ticker.cancel()
        stalls: list[float] = []
        ticker = asyncio.create_task(tick(stalls))
        t0, cpu0 = time.perf_counter(), time.thread_time()
        results = await compactor.compact(REPO, BRANCH, objects, force=True)
        seconds = time.perf_counter() - t0
        loop_cpu = time.thread_time() - cpu0
        ticker.cancel()
        merge_rss = _hwm_mib(merger.pid) if merger is not None else float("nan")
        if merger is not None:
            await merger.aclose()
        assert results and all(r.outcome == "compacted" for r in results), results
        ref = await refstore.get_ref(REPO, BRANCH)
        assert not ref.l1
        after, found_after = await read_rate(refstore, objects, probes)
        assert found_before == found_after == reads
        first = results[0]
        return {
            "files": files,
            "merge": merge,
            "loop_cpu": loop_cpu,
            "merge_rss_mib": merge_rss,
            "client_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "policy": f"jobs of {job_files}",
            "jobs": len(results),
            "records_in": sum(r.records_in for r in results),
            "records_out": results[-1].records_out,
            "mb_in": sum(r.bytes_in for r in results) / 1e6,
            "l1_mb": first.bytes_in / 1e6 if len(results) == 1 else float("nan"),
            "seconds": seconds,
            "l2_files": len(ref.l2),
            "stall_p99_ms": sorted(stalls)[int(len(stalls) * 0.99)] * 1000 if stalls else 0.0,
            "stall_max_ms": max(stalls, default=0.0) * 1000,
            "idle_max_ms": max(idle, default=0.0) * 1000,
            "reads_before": before,
            "reads_after": after,
        }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench compaction", description=__doc__)
    parser.add_argument("--files", default="10,100,1000")
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=3000)
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--rounds", type=int, default=1, help="run each case this often; print the fastest"
    )
    parser.add_argument(
        "--merge",
        default="loop,process",
        help="where jobs merge: loop (the worker process's way), process (the in-process "
        "compactor's merge process); each case runs once per value",
    )
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.files.split(",") if x]
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lsm-bench-compaction-"))
    load = os.getloadavg()
    print(
        f"# compaction benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f}"
    )
    print(
        f"# {args.records} records per L1 file (40-byte keys, ~150-byte values), "
        f"{args.reads} random reads of written keys, local object store"
    )
    print()
    print(
        "| L1 files | merge | policy | jobs | records in | records out | MB read | seconds "
        "| records/s | MB/s | L2 files | loop stall p99 / max (idle max), ms "
        "| loop CPU s | peak RSS MiB: client / merge process "
        "| reads/s before | reads/s after |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    merges = [m for m in args.merge.split(",") if m]
    runs = [(n, False, m) for n in counts for m in merges]
    if counts and max(counts) > 128:  # more files than one default job takes
        runs += [(max(counts), True, m) for m in merges]
    try:
        for n, default_policy, merge in runs:
            rounds = [
                asyncio.run(
                    one(
                        base / f"f{n}",
                        n,
                        args.records,
                        args.reads,
                        args.seed,
                        default_policy,
                        merge,
                    )
                )
                for _ in range(max(1, args.rounds))
            ]
            r = min(rounds, key=lambda x: x["seconds"])
            print(
                f"| {r['files']:,} | {r['merge']} | {r['policy']} | {r['jobs']} "
                f"| {r['records_in']:,} "
                f"| {r['records_out']:,} | {r['mb_in']:.1f} | {r['seconds']:.2f} "
                f"| {r['records_in'] / r['seconds']:,.0f} | {r['mb_in'] / r['seconds']:.1f} "
                f"| {r['l2_files']} | {r['stall_p99_ms']:.1f} / {r['stall_max_ms']:.0f} "
                f"({r['idle_max_ms']:.0f}) | {r['loop_cpu']:.2f} "
                f"| {r['client_rss_mib']:.0f} / {r['merge_rss_mib']:.0f} "
                f"| {r['reads_before']:,.0f} "
                f"| {r['reads_after']:,.0f} |",
                flush=True,
            )
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    return 0
