"""Spark's own Parquet writer and reader through ``s3a://``: the hadoop-aws jars that
``./dev.sh test`` resolves from Maven Central (matching PySpark's Hadoop) load
``S3AFileSystem`` in a local session, which writes and reads a partitioned table on an
S3 server on loopback (moto), and reads a table of an S3 namespace by
``lsmstore.spark.read_table``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lsmstore.spark import s3a
from lsmstore.testing.servers import MotoServer, new_bucket

pytestmark = pytest.mark.timeout(600)

#: Where ./dev.sh resolves hadoop-aws: beside the venv's interpreter.
IVY = os.path.join(sys.prefix, "spark-ivy")


def test_hadoop_aws_matches_pyspark() -> None:
    assert s3a.package() == f"org.apache.hadoop:hadoop-aws:{s3a.hadoop_version()}"
    assert s3a.hadoop_version().startswith("3.")
    with pytest.raises(s3a.HadoopAwsMissingError, match="fetch it"):
        s3a.jars("/nonexistent")


async def test_s3a_parquet_round_trip_on_loopback(moto: MotoServer, tmp_path: Path) -> None:
    jars = s3a.jars(IVY)  # ./dev.sh test fetched them
    bucket = await new_bucket(moto.endpoint)
    app = Path(__file__).parent / "helpers" / "s3a_app.py"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(app), moto.endpoint, bucket, ",".join(jars), str(tmp_path / "refs")],
        capture_output=True,
        env=env,
        timeout=540,
        check=False,
    )
    lines = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr.decode()[-4000:]
    out = json.loads(lines[-1])
    assert out == {
        "filesystem": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "rows_equal": True,
        "pruned": 125,
        # read_table: Spark's reader over the data objects in the S3 namespace
        "table_rows_equal": True,
        "table_files": [f"s3a://{bucket}/lsm/data/p={p}" for p in range(4)],
        "exported_every_entry": True,  # one entry per file of the table
    }
