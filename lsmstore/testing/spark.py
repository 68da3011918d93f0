"""A local SparkSession for tests and benchmarks: loopback only, the venv's Python."""

from __future__ import annotations

import os
import sys
from typing import Any


def local_session(
    cores: int = 2,
    *,
    max_failures: int = 4,
    app: str = "lsmstore",
    conf: dict[str, str] | None = None,
) -> Any:
    """``local[cores, max_failures]`` (so a failed task is retried), no UI, small
    shuffles, executors and driver on 127.0.0.1 running this interpreter; ``conf``:
    more settings (e.g. :func:`lsmstore.spark.s3a.conf`), applied before the session
    starts."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from lsmstore.spark import register

    builder = (
        SparkSession.builder.master(f"local[{cores},{max_failures}]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(cores * 2))
        .config("spark.python.worker.reuse", "true")
    )
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


class StandaloneCluster:
    """A Spark standalone master and one worker on loopback, from PySpark's own
    distribution (``bin/spark-class``), for tests that submit real applications."""

    def __init__(self, work_dir: str, *, cores: int = 2, memory: str = "1g") -> None:
        import pyspark

        from lsmstore.testing.servers import free_port

        self.home = os.path.dirname(pyspark.__file__)
        self.work_dir = work_dir
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self._procs: list[Any] = []

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": self.home,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_WORKER_DIR": os.path.join(self.work_dir, "worker"),
            "SPARK_LOG_DIR": os.path.join(self.work_dir, "logs"),
        }

    def start(self) -> None:
        import subprocess

        from lsmstore.testing.servers import free_port, wait_listening

        spark_class = os.path.join(self.home, "bin", "spark-class")
        master_log = open(os.path.join(self.work_dir, "master.log"), "wb")
        self._procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(free_port()),
                ],
                env=self.env(),
                stdout=master_log,
                stderr=subprocess.STDOUT,
            )
        )
        wait_listening(self.port, self._procs[-1])
        worker_log = open(os.path.join(self.work_dir, "worker.log"), "wb")
        self._procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    self.url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    str(free_port()),
                    "--port",
                    str(free_port()),
                ],
                env=self.env(),
                stdout=worker_log,
                stderr=subprocess.STDOUT,
            )
        )

    def submit(
        self,
        app: str,
        args: list[str],
        timeout: float = 600.0,
        conf: dict[str, str] | None = None,
    ) -> Any:
        """``spark-submit --master <this cluster> [--conf k=v...] app args``; the
        CompletedProcess."""
        import subprocess

        extra = [a for k, v in (conf or {}).items() for a in ("--conf", f"{k}={v}")]

        cmd = [
            os.path.join(self.home, "bin", "spark-submit"),
            "--master",
            self.url,
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.driver.bindAddress=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.executor.memory={self.memory}",
            *extra,
            app,
            *args,
        ]
        return subprocess.run(
            cmd, env=self.env(), capture_output=True, timeout=timeout, check=False
        )

    def stop(self) -> None:
        for p in reversed(self._procs):
            p.terminate()
        for p in reversed(self._procs):
            try:
                p.wait(timeout=30)
            except Exception:
                p.kill()
                p.wait()
        self._procs.clear()
