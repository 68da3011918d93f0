"""Spark pipeline: import, export, prefixed read and gc, with the one-process peers.

``python -m bench spark [--entries 10000000] [--cores 2] [--peer 1000000]
[--commits 100] [--dir DIR]``

On a local SparkSession (``local[cores]``) against an embedded RefStore and a local
storage namespace under ``--dir`` (a temporary directory by default):

1. ``import``: an S3-inventory-shaped Parquet file of ``--entries`` objects (generated
   first, not timed) becomes object entries on ``main`` as one direct commit
   (records/s, job wall time including Spark's planning).
2. Peers in the same run, one process: ``link_many`` and ``put_many`` of ``--peer``
   entries (records/s; raw ``put_many`` values are the same entry bytes).
3. ``export`` of that commit to a Parquet dataset (records/s).
4. A prefixed read of the commit (about 1% of the keys): rows and seconds.
5. ``gc`` (two runs a grace period apart, fake clock) of a repository with
   ``--commits`` commits: seconds per run.

``--tables ROWS`` measures tables instead (and nothing else): a DataFrame of ROWS rows
(``id``, ``p`` = id % 8, a 20-character string, a double) written as Parquet
partitioned by ``p`` and read back in full (an aggregate over every column), through
(1) the data source's atomic write (``format("lsmstore")``, ``format`` ``parquet``),
(2) Spark's own Parquet writer and reader through the S3 gateway of a server process
(``s3a://rep/main/tables/...``, hadoop-aws from ``.venv/spark-ivy``, the session
configured by ``lsmstore.spark.s3a.conf``: the file output committer's algorithm 2,
whose task commits rename each file once; the renames are CopyObject + DeleteObject
requests, counted and timed by S3A's statistics; then the median time of renaming one
file of 1 KiB and of 32 MiB)
and (3) Spark's own Parquet writer to a local directory (the
ceiling).  The table (1) wrote is read twice: through the data source
(``lsm_read``) and by Spark's own Parquet reader over the files' physical addresses
(``native_read``, ``lsmstore.spark.read_table``).  A first round, not counted, warms
the JVM and the Python workers up; then ``--rounds`` rounds, the ways alternating
within each in an order each round rotates, so load changes and warm-up hit all.  Every
read must give the same answer.  Rows/s per round, the medians and their ratios to (3).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import lsmstore
from lsmstore.gc import collect_repository
from lsmstore.gc.retention import Retention
from lsmstore.gcfreeze import paused
from lsmstore.spark import jobs
from lsmstore.storage.url import open_object_store
from lsmstore.testing.spark import local_session
from lsmstore.types import ObjectLink


def make_inventory(path: Path, n: int) -> None:
    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    chunk = 1_000_000
    writer = None
    for start in range(0, n, chunk):
        end = min(n, start + chunk)
        table = pa.table(
            {
                "bucket": pa.array(["src"] * (end - start)),
                "key": pa.array([f"logs/{i // 1000:05d}/{i:09d}.json" for i in range(start, end)]),
                "size": pa.array(range(start, end), pa.int64()),
                "last_modified_date": pa.array([t0] * (end - start), pa.timestamp("us", "UTC")),
                "e_tag": pa.array([f"{i:032x}" for i in range(start, end)]),
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(str(path), table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()


async def peers(root: Path, n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with lsmstore.connect(
        f"local://{root / 'peer-refs'}", compaction_in_process="off"
    ) as store:
        ns = (root / "peer-ns").as_uri()
        repo = await store.create_repository("prepared", storage_namespace=ns)
        main = repo.branch("main")
        batch = 10_000
        t = time.perf_counter()
        for s in range(0, n, batch):
            await main.link_many(
                ObjectLink(f"logs/{i:09d}.json", f"{ns}/data/x{i}", size=i, checksum=f"{i:032x}")
                for i in range(s, min(n, s + batch))
            )
        await main.flush()
        out["link_many_per_s"] = n / (time.perf_counter() - t)
        raw = repo.branch("main")
        dev = await repo.create_branch("raw", source="main")
        t = time.perf_counter()
        for s in range(0, n, batch):
            await dev.put_many((f"r{i:09d}", b"x" * 90) for i in range(s, min(n, s + batch)))
        await dev.flush()
        out["put_many_per_s"] = n / (time.perf_counter() - t)
        del raw
    return out


async def gc_repository(root: Path, commits: int) -> dict[str, float]:
    refs = f"local://{root / 'gc-refs'}"
    async with lsmstore.connect(refs, compaction_in_process="off") as store:
        ns = (root / "gc-ns").as_uri()
        repo = await store.create_repository("gcrepo", storage_namespace=ns)
        main = repo.branch("main")
        for c in range(commits):
            await main.link_many(
                ObjectLink(f"d/{c:03d}/{i:04d}", f"{ns}/data/{c}-{i}", size=i, checksum="e")
                for i in range(100)
            )
            await main.upload(f"u/{c % 10}", f"v{c}".encode())
            await main.commit(f"c{c}")
        objects = open_object_store(ns)
        assert isinstance(store, lsmstore.Store)  # a local:// RefStore: embedded
        now = [time.time() + 30 * 86_400]
        seconds = []
        for _ in range(2):
            t = time.perf_counter()
            report = await collect_repository(
                store.refstore,
                "gcrepo",
                objects,
                Retention(default_days=21),
                grace_s=600,
                clock=lambda: now[0],
            )
            seconds.append(time.perf_counter() - t)
            now[0] += 600
        return {
            "gc_mark_sweep_s": seconds[0],
            "gc_second_run_s": seconds[1],
            "gc_deleted": float(len(report.deleted_keys)),
        }


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu() -> dict[str, float]:
    """CPU seconds used so far by this process's descendants (Linux ``/proc``), by kind:
    ``jvm`` (Spark's JVM) and ``python`` (Spark's Python workers and their daemon),
    counting exited children their parents waited for.  Empty where ``/proc`` is
    missing."""
    procs: dict[int, tuple[int, str, float]] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        f = stat[stat.rindex(")") + 2 :].split()
        procs[int(d.name)] = (int(f[1]), name, sum(int(x) for x in f[11:15]) / _TICK)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out = {"jvm": 0.0, "python": 0.0}
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        _, name, cpu = procs[pid]
        out["jvm" if name == "java" else "python"] += cpu
        todo.extend(children.get(pid, []))
    return out


def cpu_since(before: dict[str, float], own: float) -> dict[str, float]:
    """CPU seconds since ``before`` (:func:`tree_cpu`) and ``own`` (this process's
    ``time.process_time``): Spark's JVM, its Python workers, and this driver."""
    after = tree_cpu()
    return {
        "jvm": round(after["jvm"] - before["jvm"], 1),
        "python_workers": round(after["python"] - before["python"], 1),
        "driver": round(time.process_time() - own, 1),
    }


