"""Dataframe tools through the S3 gateway of a real server: pyarrow's S3FileSystem
(its C++ AWS SDK) writing and reading a partitioned dataset, pandas through s3fs, Polars."""

from __future__ import annotations

from urllib.parse import urlparse

import httpx
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from helpers.server import make_repo

from lsmstore.testing.server_process import ServerProcess

pytestmark = pytest.mark.timeout(300)


def arrow_fs(server: ServerProcess) -> pafs.S3FileSystem:
    url = urlparse(server.url)
    return pafs.S3FileSystem(
        access_key=server.admin[0], secret_key=server.admin[1], region="us-east-1",
        endpoint_override=url.netloc, scheme="http", force_virtual_addressing=False,
        allow_bucket_creation=False, allow_bucket_deletion=False,
    )  # fmt: skip


def test_pyarrow_partitioned_dataset(server: ServerProcess, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    fs = arrow_fs(server)
    table = pa.table({"year": [2024, 2024, 2025, 2025, 2026], "v": [1.0, 2.0, 3.0, 4.0, 5.0]})
    ds.write_dataset(table, f"{repo}/main/t", filesystem=fs, format="parquet",
                     partitioning=["year"], partitioning_flavor="hive")  # fmt: skip
    infos = fs.get_file_info(pafs.FileSelector(f"{repo}/main/t", recursive=True))
    files = sorted(i.path for i in infos if i.type == pafs.FileType.File)
    assert [f.rsplit("/", 2)[1] for f in files] == ["year=2024", "year=2025", "year=2026"]
    back = ds.dataset(f"{repo}/main/t", filesystem=fs, format="parquet", partitioning="hive")
    got = back.to_table().sort_by("v")
    assert got.column("v").to_pylist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert got.column("year").to_pylist() == [2024, 2024, 2025, 2025, 2026]
    only = back.to_table(filter=ds.field("year") == 2025)
    assert sorted(only.column("v").to_pylist()) == [3.0, 4.0]
    pq.write_table(table, f"{repo}/main/single.parquet", filesystem=fs)
    frame = pq.read_table(f"{repo}/main/single.parquet", filesystem=fs).to_pandas()
    assert frame["v"].sum() == 15.0


def test_pandas_through_s3fs(server: ServerProcess, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    opts = {"key": server.admin[0], "secret": server.admin[1],
            "client_kwargs": {"endpoint_url": server.url, "region_name": "us-east-1"},
            "config_kwargs": {"s3": {"addressing_style": "path"}}}  # fmt: skip
    frame = pd.DataFrame({"part": ["a", "a", "b"], "n": [1, 2, 3]})
    frame.to_parquet(f"s3://{repo}/main/t.parquet", storage_options=opts)
    back = pd.read_parquet(f"s3://{repo}/main/t.parquet", storage_options=opts)
    assert back.equals(frame)
    frame.to_parquet(f"s3://{repo}/main/parts", partition_cols=["part"], storage_options=opts)
    parts = pd.read_parquet(f"s3://{repo}/main/parts", storage_options=opts)
    assert sorted(parts["n"].tolist()) == [1, 2, 3]
    assert sorted(parts["part"].astype(str).unique()) == ["a", "b"]
    csv = f"s3://{repo}/main/t.csv"
    frame.to_csv(csv, index=False, storage_options=opts)
    assert pd.read_csv(csv, storage_options=opts).equals(frame)


def test_polars_with_storage_options(server: ServerProcess, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    opts = {"aws_access_key_id": server.admin[0], "aws_secret_access_key": server.admin[1],
            "aws_region": "us-east-1", "aws_endpoint_url": server.url,
            "aws_allow_http": "true", "aws_virtual_hosted_style_request": "false"}  # fmt: skip
    frame = pl.DataFrame({"k": ["x", "y", "z"], "v": [1, 2, 3]})
    frame.write_parquet(f"s3://{repo}/main/pl/t.parquet", storage_options=opts)
    back = pl.read_parquet(f"s3://{repo}/main/pl/t.parquet", storage_options=opts)
    assert back.equals(frame)
    lazy = pl.scan_parquet(f"s3://{repo}/main/pl/*.parquet", storage_options=opts)
    assert lazy.filter(pl.col("v") > 1).collect()["k"].to_list() == ["y", "z"]
