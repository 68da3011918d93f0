"""The fsspec filesystem for lsm:// on the embedded store: found through its entry
point, ls/info/cat (ranged)/open/put/get/rm/cp, pandas read_parquet/to_parquet through
pyarrow, and transactions that commit and merge on success and leave nothing on
failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pandas as pd
import pytest
from fsspec.asyn import sync

import lsmstore
from lsmstore.filesystem import LsmFileSystem
from tests.helpers.remote import lsm_server  # noqa: F401 - the fixture


@pytest.fixture(params=["embedded", "server"])
def options(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """Storage options: the embedded store, or the server through the remote client."""
    if request.param == "embedded":
        return {"home": str(tmp_path / "home"), "skip_instance_cache": True}
    server = request.getfixturevalue("lsm_server")
    key, secret = server.admin
    return {"server": server.url, "access_key_id": key, "secret_access_key": secret,
            "skip_instance_cache": True}  # fmt: skip


@pytest.fixture
def fs(options: dict[str, Any], tmp_path: Path) -> Iterator[LsmFileSystem]:
    f = fsspec.filesystem("lsm", **options)
    assert isinstance(f, LsmFileSystem)
    remote = "server" in options
    ns = "local://r" if remote else (tmp_path / "ns").as_uri()

    async def create() -> None:
        store = await f._get_store()
        await store.create_repository("rep", storage_namespace=ns)

    async def delete() -> None:
        store = await f._get_store()
        await store.delete_repository("rep")

    sync(f.loop, create)
    yield f
    sync(f.loop, delete)  # the server outlives the test
    f.close()


def run(fs: LsmFileSystem, fn: Any, *args: Any) -> Any:
    return sync(fs.loop, fn, *args)


def test_entry_point_and_paths() -> None:
    assert fsspec.get_filesystem_class("lsm") is LsmFileSystem
    assert LsmFileSystem._strip_protocol("lsm://rep/main/a/b/") == "rep/main/a/b"
    assert LsmFileSystem._strip_protocol("lakefs://rep/main/x") == "rep/main/x"


def test_ls_info_cat_open_put_get_rm_cp(fs: LsmFileSystem, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    fs.pipe("lsm://rep/main/dir/big.bin", data)
    fs.pipe("rep/main/dir/sub/small.txt", b"small")
    fs.pipe("rep/main/top.txt", b"top")

    assert fs.ls("rep/main", detail=False) == ["rep/main/dir", "rep/main/top.txt"]
    listing = {e["name"]: e for e in fs.ls("lsm://rep/main/dir")}
    assert listing["rep/main/dir/big.bin"]["size"] == len(data)
    assert listing["rep/main/dir/big.bin"]["type"] == "file"
    assert listing["rep/main/dir/sub"]["type"] == "directory"
    assert fs.ls("rep", detail=False) == ["rep/main"]
    assert fs.info("rep/main/dir")["type"] == "directory"
    assert fs.info("rep/main/top.txt")["size"] == 3
    assert fs.isfile("rep/main/top.txt") and fs.isdir("rep/main/dir/sub")
    assert not fs.exists("rep/main/nope")
    assert sorted(fs.find("rep/main/dir")) == ["rep/main/dir/big.bin", "rep/main/dir/sub/small.txt"]
    with pytest.raises(FileNotFoundError):
        fs.info("rep/main/nope")
    with pytest.raises(lsmstore.RepositoryNotFoundError, match="looked in"):
        fs.ls("nosuchrepo/main")  # a wrong name or store, not a missing file
    assert not fs.exists("nosuchrepo/main/x")

    assert fs.cat_file("rep/main/dir/big.bin", start=1000, end=1010) == data[1000:1010]
    assert fs.cat_file("rep/main/dir/big.bin", start=-5) == data[-5:]
    with fs.open("rep/main/dir/big.bin", "rb", block_size=64 << 10) as f:
        f.seek(500_000)
        assert f.read(100) == data[500_000:500_100]
        assert f.tell() == 500_100
        f.seek(-10, 2)
        assert f.read() == data[-10:]

    with fs.open("rep/main/written.bin", "wb", block_size=5 << 20) as f:
        for _ in range(3):
            f.write(data)
    assert fs.cat("rep/main/written.bin") == data * 3
    with pytest.raises(FileExistsError):
        with fs.open("rep/main/top.txt", "xb") as f:
            f.write(b"again")

    local = tmp_path / "local.txt"
    local.write_bytes(b"from disk")
    fs.put(str(local), "rep/main/up/local.txt")
    fs.get("rep/main/up/local.txt", str(tmp_path / "back.txt"))
    assert (tmp_path / "back.txt").read_bytes() == b"from disk"

    fs.cp("rep/main/top.txt", "rep/main/copy.txt")
    assert fs.cat("rep/main/copy.txt") == b"top"
    fs.rm("rep/main/copy.txt")
    assert not fs.exists("rep/main/copy.txt")
    fs.rm("rep/main/dir", recursive=True)
    assert not fs.exists("rep/main/dir/big.bin") and not fs.exists("rep/main/dir/sub/small.txt")


def test_pandas_parquet_round_trip(fs: LsmFileSystem, options: dict[str, Any]) -> None:
    df = pd.DataFrame({"id": range(1000), "name": [f"n{i}" for i in range(1000)]})
    opts = options
    df.to_parquet("lsm://rep/main/t.parquet", storage_options=opts)
    back = pd.read_parquet("lsm://rep/main/t.parquet", storage_options=opts)
    pd.testing.assert_frame_equal(back, df)

    async def commit() -> None:
        store = await fs._get_store()
        repo = await store.get_repository("rep")
        await repo.branch("main").commit("table t")
        await repo.create_branch("dev", source="main")

    run(fs, commit)
    df2 = df.assign(name=df["name"] + "!")
    df2.to_parquet("lsm://rep/dev/t.parquet", storage_options=opts)
    pd.testing.assert_frame_equal(
        pd.read_parquet("lsm://rep/dev/t.parquet", storage_options=opts), df2
    )
    pd.testing.assert_frame_equal(
        pd.read_parquet("lsm://rep/main/t.parquet", storage_options=opts), df
    )


def test_transaction_commits_and_merges_or_discards(fs: LsmFileSystem) -> None:
    with fs.transaction("rep", "main", message="load") as tx:
        assert tx.branch.startswith("tx-")
        fs.pipe(f"rep/{tx.branch}/a.csv", b"a")
        fs.pipe(tx.uri("b.csv"), b"b")
        assert not fs.exists("rep/main/a.csv")  # not on main until the block succeeds
    assert fs.cat("rep/main/a.csv") == b"a" and fs.cat("rep/main/b.csv") == b"b"
    assert fs.ls("rep", detail=False) == ["rep/main"]  # the temporary branch is gone

    async def log() -> list[str]:
        store = await fs._get_store()
        repo = await store.get_repository("rep")
        return [e.message async for e in repo.log("main", first_parent=False)]

    assert "load" in run(fs, log)

    with pytest.raises(RuntimeError, match="boom"):
        with fs.transaction("rep", "main") as tx:
            fs.pipe(tx.uri("c.csv"), b"c")
            raise RuntimeError("boom")
    assert not fs.exists("rep/main/c.csv")
    assert fs.ls("rep", detail=False) == ["rep/main"]

    with pytest.raises(lsmstore.InvalidInputError):
        with fs.transaction:
            pass


def test_what_engines_ask_about_files(fs: LsmFileSystem) -> None:
    fs.pipe("rep/main/m/a.txt", b"first")
    info = fs.info("rep/main/m/a.txt")
    assert fs.modified("lsm://rep/main/m/a.txt") == info["LastModified"]
    assert fs.created("rep/main/m/a.txt") == fs.modified("rep/main/m/a.txt")
    assert info["ETag"] == info["checksum"] and info["created"] == info["mtime"]
    key, number = fs.ukey("rep/main/m/a.txt"), fs.checksum("rep/main/m/a.txt")
    fs.pipe("rep/main/m/a.txt", b"second")
    fs.invalidate_cache()
    assert fs.ukey("rep/main/m/a.txt") != key and fs.checksum("rep/main/m/a.txt") != number
    with pytest.raises(IsADirectoryError):
        fs.modified("rep/main/m")
    with pytest.raises(FileNotFoundError):
        fs.modified("rep/main/m/missing.txt")


def test_duckdb_reads_and_writes(fs: LsmFileSystem) -> None:
    import duckdb

    con = duckdb.connect()
    con.register_filesystem(fs)
    con.sql("COPY (SELECT range AS n, 'row ' || range AS s FROM range(1000)) "
            "TO 'lsm://rep/main/duck/t.parquet' (FORMAT parquet)")  # fmt: skip
    con.sql("COPY (SELECT 7 AS n) TO 'lsm://rep/main/duck/u.csv' (FORMAT csv)")
    got = con.sql("SELECT count(*), sum(n) FROM read_parquet('lsm://rep/main/duck/t.parquet')")
    assert got.fetchall() == [(1000, sum(range(1000)))]
    assert con.sql("SELECT n FROM read_csv('lsm://rep/main/duck/u.csv')").fetchall() == [(7,)]
    globbed = con.sql("SELECT count(*) FROM read_parquet('lsm://rep/main/duck/*.parquet')")
    assert globbed.fetchall() == [(1000,)]
    con.unregister_filesystem("lsm")
    con.close()


def test_polars_reads_and_writes(fs: LsmFileSystem) -> None:
    import polars as pl

    df = pl.DataFrame({"n": list(range(500)), "s": [f"row {i}" for i in range(500)]})
    with fs.open("lsm://rep/main/pl/t.parquet", "wb") as f:
        df.write_parquet(f)
    with fs.open("rep/main/pl/t.csv", "wb") as f:
        df.write_csv(f)
    with fs.open("lsm://rep/main/pl/t.parquet", "rb") as f:
        assert pl.read_parquet(f).equals(df)
    with fs.open("rep/main/pl/t.csv", "rb") as f:
        assert pl.read_csv(f).equals(df)


def test_pyarrow_reads_and_writes(fs: LsmFileSystem) -> None:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    handler = pafs.PyFileSystem(pafs.FSSpecHandler(fs))
    table = pa.table({"n": list(range(300)), "part": [i % 3 for i in range(300)]})
    pq.write_table(table, "rep/main/pa/t.parquet", filesystem=handler)
    assert pq.read_table("rep/main/pa/t.parquet", filesystem=handler).equals(table)
    ds.write_dataset(table, "rep/main/pa/ds", format="parquet", filesystem=handler,
                     partitioning=["part"], partitioning_flavor="hive")  # fmt: skip
    back = ds.dataset("rep/main/pa/ds", filesystem=handler, format="parquet",
                      partitioning="hive").to_table()  # fmt: skip
    assert back.num_rows == 300 and sorted(back.column("n").to_pylist()) == list(range(300))
    info = handler.get_file_info("rep/main/pa/t.parquet")
    assert info.size == fs.info("rep/main/pa/t.parquet")["size"] and info.mtime is not None


def test_missing_repository_names_the_store(fs: LsmFileSystem, options: dict[str, Any]) -> None:
    with pytest.raises(lsmstore.RepositoryNotFoundError) as caught:
        pd.read_parquet("lsm://absent/main/t.parquet", storage_options=options)
    where = f"server {options['server']}" if "server" in options else "the embedded store at"
    assert "repository not found" in str(caught.value) and where in str(caught.value)