def stage_costs(n: int) -> dict[str, float]:
    """CPU microseconds per record of each step a task runs, in this process, on ``n``
    object entries shaped like the inventory's: Arrow batch -> records (checks and
    entry encoding), sort, committed range encoding (a direct import's tasks), staging
    file encoding (a staged import's tasks), SST decoding and records -> Arrow batch
    (an export's tasks), and the Arrow -> Parquet write of those batches.  With the
    cyclic collector paused, as the tasks run (``LsmWriter.write``, ``LsmReader.read``)."""
    import pyarrow.parquet as pq_

    from lsmstore.graveler.sst_reader import SSTReader
    from lsmstore.spark import direct, rows, stage
    from lsmstore.staging.files import encode_staging_file
    from lsmstore.storage.memory import MemoryStore
    from lsmstore.versioning.context import range_policy

    ns_url = "file:///bench/ns"
    ns = rows.namespace_of(ns_url, ns_url, {})
    t0 = 1_767_225_600
    batches = [
        pa.RecordBatch.from_pydict(
            {
                "path": [f"logs/{i // 1000:05d}/{i:09d}.json" for i in range(s, min(n, s + 8192))],
                "physical_address": [
                    f"{ns_url}/data/logs/{i // 1000:05d}/{i:09d}.json"
                    for i in range(s, min(n, s + 8192))
                ],
                "size": pa.array(range(s, min(n, s + 8192)), pa.int64()),
                "checksum": [f"{i:032x}" for i in range(s, min(n, s + 8192))],
                "mtime": pa.array([t0] * (min(n, s + 8192) - s), pa.int64()),
            }
        )
        for s in range(0, n, 8192)
    ]
    out: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        t = time.process_time()
        result = fn()
        out[name] = round((time.process_time() - t) / n * 1e6, 2)
        return result

    to_record = rows.record_writer("objects", ns, t0)
    recs = timed("batch_to_records_us", lambda: [r for b in batches for r in to_record(b)])
    recs = timed("sort_us", lambda: stage.sorted_unique(recs))
    store = MemoryStore()
    policy = range_policy(__import__("lsmstore.config").config.load_config())
    ranges = timed("range_encode_us", lambda: asyncio.run(direct.write_ranges(store, recs, policy)))
    timed(
        "staging_encode_us",
        lambda: [encode_staging_file(recs[i : i + 100_000], 0.01) for i in range(0, n, 100_000)],
    )
    from lsmstore import layout

    datas = [asyncio.run(store.get(layout.range_key(r.id))) for r in ranges]
    decoded = timed("sst_decode_us", lambda: [rec for d in datas for rec in SSTReader(d, "r")])
    to_batch = rows.batch_reader("objects", ns)
    out_batches = timed(
        "records_to_batch_us",
        lambda: [to_batch(decoded[i : i + 8192]) for i in range(0, n, 8192)],
    )
    sink = pa.BufferOutputStream()

    def parquet() -> None:
        with pq_.ParquetWriter(sink, rows.OBJECT_ARROW) as w:
            for b in out_batches:
                w.write_batch(b)

    timed("parquet_write_us", parquet)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench spark")
    p.add_argument("--entries", type=int, default=10_000_000)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--peer", type=int, default=1_000_000)
    p.add_argument("--commits", type=int, default=100)
    p.add_argument("--dir")
    p.add_argument(
        "--stages",
        type=int,
        metavar="N",
        help="only the per-record CPU of each task step, on N entries in this process",
    )
    p.add_argument("--tables", type=int, metavar="ROWS", help="only the table write/read bench")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--out",
        help="with --tables: also write tables-ROWS.json there and plot every such file "
        "of the directory in tables.png",
    )
    args = p.parse_args(argv)
    if args.tables:
        result = tables_bench(args.tables, args.cores, args.rounds, args.dir)
        print(json.dumps(result, indent=1))
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"tables-{args.tables}.json").write_text(json.dumps(result, indent=1))
            plot_tables(out)
        return 0
    if args.stages:
        with paused():
            costs = stage_costs(args.stages)
        print(json.dumps({"load": os.getloadavg(), **costs}, indent=1))
        return 0
    root = Path(args.dir or tempfile.mkdtemp(prefix="lsm-bench-spark-"))
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "entries": args.entries,
        "cores": args.cores,
        "load_before": os.getloadavg(),
    }
    try:
        inv = root / "inventory.parquet"
        t = time.perf_counter()
        make_inventory(inv, args.entries)
        results["inventory_s"] = round(time.perf_counter() - t, 1)
        refs = f"local://{root / 'refs'}"
        ns = (root / "ns").as_uri()

        async def setup() -> None:
            async with lsmstore.connect(refs, compaction_in_process="off") as store:
                await store.create_repository("rep", storage_namespace=ns)

        asyncio.run(setup())
        spark = local_session(args.cores, app="bench-spark")
        opts = {"refstore": refs}
        cpu0, own0 = tree_cpu(), time.process_time()
        t = time.perf_counter()
        n = jobs.import_inventory(
            spark,
            "lsm://rep/main",
            [str(inv)],
            address_prefix=f"{ns}/data/",
            commit_message="import",
            options=opts,
        )
        dt = time.perf_counter() - t
        results["import_per_s"] = round(n / dt)
        results["import_s"] = round(dt, 1)
        results["import_cpu_s"] = cpu_since(cpu0, own0)
        cpu0, own0 = tree_cpu(), time.process_time()
        t = time.perf_counter()
        out = root / "export"
        m = jobs.export(spark, "lsm://rep/main", str(out), options=opts)
        dt = time.perf_counter() - t
        results["export_per_s"] = round(m / dt)
        results["export_s"] = round(dt, 1)
        results["export_cpu_s"] = cpu_since(cpu0, own0)
        t = time.perf_counter()
        rows = (
            spark.read.format("lsmstore").options(**opts).load("lsm://rep/main/logs/0001").count()
        )
        results["prefix_read_rows"] = rows
        results["prefix_read_s"] = round(time.perf_counter() - t, 2)
        spark.stop()
        results.update({k: round(v) for k, v in asyncio.run(peers(root, args.peer)).items()})
        results.update(
            {k: round(v, 2) for k, v in asyncio.run(gc_repository(root, args.commits)).items()}
        )
        results["load_after"] = os.getloadavg()
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results, indent=1))
    return 0


