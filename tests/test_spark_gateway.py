"""Spark's own writers and readers through the S3 gateway of a real server
(``s3a://<repo>/<ref>/<path>``, hadoop-aws from ``./dev.sh test``): a partitioned
Parquet table, CSV and JSON written on a branch with the file output committer's
algorithm 2 (``s3a.conf``: each file renamed once, by its task; a rename is a CopyObject
and a delete: a link, no data copied), read back from
the branch, a tag and a commit made through the REST API between writes; on
``local[2]`` and on a standalone cluster on loopback.  A table written atomically by
the data source reads the same through the gateway, by Spark and by DuckDB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.server import make_repo
from test_gateway_duckdb import connect

from lsmstore.spark import s3a
from lsmstore.testing.server_process import ServerProcess
from lsmstore.testing.spark import StandaloneCluster

pytestmark = pytest.mark.timeout(900)

IVY = os.path.join(sys.prefix, "spark-ivy")
APP = Path(__file__).parent / "helpers" / "gateway_app.py"


def _summary(proc: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    lines = [ln for ln in proc.stdout.decode().splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr.decode()[-4000:]
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def _check_round_trips(out: dict[str, Any]) -> None:
    assert out["filesystem"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    for name in ("branch_rows", "tag_rows", "commit_rows", "appended_rows",
                 "overwritten_rows", "tag_after_overwrite", "csv_rows", "json_rows",
                 "big_rows"):  # fmt: skip
        assert out[name] is True, name
    assert out["pruned"] == 250
    assert out["tag_write"] == "refused"


def _paths(admin: httpx.Client, repo: str, ref: str, prefix: str) -> list[str]:
    r = admin.get(f"/repositories/{repo}/refs/{ref}/objects/ls",
                  params={"prefix": prefix, "amount": 1000})  # fmt: skip
    assert r.status_code == 200, r.text
    return [o["path"] for o in r.json()["results"]]


def test_spark_s3a_through_the_gateway_local(
    server: ServerProcess, admin: httpx.Client, tmp_path: Path
) -> None:
    repo = make_repo(admin)
    refstore = f"local://{server.home / 'refs'}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent),
           "LSMSTORE_HOME": str(server.home)}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(APP), "local[2]", server.url, *server.admin, repo,
         ",".join(s3a.jars(IVY)), refstore],
        capture_output=True, env=env, timeout=840, check=False,
    )  # fmt: skip
    out = _summary(proc)
    _check_round_trips(out)
    assert out["multipart_uploads"] == 1  # the large CSV file (parts of 5 MiB)
    # The committer's renames went through the gateway as copies, once per file: the
    # task commits of algorithm 2 (s3a.COMMIT_CONF); algorithm 1 copies each file twice.
    written = out["write_counters"]
    assert out["v1_files"] == 16  # 4 tasks x 4 partition values
    assert written["op_rename"] > 0
    assert written["object_copy_requests"] == out["v1_files"]
    table = _paths(admin, repo, "main", "tables/t/")
    assert "tables/t/_SUCCESS" in table
    assert not [p for p in table if "_temporary" in p]
    assert {p.split("/")[2] for p in table if p.endswith(".parquet")} == {"p=0", "p=1"}
    # The data source's atomic write reads the same by Spark through s3a and by DuckDB.
    assert out["atomic_s3a_rows"] is True
    con = connect(server, tmp_path / "extensions")
    got = con.execute(
        f"SELECT id, p, name FROM read_parquet('s3://{repo}/main/tables/atomic/*/*.parquet', "
        "hive_partitioning = true) ORDER BY id"
    ).fetchall()
    assert got == [(i, i % 4, f"n{i}") for i in range(2000)]


def test_spark_s3a_through_the_gateway_on_a_cluster(
    server: ServerProcess, admin: httpx.Client, tmp_path: Path
) -> None:
    repo = make_repo(admin)
    classpath = ":".join(s3a.jars(IVY))  # one machine: no copy of the jars per executor
    cluster = StandaloneCluster(str(tmp_path))
    cluster.start()
    try:
        proc = cluster.submit(
            str(APP), ["-", server.url, *server.admin, repo, ""], timeout=840,
            conf={"spark.driver.extraClassPath": classpath,
                  "spark.executor.extraClassPath": classpath},
        )  # fmt: skip
    finally:
        cluster.stop()
    out = _summary(proc)
    _check_round_trips(out)
    # The executors' task commits renamed the files; the driver's job commit renamed
    # nothing (algorithm 2; algorithm 1's job commit renames every file on the driver).
    assert out["write_counters"].get("op_rename", 0) == 0
    assert out["write_counters"].get("object_copy_requests", 0) == 0
    assert "tables/t/_SUCCESS" in _paths(admin, repo, "main", "tables/t/")
