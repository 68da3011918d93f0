"""A local SparkSession for tests and benchmarks: loopback only, the venv's Python."""

from __future__ import annotations

import os
import sys
from typing import Any


def local_session(cores: int = 2, *, max_failures: int = 4, app: str = "lsmstore") -> Any:
    """``local[cores, max_failures]`` (so a failed task is retried), no UI, small
    shuffles, executors and driver on 127.0.0.1 running this interpreter."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from lsmstore.spark import register

    spark = (
        SparkSession.builder.master(f"local[{cores},{max_failures}]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(cores * 2))
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