#: S3A counters of a write through the gateway: the committer's renames and the
#: requests they make, beside the uploads.
S3A_COUNTERS = (
    "op_rename", "object_copy_requests", "files_copied_bytes", "object_delete_request",
    "object_bulk_delete_request", "object_put_request",
)  # fmt: skip


def _s3a_stats(fs: Any) -> dict[str, float]:
    """S3A's counters (:data:`S3A_COUNTERS`) and the total milliseconds of the timed
    ones (``<name>_ms``: the sum of S3A's duration samples) of file system ``fs``."""
    stats = fs.getIOStatistics()
    counters, means = stats.counters(), stats.meanStatistics()
    out: dict[str, float] = {}
    for name in S3A_COUNTERS:
        value = counters.get(name)
        out[name] = int(value) if value is not None else 0
        mean = means.get(name + ".mean")
        if mean is not None:
            out[name + "_ms"] = float(mean.getSum())
    return out


def _rename_cost(jvm: Any, fs: Any, base: str, size: int, repeats: int) -> dict[str, float]:
    """The median milliseconds of ``fs.rename`` of one ``size``-byte file back and forth
    under ``base`` (a copy and a delete on S3), and the S3 requests of one rename."""
    import statistics

    paths = [jvm.org.apache.hadoop.fs.Path(f"{base}/{size}/{side}") for side in "ab"]
    stream = fs.create(paths[0], True)
    stream.write(bytearray(os.urandom(min(size, 1 << 20)) * max(1, size >> 20))[:size])
    stream.close()
    times = []
    before = _s3a_stats(fs)
    for i in range(repeats):
        src, dst = paths[i % 2], paths[(i + 1) % 2]
        t = time.perf_counter()
        if not fs.rename(src, dst):
            raise RuntimeError(f"rename {src} -> {dst} failed")
        times.append((time.perf_counter() - t) * 1000)
    after = _s3a_stats(fs)
    out = {"median_ms": round(statistics.median(times), 1)}
    for name in ("object_copy_requests", "object_delete_request"):
        out[name] = (after[name] - before[name]) / repeats
    return out


