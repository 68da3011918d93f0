"""A Spark application writing and reading Parquet through ``s3a://`` (hadoop-aws):
``python s3a_app.py <endpoint> <bucket> <jar,jar...> <refstore dir>``; prints one JSON
line.  Then a table the ``lsmstore`` data source writes into a repository whose
namespace is in the same bucket, read by ``read_table`` over ``s3a://``."""

from __future__ import annotations

import asyncio
import json
import sys

import lsmstore
from lsmstore.spark import jobs, read_table, s3a
from lsmstore.testing.spark import local_session


def main(endpoint: str, bucket: str, jars: str, refs_dir: str) -> None:
    conf = s3a.conf(endpoint, "testing", "testing", jars.split(","))
    spark = local_session(2, app="s3a-check", conf=conf)
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
    refs = f"local://{refs_dir}"
    asyncio.run(_repository(refs, f"s3://{bucket}/lsm?endpoint_url={endpoint}"))
    opts = {"refstore": refs, "format": "parquet", "partitionBy": "p"}
    df.write.format("lsmstore").options(**opts).mode("append").save("lsm://rep/main/t/")
    table = read_table(spark, "lsm://rep/main/t/", refstore=refs)
    # an export to a Hadoop path goes through Spark's own writer
    exported = jobs.export(
        spark, "lsm://rep/main/t/", f"s3a://{bucket}/export", options={"refstore": refs}
    )
    print(
        json.dumps(
            {
                "filesystem": fs.getClass().getName(),
                "rows_equal": rows == [(i, i % 4) for i in range(500)],
                "pruned": pruned,
                "table_rows_equal": sorted((r.id, r.p) for r in table.collect()) == rows,
                "table_files": sorted({f.rsplit("/", 1)[0] for f in table.inputFiles()}),
                "exported_every_entry": exported == len(table.inputFiles()),
            }
        )
    )
    spark.stop()


async def _repository(refs: str, namespace: str) -> None:
    async with lsmstore.connect(refs, compaction_in_process="off") as store:
        await store.create_repository("rep", storage_namespace=namespace)


if __name__ == "__main__":
    main(*sys.argv[1:])
