"""lakefs-spec 0.15.1 (fsspec) and pandas through it, against a real server process."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pytest
from helpers.server import make_repo, unique
from lakefs_spec import LakeFSFileSystem

from lsmstore.testing.server_process import ServerProcess


@pytest.fixture(scope="module")
def fs(server: ServerProcess) -> LakeFSFileSystem:
    key, secret = server.admin
    return LakeFSFileSystem(host=server.url, username=key, password=secret)


@pytest.fixture
def repo(admin: object) -> str:
    return make_repo(admin, unique("spec"))  # type: ignore[arg-type]


def test_put_ls_info_open_rm(
    fs: LakeFSFileSystem, server: ServerProcess, repo: str, tmp_path: Path
) -> None:
    local = tmp_path / "in.txt"
    local.write_bytes(b"from a local file")
    fs.put_file(str(local), f"{repo}/main/dir/in.txt")
    info = fs.info(f"{repo}/main/dir/in.txt")
    assert info["size"] == len(b"from a local file") and info["type"] == "file"
    assert info["checksum"] == hashlib.md5(b"from a local file").hexdigest()
    with fs.open(f"{repo}/main/dir/w.txt", "wb") as f:
        f.write(b"written")
    with fs.open(f"{repo}/main/dir/w.txt", "rb") as f:
        assert f.read() == b"written"
    assert sorted(fs.ls(f"{repo}/main/dir", detail=False)) == [
        f"{repo}/main/dir/in.txt",
        f"{repo}/main/dir/w.txt",
    ]
    assert fs.info(f"{repo}/main/dir")["type"] == "directory"
    assert fs.exists(f"{repo}/main/dir/in.txt") and not fs.exists(f"{repo}/main/nope")
    assert fs.cat_file(f"{repo}/main/dir/in.txt", start=5, end=10) == b"a loc"
    out = tmp_path / "out.txt"
    fs.get_file(f"{repo}/main/dir/in.txt", str(out))
    assert out.read_bytes() == b"from a local file"
    fs.rm(f"{repo}/main/dir", recursive=True)
    assert not fs.exists(f"{repo}/main/dir/in.txt")
    # A fresh instance: this one's caches still know the files it wrote.
    key, secret = server.admin
    fresh = LakeFSFileSystem(
        host=server.url, username=key, password=secret, skip_instance_cache=True
    )
    with pytest.raises(FileNotFoundError):
        fresh.info(f"{repo}/main/dir/w.txt")


def test_writes_create_the_branch(fs: LakeFSFileSystem, repo: str) -> None:
    fs.pipe(f"{repo}/feature/x.txt", b"on a new branch")
    assert fs.cat(f"{repo}/feature/x.txt") == b"on a new branch"
    fs.touch(f"{repo}/feature/empty")
    assert fs.info(f"{repo}/feature/empty")["size"] == 0


def test_transaction_commits_and_merges(fs: LakeFSFileSystem, repo: str) -> None:
    with fs.transaction(repo, "main") as tx:
        fs.pipe(f"{repo}/{tx.branch.id}/t.txt", b"in a transaction")
        tx.commit(message="tx commit")
    assert fs.cat(f"{repo}/main/t.txt") == b"in a transaction"


def test_pandas_parquet_round_trip(fs: LakeFSFileSystem, server: ServerProcess, repo: str) -> None:
    key, secret = server.admin
    opts = {"host": server.url, "username": key, "password": secret}
    df = pd.DataFrame({"id": range(1000), "name": [f"n{i}" for i in range(1000)]})
    df.to_parquet(f"lakefs://{repo}/main/t.parquet", storage_options=opts)
    back = pd.read_parquet(f"lakefs://{repo}/main/t.parquet", storage_options=opts)
    pd.testing.assert_frame_equal(df, back)
