"""Spark's own ``s3a://`` readers and writers: hadoop-aws for PySpark's Hadoop.

PySpark bundles Hadoop's client (``pyspark/jars/hadoop-client-api-<version>.jar``) but
not hadoop-aws, whose ``S3AFileSystem`` serves ``s3a://``.  hadoop-aws must be the
same version as the bundled client; it comes from Maven Central with its one runtime
dependency, the AWS SDK v2 ``bundle`` (about 560 MB).  :func:`fetch` resolves them
once with Spark's own resolver (``spark.jars.packages``) into an Ivy directory;
:func:`jars` lists the resolved jars for ``spark.jars`` (no network afterwards) and
:func:`conf` is the configuration of a session that talks to one S3 endpoint with
path-style addressing (an S3 server on loopback, the lsmstore gateway) and commits a
job's files with FileOutputCommitter's algorithm 2 (:data:`COMMIT_CONF`).

``python -m lsmstore.spark.s3a <ivy dir>`` fetches (``./dev.sh test`` does, into
``.venv/spark-ivy``); it prints the jar paths.
"""

from __future__ import annotations

import glob
import os
import re
import sys

from lsmstore.errors import LsmError

GROUP = "org.apache.hadoop"
ARTIFACT = "hadoop-aws"


class HadoopAwsMissingError(LsmError):
    """The hadoop-aws jars are not in the Ivy directory: run :func:`fetch`."""


def hadoop_version() -> str:
    """The Hadoop version PySpark bundles (from its ``hadoop-client-api`` jar)."""
    import pyspark

    found = glob.glob(
        os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar")
    )
    for path in found:
        m = re.fullmatch(r"hadoop-client-api-(\d+\.\d+\.\d+)\.jar", os.path.basename(path))
        if m:
            return m.group(1)
    raise LsmError("PySpark bundles no hadoop-client-api jar: cannot tell its Hadoop version")


def package() -> str:
    """The Maven coordinates of the matching hadoop-aws."""
    return f"{GROUP}:{ARTIFACT}:{hadoop_version()}"


def jars(ivy_dir: str) -> list[str]:
    """The resolved jars (hadoop-aws and its dependencies) in ``ivy_dir``;
    HadoopAwsMissingError when hadoop-aws is not among them."""
    found = sorted(glob.glob(os.path.join(ivy_dir, "jars", "*.jar")))
    want = f"{GROUP}_{ARTIFACT}-{hadoop_version()}.jar"
    if not any(os.path.basename(j) == want for j in found):
        raise HadoopAwsMissingError(
            f"{want} is not in {ivy_dir}/jars: fetch it with python -m lsmstore.spark.s3a {ivy_dir}"
        )
    return found


#: The output commit of Spark's file writers through the gateway: FileOutputCommitter's
#: algorithm 2.  Each task commit renames the task's files into the destination (in the
#: tasks, in parallel); the job commit only writes ``_SUCCESS``.  Algorithm 1, Spark's
#: default, renames every file twice -- into a job directory at task commit, into the
#: destination at job commit, one after another on the driver -- and on S3 a rename is a
#: CopyObject and a DeleteObject.  Neither is atomic on S3 (docs/spark.md, "s3a").
COMMIT_CONF = {"spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version": "2"}


def conf(endpoint: str, access_key: str, secret_key: str, jar_paths: list[str]) -> dict[str, str]:
    """Session configuration for ``s3a://`` against ``endpoint`` (path-style, the given
    keys; TLS when the endpoint is https) with the output commit of :data:`COMMIT_CONF`."""
    return {
        **COMMIT_CONF,
        "spark.jars": ",".join(jar_paths),
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
        "spark.hadoop.fs.s3a.access.key": access_key,
        "spark.hadoop.fs.s3a.secret.key": secret_key,
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
    }


def fetch(ivy_dir: str) -> list[str]:
    """Resolve hadoop-aws (and its dependencies) from Maven Central into ``ivy_dir``
    with Spark's resolver, unless already there; the jars."""
    try:
        return jars(ivy_dir)
    except HadoopAwsMissingError:
        pass
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("lsmstore-fetch-hadoop-aws")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.jars.packages", package())
        .config("spark.jars.ivy", os.path.abspath(ivy_dir))
        .getOrCreate()
    )
    spark.stop()
    return jars(ivy_dir)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m lsmstore.spark.s3a <ivy dir>", file=sys.stderr)
        return 2
    try:
        print("\n".join(fetch(argv[0])))
    except LsmError as e:
        print(f"hadoop-aws for PySpark: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # Spark's resolver: the artifact it could not have
        print(f"could not resolve {package()} from Maven Central: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
