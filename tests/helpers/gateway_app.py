"""A Spark application using Spark's own writers and readers through the S3 gateway
(``s3a://<repo>/<ref>/<path>``), committing through the REST API between writes:
``gateway_app.py <master|-> <server url> <access key> <secret> <repo> <jar,jar...>
[<refstore>]`` (``-``: the master and the jars come from spark-submit).  With the
server's RefStore it also writes a table atomically with the data source and reads it
back through the gateway.  Prints one JSON line."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import httpx
from pyspark.sql import SparkSession

from lsmstore.spark import register, s3a


def counters(fs: Any) -> dict[str, int]:
    """The S3A file system's counters (requests by kind, renames...)."""
    stats = fs.getIOStatistics().counters()
    return {str(k): int(stats.get(k)) for k in stats.keySet()}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def main(
    master: str, url: str, key: str, secret: str, repo: str, jars: str, refstore: str = ""
) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers: this venv
    builder = SparkSession.builder.appName("gateway-app").config("spark.ui.enabled", "false")
    conf = s3a.conf(url, key, secret, jars.split(",") if jars else [])
    if master != "-":
        builder = builder.master(master).config("spark.driver.host", "127.0.0.1")
    else:
        del conf["spark.jars"]  # on the class path spark-submit was given
    # Parts of 5 MiB (S3's smallest) so that the large CSV goes up as a multipart upload.
    conf["spark.hadoop.fs.s3a.multipart.size"] = "5M"
    conf["spark.hadoop.fs.s3a.multipart.threshold"] = "5M"
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    api = httpx.Client(base_url=url + "/api/v1", auth=(key, secret), timeout=60)
    base = f"s3a://{repo}"
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(
        jvm.java.net.URI(base + "/main/"), spark._jsc.hadoopConfiguration()
    )
    out: dict[str, Any] = {"filesystem": fs.getClass().getName()}

    def rows(df: Any) -> list[tuple[int, int]]:
        return sorted((int(r.id), int(r.p)) for r in df.select("id", "p").collect())

    v1 = spark.range(1000, numPartitions=4).selectExpr("id", "cast(id % 4 as int) as p")
    before = counters(fs)
    v1.write.partitionBy("p").mode("overwrite").parquet(f"{base}/main/tables/t")
    out["write_counters"] = delta(counters(fs), before)
    out["v1_files"] = len(spark.read.parquet(f"{base}/main/tables/t").inputFiles())
    out["branch_rows"] = rows(spark.read.parquet(f"{base}/main/tables/t")) == rows(v1)
    out["pruned"] = spark.read.parquet(f"{base}/main/tables/t").where("p = 2").count()
    c1 = api.post(f"/repositories/{repo}/branches/main/commits", json={"message": "t v1"})
    c1.raise_for_status()
    commit1 = c1.json()["id"]
    tag = api.post(f"/repositories/{repo}/tags", json={"id": "v1", "ref": commit1})
    tag.raise_for_status()

    v2 = spark.range(1000, 1500, numPartitions=2).selectExpr("id", "cast(id % 4 as int) as p")
    v2.write.partitionBy("p").mode("append").parquet(f"{base}/main/tables/t")
    api.post(
        f"/repositories/{repo}/branches/main/commits", json={"message": "t v2"}
    ).raise_for_status()
    out["tag_rows"] = rows(spark.read.parquet(f"{base}/v1/tables/t")) == rows(v1)
    out["commit_rows"] = rows(spark.read.parquet(f"{base}/{commit1}/tables/t")) == rows(v1)
    out["appended_rows"] = rows(spark.read.parquet(f"{base}/main/tables/t")) == sorted(
        rows(v1) + rows(v2)
    )
    v3 = spark.range(10).selectExpr("id", "cast(id % 2 as int) as p")
    v3.write.partitionBy("p").mode("overwrite").parquet(f"{base}/main/tables/t")
    out["overwritten_rows"] = rows(spark.read.parquet(f"{base}/main/tables/t")) == rows(v3)
    out["tag_after_overwrite"] = rows(spark.read.parquet(f"{base}/v1/tables/t")) == rows(v1)

    people = spark.range(200).selectExpr(
        "id", "cast(id % 4 as int) as p", "concat('n', id) as name"
    )
    people.write.mode("overwrite").option("header", "true").csv(f"{base}/main/tables/csv")
    back = spark.read.option("header", "true").schema(people.schema).csv(f"{base}/main/tables/csv")
    out["csv_rows"] = sorted(back.collect()) == sorted(people.collect())
    people.write.mode("overwrite").json(f"{base}/main/tables/json")
    back = spark.read.schema(people.schema).json(f"{base}/main/tables/json")
    out["json_rows"] = sorted(back.collect()) == sorted(people.collect())

    big = spark.range(600_000, numPartitions=1).selectExpr("id", "cast(id % 4 as int) as p")
    before = counters(fs)
    big.write.mode("overwrite").option("header", "true").csv(f"{base}/main/tables/big")
    out["multipart_uploads"] = delta(counters(fs), before).get("multipart_upload_completed", 0)
    back = spark.read.option("header", "true").schema(big.schema).csv(f"{base}/main/tables/big")
    out["big_rows"] = back.count() == 600_000 and back.where("id = 599999").count() == 1
    try:
        spark.range(3).write.mode("overwrite").parquet(f"{base}/v1/tables/readonly")
        out["tag_write"] = "written"
    except Exception as e:  # the gateway answers MethodNotAllowed
        out["tag_write"] = "refused" if "MethodNotAllowed" in str(e) or "405" in str(e) else str(e)
    if refstore:
        atomic = spark.range(2000, numPartitions=4).selectExpr(
            "id", "cast(id % 4 as int) as p", "concat('n', id) as name"
        )
        atomic.write.format("lsmstore").options(
            refstore=refstore, format="parquet", partitionBy="p"
        ).mode("overwrite").save(f"lsm://{repo}/main/tables/atomic/")
        back = spark.read.parquet(f"{base}/main/tables/atomic")
        want = sorted(tuple(r) for r in atomic.collect())
        got = sorted(tuple(r) for r in back.select(*atomic.columns).collect())
        out["atomic_s3a_rows"] = got == want
    print(json.dumps(out))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
