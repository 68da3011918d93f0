"""DuckDB through the S3 gateway of a real server: its httpfs extension (loaded from the
``duckdb-extension-httpfs`` package, never downloaded) writes Parquet with ``COPY`` and
reads it back through a glob, which lists through the gateway."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import duckdb
import duckdb_extension_httpfs
import httpx
import pytest
from helpers.server import make_repo

from lsmstore.testing.server_process import ServerProcess

pytestmark = pytest.mark.timeout(300)


def connect(server: ServerProcess, extensions: Path) -> duckdb.DuckDBPyConnection:
    """A connection that never installs or downloads an extension: httpfs is loaded from
    the file its pip package ships for this DuckDB version."""
    shipped = (Path(duckdb_extension_httpfs.__file__).parent / "extensions"
               / f"v{duckdb.__version__}" / "httpfs.duckdb_extension")  # fmt: skip
    con = duckdb.connect(config={
        "autoinstall_known_extensions": False, "autoload_known_extensions": False,
        "extension_directory": str(extensions)})  # fmt: skip
    con.execute(f"LOAD '{shipped}'")
    con.execute(
        "CREATE SECRET gateway (TYPE s3, KEY_ID ?, SECRET ?, REGION 'us-east-1', "
        "ENDPOINT ?, URL_STYLE 'path', USE_SSL false)",
        [server.admin[0], server.admin[1], urlparse(server.url).netloc],
    )
    return con


def test_duckdb_copy_and_glob_read(server: ServerProcess, admin: httpx.Client,
                                   tmp_path: Path) -> None:  # fmt: skip
    repo = make_repo(admin)
    con = connect(server, tmp_path / "extensions")
    rows = "SELECT i, 'row ' || i AS name FROM range(1000) t(i) WHERE i % {n} = {r}"
    con.execute(f"COPY ({rows.format(n=2, r=0)}) TO 's3://{repo}/main/t/part-0.parquet'")
    con.execute(f"COPY ({rows.format(n=2, r=1)}) TO 's3://{repo}/main/t/part-1.parquet'")
    got = con.execute(f"SELECT i, name FROM 's3://{repo}/main/t/*.parquet' ORDER BY i").fetchall()
    assert got == [(i, f"row {i}") for i in range(1000)]
    files = con.execute(f"SELECT file FROM glob('s3://{repo}/main/t/*.parquet') ORDER BY file")
    assert [f for (f,) in files.fetchall()] == [
        f"s3://{repo}/main/t/part-0.parquet", f"s3://{repo}/main/t/part-1.parquet"]  # fmt: skip
    listed = admin.get(f"/repositories/{repo}/refs/main/objects/ls",
                       params={"prefix": "t/"})  # fmt: skip
    assert [o["path"] for o in listed.json()["results"]] == ["t/part-0.parquet", "t/part-1.parquet"]
    assert not any((tmp_path / "extensions").rglob("*.duckdb_extension"))
