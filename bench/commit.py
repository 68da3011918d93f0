"""Commit cost: seconds and ranges read/written for C changed keys onto a base of N keys.

``python -m bench commit [--bases 100000,1000000] [--changes 1,1000,100000]
[--big 500000] [--dir DIR] [--repeat 7] [--processes 0,1,2] [--profile] [--out DIR]
[--store URL] [--latency-ms MS] [--cold-gets N]``

Bases are built straight through :class:`RangeWriter` (not the write path) with the
production range policy, in a local object store under ``--dir`` (kept between runs:
a base already built is reused).  For each (N, C) a fresh branch starts at the base,
with C changes staged as L2 files (80% updates of random existing keys, 10% deletes,
10% inserts next to random keys); then ``commit_branch`` is timed: reading the staged
files, merging them, applying them to the base (only touched ranges are read and
rewritten), writing the metarange and commit, and the RefStore swap.  ``--big`` adds
one commit of that many changes onto the largest base of at most 1M keys.
One-key commits are repeated ``--repeat`` times (best and median are printed: the
touched range differs each time, and the machine may be shared).  ``--processes``
lists the worker process counts to compare (0: threads only; with workers, a change
set touching 4 ranges or more is split by range across them); parent and worker CPU
seconds are reported beside the wall time.  ``--profile`` prints the top of a cProfile
of each commit (the committing process only).  ``--out DIR`` writes ``commit.json``
and ``commit_vs_changes.png``.

``--store`` puts the bases and commits on another object store (e.g. SeaweedFS:
``s3://bench/commit?endpoint_url=http://127.0.0.1:8333&path_style=true``, credentials
from ``AWS_*``; the RefStore stays embedded under ``--dir``); ``--latency-ms`` adds a
fixed delay to every object-store request (``FaultyStore.delay``).  ``--cold-gets N``
reads each base cold before the commits: a fresh file cache, the commit id only; the
time to the first answer (commit, metarange, range: dependent fetches), then ``N``
random gets from 100 tasks (each range fetched once, concurrent gets of it share the
fetch), with the GETs counted.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import io
import os
import platform
import pstats
import random
import shutil
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lsmstore import layout
from lsmstore.cache import FileCache
from lsmstore.commit.job import CommitResult, commit_branch
from lsmstore.graveler.commit import read_commit, write_commit
from lsmstore.graveler.metarange import store_metarange
from lsmstore.graveler.range_encoder import RangeEncoder
from lsmstore.graveler.ranges import RangePolicy, RangeWriter
from lsmstore.graveler.record import Record
from lsmstore.graveler.source import CachedSource
from lsmstore.graveler.tree import TreeReader
from lsmstore.refstore.base import Ref, Repository
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.files import SIDECAR_SUFFIX, SST_SUFFIX, encode_staging_file, new_file_id
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.storage.local import LocalStore
from lsmstore.storage.url import open_object_store
from lsmstore.testing.faulty_store import OPS, FaultyStore
from lsmstore.types import Commit
from lsmstore.versioning.context import RepoContext

REPO = "bench"
POLICY = RangePolicy()  # production: 1 MiB min, 10 MiB max, raggedness 50,000
STAGED_FILE_RECORDS = 100_000


def key(i: int) -> bytes:
    """Sorted by ``i``: 46-byte object paths."""
    return b"tables/events/part=%05d/obj-%010d.parquet" % (i // 100_000, i)


def value(i: int, salt: bytes) -> bytes:
    """~110-byte metadata-like values."""
    h = hashlib.sha256(b"%d:%s" % (i, salt)).hexdigest()
    return b'{"etag":"%s","size":%d,"mtime":%d,"class":"STANDARD"}' % (
        h[:32].encode(),
        int(h[32:40], 16),
        1_700_000_000 + int(h[40:46], 16),
    )


def record(k: bytes, v: bytes) -> Record:
    return Record(k, hashlib.sha256(v).digest(), v)


async def build_base(store: ObjectStore, n: int) -> tuple[str, int, float]:
    """Write a tree of ``n`` records and its commit; (commit ID, ranges, seconds)."""
    t0 = time.perf_counter()
    writer = RangeWriter(store, POLICY, max_in_flight=2)
    for i in range(n):
        await writer.add(record(key(i), value(i, b"base")))
    ranges = await writer.finish()
    metarange = await store_metarange(store, ranges)
    commit_id = await write_commit(store, Commit(metarange, (), "bench", f"base of {n}", 0))
    return commit_id, len(ranges), time.perf_counter() - t0


def make_changes(n: int, c: int, rng: random.Random, salt: bytes) -> list[Record]:
    picked = sorted(rng.sample(range(n), c))
    out: list[Record] = []
    for j, i in enumerate(picked):
        kind = j % 10
        if kind == 8:
            out.append(Record(key(i), b"", None))
        elif kind == 9:
            out.append(record(key(i) + b"-new", value(i, salt + b"new")))
        else:
            out.append(record(key(i), value(i, salt)))
    out.sort(key=lambda r: r.key)
    return out


async def stage_as_l2(ctx: RepoContext, branch: str, changes: list[Record]) -> list[str]:
    ids = []
    for s in range(0, len(changes), STAGED_FILE_RECORDS):
        chunk = changes[s : s + STAGED_FILE_RECORDS]
        sst, meta, _ = await asyncio.to_thread(encode_staging_file, chunk, 0.01)
        fid = new_file_id()
        await ctx.objects.put(
            layout.staging_key(branch, "L2", fid, SST_SUFFIX), sst, PutMode.CREATE
        )
        await ctx.objects.put(
            layout.staging_key(branch, "L2", fid, SIDECAR_SUFFIX), meta, PutMode.CREATE
        )
        ids.append(fid)
    return ids


@dataclass
class Row:
    base: int
    changes: int
    seconds: list[float]  # commit_branch's own duration, per repetition
    result: CommitResult  # of the fastest repetition
    base_ranges: int
    processes: int = 0  # range encoder pool size (0: threads)
    parent_cpu: float = 0.0  # CPU seconds of this process over the repetitions
    worker_cpu: float = 0.0  # CPU seconds of the encoder's worker processes, likewise


async def one_commit(
    ctx: RepoContext, base: str, n: int, c: int, profile: bool, rng: random.Random
) -> CommitResult:
    salt = os.urandom(8).hex().encode()  # new content each run: nothing is already stored
    changes = make_changes(n, c, rng, salt)
    branch = f"b{n}-{c}-{salt.decode()}"
    l2 = await stage_as_l2(ctx, branch, changes)
    await ctx.refstore.create_ref(REPO, branch, Ref("branch", base, tuple(l2)))
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    result = await commit_branch(ctx, branch, f"{c} changes", committer="bench")
    if prof:
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(25)
        print(f"--- profile: {c} changes onto {n} ---\n{text.getvalue()}")
    return result


async def cold_gets(store: FaultyStore, commit_id: str, n: int, gets: int) -> str:
    """Time to the first answer of a cold read of ``commit_id``, then ``gets`` random
    gets from 100 tasks; every value is checked."""
    cache = FileCache(ram_bytes=1 << 30)
    source = CachedSource(store, cache)
    before = store.calls["get"]
    t0 = time.perf_counter()
    commit = await read_commit(store, commit_id, cache=cache)
    tree = TreeReader(source, commit.metarange_id)
    first = await tree.get(key(n // 2))
    t_first = time.perf_counter() - t0
    assert first is not None and first.value == value(n // 2, b"base")
    rng = random.Random(5)
    picks = [rng.randrange(n) for _ in range(gets)]
    lat: list[float] = []

    async def one(part: list[int]) -> None:
        for i in part:
            t = time.perf_counter()
            rec = await tree.get(key(i))
            lat.append((time.perf_counter() - t) * 1000)
            assert rec is not None and rec.value == value(i, b"base")

    t1 = time.perf_counter()
    await asyncio.gather(*(one(picks[t::100]) for t in range(100)))
    secs = time.perf_counter() - t1
    lat.sort()
    ranges = len((await tree.metarange()).ranges)
    return (
        f"cold read of {n:,} keys ({ranges} ranges): first answer {t_first * 1000:.0f} ms "
        f"(3 dependent GETs); then {gets:,} random gets from 100 tasks in {secs:.2f} s "
        f"({gets / secs:,.0f}/s), p50 {lat[len(lat) // 2]:.1f} / p99 "
        f"{lat[int(len(lat) * 0.99)]:.1f} ms; {store.calls['get'] - before} GETs in all"
    )


async def run(args: argparse.Namespace) -> None:
    root = Path(args.dir)
    inner: ObjectStore = open_object_store(args.store) if args.store else LocalStore(root / "data")
    store = FaultyStore(inner)
    if args.latency_ms:
        store.delay(OPS, args.latency_ms / 1000)
    rs = EmbeddedRefStore(root / "refs", synchronous="NORMAL")
    try:
        await rs.get_repository(REPO)
    except KeyError:
        await rs.create_repository(Repository(REPO, inner.url, "main"))
    ctx = RepoContext(REPO, rs, store, policy=POLICY)
    procs = [int(x) for x in args.processes.split(",") if x]
    rng = random.Random(args.seed)
    rows: list[Row] = []
    bases = [int(x) for x in args.bases.split(",") if x]
    changes = [int(x) for x in args.changes.split(",") if x]
    built: dict[int, tuple[str, int]] = {}
    for n in bases:
        where = hashlib.sha256(args.store.encode()).hexdigest()[:8] if args.store else ""
        marker = root / (f"base-{n}-{where}.txt" if where else f"base-{n}.txt")
        if marker.exists():
            commit_id, nranges = marker.read_text().split()
            built[n] = (commit_id, int(nranges))
            print(f"base of {n:,} keys: reused ({nranges} ranges)")
        else:
            commit_id, count, secs = await build_base(store, n)
            marker.write_text(f"{commit_id} {count}")
            built[n] = (commit_id, count)
            print(f"base of {n:,} keys: built in {secs:.1f} s ({count} ranges)")
        if args.cold_gets:
            print(" ", await cold_gets(store, built[n][0], n, args.cold_gets), flush=True)
    plan = [(n, c) for n in bases for c in changes if c <= n]
    if args.big:
        small = [n for n in bases if n <= 1_000_000]
        if small:
            plan.append((max(small), args.big))
    for n, c in plan:
        base, base_ranges = built[n]
        for p in procs:
            encoder = ctx.range_encoder = RangeEncoder(p)
            if p:  # started before the clock runs (a long-lived process has it running)
                encoder.start()
                while encoder.started < p:  # noqa: ASYNC110  # threads start them
                    await asyncio.sleep(0.05)
            results = []
            wcpu0 = workers_cpu(encoder)
            cpu0 = time.process_time()
            for _ in range(args.repeat if c == 1 else 1):
                results.append(await one_commit(ctx, base, n, c, args.profile, rng))
                print(
                    f"  {c:,} changes onto {n:,}, {p} processes: "
                    f"{results[-1].duration_s:.3f} s, {results[-1].chunks} chunks in workers "
                    f"({results[-1].resyncs} after a resync) (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            cpu = time.process_time() - cpu0
            wcpu = workers_cpu(encoder) - wcpu0
            encoder.close()
            best = min(results, key=lambda r: r.duration_s)
            rows.append(Row(n, c, [r.duration_s for r in results], best, base_ranges, p, cpu, wcpu))
    await rs.aclose()
    await store.aclose()

    load = os.getloadavg()[0]
    now = datetime.now(UTC).strftime("%Y-%m-%d")
    print()
    print(
        f"Commit benchmark, {now}, {platform.python_implementation()} {platform.python_version()}, "
        f"nproc={os.cpu_count()}, load average {load:.1f} at the end; "
        f"object store {args.store.partition('?')[0] or 'local'}"
        f"{f' + {args.latency_ms:g} ms per request' if args.latency_ms else ''}, "
        f"embedded RefStore; range policy {POLICY.min_bytes >> 20}-{POLICY.max_bytes >> 20} MiB, "
        f"raggedness {POLICY.raggedness}"
    )
    print()
    print(
        "| base keys | base ranges | changed keys | worker processes | commit s (best) | "
        "median of | parent CPU s | worker CPU s | chunks in workers | ranges read | written "
        "| reused |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        res = r.result
        median = statistics.median(r.seconds)
        print(
            f"| {r.base:,} | {r.base_ranges} | {r.changes:,} | {r.processes} | "
            f"{res.duration_s:.3f} | {median:.3f} ({len(r.seconds)}) | {r.parent_cpu:.1f} | "
            f"{r.worker_cpu:.1f} | {res.chunks} ({res.resyncs} resynced) | "
            f"{res.ranges_read} | {res.ranges_written} | "
            f"{res.ranges_reused} |"
        )
    if args.out:
        plot(Path(args.out), rows, load)


def workers_cpu(encoder: RangeEncoder) -> float:
    """CPU seconds (user + system) the encoder's live worker processes have used."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in encoder.worker_pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def plot(out: Path, rows: list[Row], load: float) -> None:
    """``commit.json`` and ``commit_vs_changes.png``: commit seconds against changed keys,
    one line per base size (and worker process count)."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    doc = [
        {
            "base": r.base,
            "changes": r.changes,
            "processes": r.processes,
            "seconds": r.seconds,
            "parent_cpu_s": r.parent_cpu,
            "worker_cpu_s": r.worker_cpu,
            "chunks": r.result.chunks,
            "resyncs": r.result.resyncs,
            "ranges_read": r.result.ranges_read,
            "ranges_written": r.result.ranges_written,
        }
        for r in rows
    ]
    (out / "commit.json").write_text(json.dumps(doc, indent=1))
    fig, (ax, cpu_ax) = plt.subplots(1, 2, figsize=(11, 4.5))
    for b, base in enumerate(sorted({r.base for r in rows})):
        for p in sorted({r.processes for r in rows}):
            mine = sorted(
                (r for r in rows if r.base == base and r.processes == p), key=lambda r: r.changes
            )
            if not mine:
                continue
            style = {
                "marker": "o",
                "color": f"C{b}",
                "linestyle": ("-", "--", ":", "-.")[p % 4],
                "label": f"base {base:,} keys, {p} worker processes",
            }
            xs = [r.changes for r in mine]
            ax.plot(xs, [min(r.seconds) for r in mine], **style)
            cpu_ax.plot(xs, [(r.parent_cpu + r.worker_cpu) / len(r.seconds) for r in mine], **style)
    ax.set(xscale="log", yscale="log", xlabel="changed keys", ylabel="commit seconds (best)")
    cpu_ax.set(
        xscale="log",
        yscale="log",
        xlabel="changed keys",
        ylabel="CPU seconds per commit (committing process + workers)",
    )
    now = datetime.now(UTC).strftime("%Y-%m-%d")
    ax.set_title(
        f"Commit time vs changed keys ({now}, nproc={os.cpu_count()}, load {load:.1f})", fontsize=8
    )
    cpu_ax.set_title("CPU per commit (survives a loaded machine)", fontsize=8)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "commit_vs_changes.png", dpi=110)
    plt.close(fig)
    print(f"results and plot in {out}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench commit", description=__doc__)
    parser.add_argument("--bases", default="100000,1000000")
    parser.add_argument("--changes", default="1,1000,100000")
    parser.add_argument("--big", type=int, default=500_000, help="0: skip")
    parser.add_argument("--dir", default="/tmp/lsmstore-bench-commit")
    parser.add_argument("--fresh", action="store_true", help="rebuild the bases")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", default="", help="write commit.json and a PNG plot here")
    parser.add_argument(
        "--processes",
        default="0,1,2",
        help="worker process counts to compare (0: threads only, no split)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--store", default="", help="object store URL (default: under --dir)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every request")
    parser.add_argument("--cold-gets", type=int, default=0, help="random cold gets per base")
    parser.add_argument("--repeat", type=int, default=7, help="repetitions of one-key commits")
    args = parser.parse_args(argv)
    root = Path(args.dir)
    if args.fresh and root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    asyncio.run(run(args))
    return 0
