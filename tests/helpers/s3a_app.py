"""A Spark application writing and reading Parquet through ``s3a://`` (hadoop-aws):
``python s3a_app.py <endpoint> <bucket> <jar,jar...>``; prints one JSON line."""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession

from lsmstore.spark import s3a


def main(endpoint: str, bucket: str, jars: str) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("s3a-check")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for k, v in s3a.conf(endpoint, "testing", "testing", jars.split(",")).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    url = f"s3a://{bucket}/tables/t"
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(
        jvm.java.net.URI(url), spark._jsc.hadoopConfiguration()
    )
    df = spark.range(500).selectExpr("id", "cast(id % 4 as int) as p")
    df.write.partitionBy("p").mode("overwrite").parquet(url)
    back = spark.read.parquet(url)
    rows = sorted((r.id, r.p) for r in back.collect())
    pruned = back.where("p = 2").count()
    print(
        json.dumps(
            {
                "filesystem": fs.getClass().getName(),
                "rows_equal": rows == [(i, i % 4) for i in range(500)],
                "pruned": pruned,
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