#: The ways of the table bench as plotted: (label, write key, read key).
TABLE_WAYS = (
    ("(1) data source write,\nread_table", "lsm_write", "native_read"),
    ("(1) data source read", None, "lsm_read"),
    ("(2) s3a:// via gateway", "s3a_write", "s3a_read"),
    ("(3) Spark, local dir", "local_write", "local_read"),
)


def plot_tables(out: Path) -> None:
    """``tables.png``: rows/s (median) written and read by each way, one panel per
    ``tables-ROWS.json`` of ``out``, each bar labelled with its ratio to (3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs = sorted(
        (json.loads(f.read_text()) for f in out.glob("tables-*.json")), key=lambda d: d["rows"]
    )
    fig, axes = plt.subplots(1, len(docs), figsize=(6 * len(docs), 4.5), squeeze=False)
    for ax, doc in zip(axes[0], docs, strict=True):
        for i, (_, wkey, rkey) in enumerate(TABLE_WAYS):
            for j, (key, ceiling, color) in enumerate(
                ((wkey, "local_write", "tab:blue"), (rkey, "local_read", "tab:orange"))
            ):
                if key is None:
                    continue
                value = doc[f"{key}_median"] / 1e6
                x = i + (j - 0.5) * 0.38
                ax.bar(x, value, 0.36, color=color, label=("write", "read")[j] if i == 0 else None)
                ratio = doc[f"{key}_median"] / doc[f"{ceiling}_median"]
                ax.annotate(f"{ratio:.2f}", (x, value), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(TABLE_WAYS)), [w[0] for w in TABLE_WAYS], fontsize=7)
        ax.set_ylabel("million rows/s (median)")
        ax.set_title(
            f"{doc['rows']:,} rows, {doc['date']}, nproc {doc['nproc']}\n"
            "(bar labels: ratio to Spark's own Parquet, local dir)",
            fontsize=9,
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "tables.png", dpi=110)
    plt.close(fig)


def tables_bench(n: int, cores: int, rounds: int, directory: str | None) -> dict[str, Any]:
    """The ``--tables`` comparison (module docstring)."""
    import statistics
    import sys

    import httpx

    from lsmstore.spark import read_table, register, s3a
    from lsmstore.testing.server_process import start_server

    root = Path(directory or tempfile.mkdtemp(prefix="lsm-bench-tables-"))
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "rows": n,
        "cores": cores,
        "load_before": os.getloadavg(),
    }
    server = None
    try:
        refs = f"local://{root / 'refs'}"
        ns = (root / "ns").as_uri()

        async def setup() -> None:
            async with lsmstore.connect(refs, compaction_in_process="off") as store:
                await store.create_repository("rep", storage_namespace=ns)

        asyncio.run(setup())
        server = start_server(root / "server")
        with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as api:
            api.post(
                "/repositories", json={"name": "rep", "storage_namespace": "local://r"}
            ).raise_for_status()
        jars = s3a.jars(os.path.join(sys.prefix, "spark-ivy"))
        conf = s3a.conf(server.url, *server.admin, jars)
        spark = local_session(cores, app="bench-tables", conf=conf)
        register(spark)
        jvm = spark._jvm
        fs = jvm.org.apache.hadoop.fs.FileSystem.get(
            jvm.java.net.URI("s3a://rep/main/"), spark._jsc.hadoopConfiguration()
        )
        df = spark.range(n, numPartitions=cores * 2).selectExpr(
            "id",
            "cast(id % 8 as int) as p",
            "lpad(cast(id as string), 20, 'x') as s",
            "id * 0.5 as x",
        )
        opts = {"refstore": refs, "format": "parquet"}
        agg = ("count(*)", "sum(id)", "sum(p)", "sum(length(s))", "sum(x)")

        def writes(i: int) -> dict[str, Any]:
            url, gateway = f"lsm://rep/main/tables/t{i}/", f"s3a://rep/main/tables/t{i}"
            return {
                "lsm_write": lambda: (
                    df.write.format("lsmstore")
                    .options(partitionBy="p", **opts)
                    .mode("append")
                    .save(url)
                ),
                "s3a_write": lambda: df.write.partitionBy("p").parquet(gateway),
                "local_write": lambda: df.write.partitionBy("p").parquet(str(root / f"local-{i}")),
            }

        def reads(i: int) -> dict[str, Any]:
            url, gateway = f"lsm://rep/main/tables/t{i}/", f"s3a://rep/main/tables/t{i}"
            return {
                "lsm_read": lambda: (
                    spark.read.format("lsmstore").options(**opts).load(url).selectExpr(*agg)
                ),
                "native_read": lambda: read_table(spark, url, refstore=refs).selectExpr(*agg),
                "s3a_read": lambda: spark.read.parquet(gateway).selectExpr(*agg),
                "local_read": lambda: spark.read.parquet(str(root / f"local-{i}")).selectExpr(*agg),
            }

        runs: dict[str, list[float]] = {k: [] for k in (*writes(0), *reads(0))}
        renames: list[dict[str, float]] = []
        answers: set[tuple[Any, ...]] = set()
        # Round 0 warms the JVM and the Python workers up and is not counted; each
        # round rotates the order of the ways, so none always runs first.
        for i in range(rounds + 1):
            for ways in (writes(i), reads(i)):
                keys = list(ways)
                for k in keys[i % len(keys) :] + keys[: i % len(keys)]:
                    before = _s3a_stats(fs)
                    t = time.perf_counter()
                    result = ways[k]()
                    if k.endswith("_read"):
                        answers.add(tuple(result.collect()[0]))
                    elapsed = time.perf_counter() - t
                    if i:
                        runs[k].append(n / elapsed)
                    if i and k == "s3a_write":
                        after = _s3a_stats(fs)
                        renames.append({k: round(v - before.get(k, 0)) for k, v in after.items()})
        if len(answers) != 1:
            raise RuntimeError(f"the ways read different answers: {answers}")
        # one file renamed back and forth: a link through the gateway, whatever its size
        out["s3a_rename"] = {
            str(size): _rename_cost(jvm, fs, "s3a://rep/main/renames", size, 9)
            for size in (1024, 32 << 20)
        }
        spark.stop()
        for k, v in runs.items():
            out[f"{k}_rows_per_s"] = [round(x) for x in v]
            out[f"{k}_median"] = round(statistics.median(v))
        out["write_ratio"] = round(out["lsm_write_median"] / out["local_write_median"], 2)
        out["read_ratio"] = round(out["lsm_read_median"] / out["local_read_median"], 2)
        out["native_read_ratio"] = round(out["native_read_median"] / out["local_read_median"], 2)
        out["s3a_write_ratio"] = round(out["s3a_write_median"] / out["local_write_median"], 2)
        out["s3a_read_ratio"] = round(out["s3a_read_median"] / out["local_read_median"], 2)
        # per s3a write: the committer's renames, the requests they made and their time
        out["s3a_write_requests"] = renames
        out["load_after"] = os.getloadavg()
    finally:
        if server is not None:
            server.stop()
        if not directory:
            shutil.rmtree(root, ignore_errors=True)
    return out
