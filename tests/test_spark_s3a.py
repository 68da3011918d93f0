"""Spark's own Parquet writer and reader through ``s3a://``: the hadoop-aws jars that
``./dev.sh test`` resolves from Maven Central (matching PySpark's Hadoop) load
``S3AFileSystem`` in a local session, which writes and reads a partitioned table on an
S3 server on loopback (moto)."""

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


async def test_s3a_parquet_round_trip_on_loopback(moto: MotoServer) -> None:
    jars = s3a.jars(IVY)  # ./dev.sh test fetched them
    bucket = await new_bucket(moto.endpoint)
    app = Path(__file__).parent / "helpers" / "s3a_app.py"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(app), moto.endpoint, bucket, ",".join(jars)],
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
    }
