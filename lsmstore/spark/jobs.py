"""Spark jobs: import an inventory, export a ref to Parquet, collect garbage.

Run them with ``python -m lsmstore.spark <job> ...`` (a local session, ``--master``
to choose) or with ``spark-submit <path of lsmstore/spark/__main__.py> <job> ...`` on a
cluster (docs/spark.md).  Every job prints one JSON summary line.

* ``import``: an inventory -- Parquet or CSV with ``key, size, etag`` and optionally
  ``last_modified`` and ``physical_address`` (an S3 inventory's shape; ``e_tag`` and
  ``last_modified_date`` are accepted too) -- becomes object entries on a branch, staged
  as one unit, or, with ``--commit MESSAGE``, one commit on the branch's base.  The
  address is the ``physical_address`` column, else ``--address-prefix`` + key.
* ``export``: a ref (a prefix of it) -> a Parquet dataset of its entries (written by the
  tasks with pyarrow to a local directory or an ``s3://`` URL, :mod:`lsmstore.spark.export`;
  by Spark's writer to another Hadoop path).
* ``gc``: :mod:`lsmstore.gc` over every repository (or one), range reads on executors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from lsmstore.config import load_config
from lsmstore.errors import InvalidInputError, LsmError
from lsmstore.gc import ReadRanges, collect_all
from lsmstore.gc.mark import read_ranges_locally
from lsmstore.gc.retention import Retention
from lsmstore.refstore.url import open_refstore
from lsmstore.storage.url import open_object_store

#: Entries per import task by default (its records are held in memory, ~300 B each).
TASK_ENTRIES = 1_000_000
INVENTORY_ALIASES = {"e_tag": "etag", "last_modified_date": "last_modified"}


def session(master: str | None, app: str) -> Any:
    from pyspark.sql import SparkSession

    from lsmstore.spark import register

    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def read_inventory(spark: Any, paths: Sequence[str], fmt: str) -> Any:
    reader = spark.read
    df = (
        reader.parquet(*paths)
        if fmt == "parquet"
        else reader.option("header", "true").option("inferSchema", "false").csv(list(paths))
    )
    for old, new in INVENTORY_ALIASES.items():
        if old in df.columns and new not in df.columns:
            df = df.withColumnRenamed(old, new)
    missing = {"key", "size", "etag"} - set(df.columns)
    if missing:
        raise LsmError(f"inventory lacks the columns {sorted(missing)} (has {df.columns})")
    return df


def inventory_entries(df: Any, *, address_prefix: str | None, path_prefix: str = "") -> Any:
    from pyspark.sql import functions as F

    if "physical_address" in df.columns:
        address = F.col("physical_address")
    elif address_prefix:
        address = F.concat(F.lit(address_prefix), F.col("key"))
    else:
        raise LsmError("the inventory has no physical_address: give --address-prefix")
    cols = [
        F.concat(F.lit(path_prefix), F.col("key")).alias("path"),
        address.alias("physical_address"),
        F.col("size").cast("long").alias("size"),
        F.col("etag").cast("string").alias("checksum"),
    ]
    if "last_modified" in df.columns:
        cols.append(F.unix_timestamp(F.col("last_modified").cast("timestamp")).alias("mtime"))
    return df.select(*cols)


def import_inventory(
    spark: Any,
    url: str,
    paths: Sequence[str],
    *,
    fmt: str = "parquet",
    address_prefix: str | None = None,
    path_prefix: str = "",
    commit_message: str | None = None,
    partitions: int | None = None,
    options: dict[str, str] | None = None,
) -> int:
    """Import; returns the number of entries."""
    from lsmstore.spark import register, save

    register(spark)

    inventory = read_inventory(spark, paths, fmt)
    df = inventory_entries(inventory, address_prefix=address_prefix, path_prefix=path_prefix)
    # Counted on the input (Parquet: from the files' footers), not cached: a cache of a
    # big inventory costs a pass and its size in memory, and the write reads it once.
    n = int(inventory.count())
    opts = dict(options or {})
    if commit_message is not None:
        opts.update(commit="direct", message=commit_message)
    if partitions is None:  # a task holds its records in memory while it sorts them
        cores = spark.sparkContext.defaultParallelism
        partitions = max(cores, -(-n // TASK_ENTRIES))
    save(df, url, partitions=partitions, **opts)
    return n


def export(spark: Any, url: str, output: str, *, options: dict[str, str] | None = None) -> int:
    """Write the entries of ``url`` (``lsm://repo/ref[/prefix]``) as Parquet: by the
    tasks themselves to a local directory or an ``s3://`` URL
    (:mod:`lsmstore.spark.export`), else by Spark's writer to a Hadoop path."""
    from lsmstore.spark import register
    from lsmstore.spark.export import direct_target, export_direct
    from lsmstore.spark.source import Options

    register(spark)
    opts = {"minPartitions": str(2 * spark.sparkContext.defaultParallelism), **(options or {})}
    parsed = Options.parse({**opts, "path": url})
    default_fs = spark.sparkContext._jsc.hadoopConfiguration().get("fs.defaultFS", "file:///")
    target = direct_target(output, default_fs)
    if target is not None and not parsed.table:  # the tasks write (lsmstore.spark.export)
        return export_direct(spark, parsed, target)
    df = spark.read.format("lsmstore").options(**opts).load(url)
    df.write.mode("errorifexists").parquet(output)
    return int(spark.read.parquet(output).count())


def spark_range_reader(spark: Any, namespace: str) -> ReadRanges:
    """Read ranges on executors: each task opens the namespace and reads its share."""

    def read_part(ids: Any) -> Any:
        from lsmstore.spark.source import run

        async def main() -> set[str]:
            objects = open_object_store(namespace)
            try:
                return await read_ranges_locally(objects, list(ids))
            finally:
                await objects.aclose()

        return iter(run(main()))

    async def read(range_ids: list[str]) -> set[str]:
        if not range_ids:
            return set()
        n = max(1, min(len(range_ids), spark.sparkContext.defaultParallelism * 4))

        def job() -> set[str]:
            rdd = spark.sparkContext.parallelize(range_ids, n)
            return set(rdd.mapPartitions(read_part).distinct().collect())

        return await asyncio.to_thread(job)

    return read


def garbage_collect(
    spark: Any,
    refstore_url: str,
    retention: Retention,
    *,
    grace_s: float,
    dry_run: bool,
) -> dict[str, Any]:
    from lsmstore.spark.source import run

    def reader(namespace: str) -> ReadRanges:
        return spark_range_reader(spark, namespace)

    async def main() -> dict[str, Any]:
        async with open_refstore(refstore_url) as refstore:
            result = await collect_all(
                refstore,
                lambda _repo: retention,
                grace_s=grace_s,
                dry_run=dry_run,
                read_ranges=reader,
            )
        return {
            "reports": [
                {
                    "repo": r.repo,
                    "mark": r.mark_id,
                    "previous_mark": r.previous_mark,
                    "candidates": r.candidates,
                    "deleted": r.deleted,
                    "dry_run": r.dry_run,
                }
                for r in result.reports
            ],
            "errors": result.errors,
        }

    return run(main())


def main(argv: Sequence[str] | None = None) -> int:
    cfg = load_config()
    p = argparse.ArgumentParser(prog="lsmstore spark", description=__doc__.split("\n\n")[0])
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--refstore", default=cfg.refstore_url, help="RefStore URL")
    sub = p.add_subparsers(dest="job", required=True)
    imp = sub.add_parser("import", help="inventory -> object entries on a branch")
    imp.add_argument("url", help="lsm://repo/branch")
    imp.add_argument("inventory", nargs="+", help="Parquet or CSV files or directories")
    imp.add_argument("--inventory-format", choices=("parquet", "csv"), default="parquet")
    imp.add_argument("--address-prefix", help="physical address = prefix + key")
    imp.add_argument("--path-prefix", default="", help="object path = prefix + key")
    imp.add_argument("--commit", metavar="MESSAGE", help="commit directly with this message")
    imp.add_argument("--partitions", type=int)
    exp = sub.add_parser("export", help="a ref -> a Parquet dataset of its entries")
    exp.add_argument("url", help="lsm://repo/ref[/prefix]")
    exp.add_argument(
        "output", help="Parquet output: a local path, file://, s3://, or a Hadoop path (s3a://...)"
    )
    exp.add_argument("--format", choices=("objects", "raw"), default="objects")
    g = sub.add_parser("gc", help="garbage collection of every repository")
    g.add_argument("--rules", help="lakeFS retention rules (JSON file)")
    g.add_argument("--default-days", type=float, default=21.0)
    g.add_argument("--grace-seconds", type=float, default=6 * 3600.0)
    g.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    started = time.time()
    master = args.master
    if master is None and "spark.master" not in _submitted_conf():
        master = "local[*]"
    try:
        spark = session(master, f"lsmstore-{args.job}")
    except ImportError as e:
        print(f"lsmstore spark needs PySpark: pip install 'lsmstore[spark]' ({e})", file=sys.stderr)
        return 2
    try:
        opts = {"refstore": args.refstore}
        out: dict[str, Any]
        if args.job == "import":
            n = import_inventory(
                spark,
                args.url,
                args.inventory,
                fmt=args.inventory_format,
                address_prefix=args.address_prefix,
                path_prefix=args.path_prefix,
                commit_message=args.commit,
                partitions=args.partitions,
                options=opts,
            )
            out = {"job": "import", "entries": n}
        elif args.job == "export":
            n = export(spark, args.url, args.output, options={**opts, "format": args.format})
            out = {"job": "export", "records": n}
        else:
            if args.grace_seconds < cfg.compaction_grace_s:
                raise InvalidInputError(
                    f"--grace-seconds {args.grace_seconds:g} is shorter than the staging grace "
                    f"period (compaction_grace_s = {cfg.compaction_grace_s:g}): writers and "
                    "compactions rely on it"
                )
            if args.rules:
                with open(args.rules, encoding="utf-8") as f:
                    retention = Retention.parse(f.read())
            else:
                retention = Retention(default_days=args.default_days)
            out = {"job": "gc"} | garbage_collect(
                spark, args.refstore, retention, grace_s=args.grace_seconds, dry_run=args.dry_run
            )
        out["seconds"] = round(time.time() - started, 3)
        print(json.dumps(out))
        return 1 if out.get("errors") else 0
    except LsmError as e:
        print(json.dumps({"job": args.job, "error": f"{type(e).__name__}: {e}"}))
        return 2
    finally:
        spark.stop()


def _submitted_conf() -> dict[str, str]:
    """spark-submit passes its configuration to the driver in the environment."""
    import os

    conf: dict[str, str] = {}
    if os.environ.get("SPARK_SUBMIT_OPTS") or os.environ.get("PYSPARK_GATEWAY_PORT"):
        conf["spark.master"] = "submitted"
    return conf


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
