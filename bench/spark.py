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
from lsmstore.objects.model import ObjectLink
from lsmstore.spark import jobs
from lsmstore.storage.url import open_object_store
from lsmstore.testing.spark import local_session


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
        repo = await store.create_repository("p", storage_namespace=ns)
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
        repo = await store.create_repository("g", storage_namespace=ns)
        main = repo.branch("main")
        for c in range(commits):
            await main.link_many(
                ObjectLink(f"d/{c:03d}/{i:04d}", f"{ns}/data/{c}-{i}", size=i, checksum="e")
                for i in range(100)
            )
            await main.upload(f"u/{c % 10}", f"v{c}".encode())
            await main.commit(f"c{c}")
        objects = open_object_store(ns)
        now = [time.time() + 30 * 86_400]
        seconds = []
        for _ in range(2):
            t = time.perf_counter()
            report = await collect_repository(
                store.refstore,
                "g",
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


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench spark")
    p.add_argument("--entries", type=int, default=10_000_000)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--peer", type=int, default=1_000_000)
    p.add_argument("--commits", type=int, default=100)
    p.add_argument("--dir")
    args = p.parse_args(argv)
    root = Path(args.dir or tempfile.mkdtemp(prefix="lsm-bench-spark-"))
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "entries": args.entries,
        "cores": args.cores,
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
                await store.create_repository("r", storage_namespace=ns)

        asyncio.run(setup())
        spark = local_session(args.cores, app="bench-spark")
        opts = {"refstore": refs}
        t = time.perf_counter()
        n = jobs.import_inventory(
            spark,
            "lsm://r/main",
            [str(inv)],
            address_prefix=f"{ns}/data/",
            commit_message="import",
            options=opts,
        )
        dt = time.perf_counter() - t
        results["import_per_s"] = round(n / dt)
        results["import_s"] = round(dt, 1)
        t = time.perf_counter()
        out = root / "export"
        m = jobs.export(spark, "lsm://r/main", str(out), options=opts)
        dt = time.perf_counter() - t
        results["export_per_s"] = round(m / dt)
        results["export_s"] = round(dt, 1)
        t = time.perf_counter()
        rows = spark.read.format("lsmstore").options(**opts).load("lsm://r/main/logs/0001").count()
        results["prefix_read_rows"] = rows
        results["prefix_read_s"] = round(time.perf_counter() - t, 2)
        spark.stop()
        results.update({k: round(v) for k, v in asyncio.run(peers(root, args.peer)).items()})
        results.update(
            {k: round(v, 2) for k, v in asyncio.run(gc_repository(root, args.commits)).items()}
        )
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results, indent=1))
    return 0
