"""A Spark application writing and reading an lsmstore table, whose executor is killed
once mid-write, then read back by the data source and by ``read_table`` (Spark's own
reader on the executors): ``table_app.py <refstore> <lsm url> <marker file>``; one JSON
line."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lsmstore.spark import read_table, register


def _executor_pid() -> int | None:
    """The executor JVM this Python worker runs under (an ancestor process)."""
    pid = os.getppid()
    while pid > 1:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"CoarseGrainedExecutorBackend" in cmd:
            return pid
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return None


def kill_once(marker: str) -> object:
    def fn(i: int) -> int:
        if i == 500 and not os.path.exists(marker):
            Path(marker).write_text("executor killed")
            jvm = _executor_pid()
            if jvm is not None:
                os.kill(jvm, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        return i

    return fn


def main(refstore: str, url: str, marker: str) -> None:
    spark = SparkSession.builder.appName("table-app").getOrCreate()
    register(spark)
    opts = {"refstore": refstore, "format": "parquet"}
    udf = F.udf(kill_once(marker), "long")
    df = spark.range(1000, numPartitions=4).selectExpr("id", "cast(id % 4 as int) as p")
    df = df.withColumn("id", udf("id"))
    df.write.format("lsmstore").options(partitionBy="p", **opts).mode("append").save(url)
    back = spark.read.format("lsmstore").options(**opts).load(url)
    rows = sorted((r.id, r.p) for r in back.collect())
    pruned = spark.read.format("lsmstore").options(partitionFilter="p=3", **opts).load(url)
    native = read_table(spark, url, refstore=refstore)
    print(
        json.dumps(
            {
                "rows_equal": rows == [(i, i % 4) for i in range(1000)],
                "pruned": pruned.count(),
                "read_table_equal": sorted((r.id, r.p) for r in native.collect()) == rows,
                "read_table_pruned": native.where("p = 3").count(),
                "killed": os.path.exists(marker),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
