"""lsmstore on Spark: the ``lsmstore`` data source (entries, raw records, and Parquet
tables written as one unit: :mod:`lsmstore.spark.tables`), transactions across jobs
(:func:`transaction`), tables read by Spark's own Parquet reader
(:func:`read_table`), ``s3a://`` set-up (:mod:`lsmstore.spark.s3a`) and the
import/export/gc jobs.

Needs the ``spark`` extra (``pip install 'lsmstore[spark]'``: PySpark >= 4.0, pyarrow)
and Java 17+.  See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from lsmstore.spark.location import Location, parse_location

__all__ = ["Location", "parse_location", "read_table", "register", "save", "transaction"]


def read_table(spark: Any, url: str, **kwargs: Any) -> Any:
    """A table read by Spark's own Parquet reader: see :mod:`lsmstore.spark.native_read`."""
    from lsmstore.spark.native_read import read_table as read

    return read(spark, url, **kwargs)


def transaction(url: str, **kwargs: Any) -> Any:
    """A transaction branch for several Spark jobs: see :mod:`lsmstore.spark.transaction`."""
    from lsmstore.spark.transaction import transaction as tx

    return tx(url, **kwargs)


def register(spark: Any) -> None:
    """Register the ``lsmstore`` data source with a SparkSession, and make the session
    the calling thread's active one: Spark looks Python data sources up in the JVM
    thread's active session, which a thread other than the session's creator lacks."""
    from lsmstore.spark.source import LsmDataSource

    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    spark.dataSource.register(LsmDataSource)


def save(df: Any, url: str, *, partitions: int | None = None, **options: str) -> None:
    """Append ``df`` to the branch ``url`` (``lsm://repo/branch``) as one unit.

    The rows are range-partitioned by key (``path`` for objects, ``key`` for raw) into
    ``partitions`` (default: the session's default parallelism) and sorted within each
    partition, so the tasks write non-overlapping files; ``options`` are the data
    source's (``format``, ``refstore``, ``commit``...).
    """
    register(df.sparkSession)
    key = "key" if options.get("format") == "raw" else "path"
    n = partitions or df.sparkSession.sparkContext.defaultParallelism
    (
        df.repartitionByRange(max(1, n), key)
        .sortWithinPartitions(key)
        .write.format("lsmstore")
        .mode("append")
        .options(**options)
        .save(url)
    )
