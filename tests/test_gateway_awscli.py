"""The AWS CLI (``aws s3 cp/ls/sync/rm``) against the S3 gateway of a real server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers.server import make_repo

from lsmstore.testing.server_process import ServerProcess

pytestmark = pytest.mark.timeout(300)

#: The CLI's default multipart threshold and part size (8 MiB): the big file is sent in
#: parts.
CONFIG = """[default]
region = us-east-1
s3 =
    addressing_style = path
"""


def aws(server: ServerProcess, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp / "aws-config"
    config.write_text(CONFIG)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp),
        "AWS_ACCESS_KEY_ID": server.admin[0],
        "AWS_SECRET_ACCESS_KEY": server.admin[1],
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "no-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    exe = shutil.which("aws", path=str(Path(sys.executable).parent))
    assert exe is not None, "the AWS CLI (awscli, dev extras) is not installed"
    out = subprocess.run(
        [exe, "--endpoint-url", server.url, *args],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out


def test_cp_ls_sync_rm(server: ServerProcess, admin: httpx.Client, tmp_path: Path) -> None:
    repo = make_repo(admin)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    files = {"a.txt": b"alpha", "sub/b.bin": os.urandom(300_000), "sub/c d.txt": b"spaced",
             "big.bin": os.urandom(20 * 1024 * 1024)}  # fmt: skip
    for name, data in files.items():
        (src / name).write_bytes(data)
    aws(server, tmp_path, "s3", "cp", str(src / "a.txt"), f"s3://{repo}/main/one/a.txt")
    top = aws(server, tmp_path, "s3", "ls", f"s3://{repo}/").stdout
    assert "PRE main/" in top
    listed = aws(server, tmp_path, "s3", "ls", f"s3://{repo}/main/one/").stdout
    assert "a.txt" in listed
    aws(server, tmp_path, "s3", "sync", str(src), f"s3://{repo}/main/tree/")
    rec = aws(server, tmp_path, "s3", "ls", "--recursive", f"s3://{repo}/main/tree/").stdout
    assert sorted(line.split(maxsplit=3)[3] for line in rec.splitlines()) == sorted(
        f"main/tree/{n}" for n in files
    )
    # A second sync finds nothing to copy (sizes and times agree).
    assert aws(server, tmp_path, "s3", "sync", str(src), f"s3://{repo}/main/tree/").stdout == ""
    back = tmp_path / "back"
    aws(server, tmp_path, "s3", "sync", f"s3://{repo}/main/tree/", str(back))
    for name, data in files.items():
        assert (back / name).read_bytes() == data
    aws(server, tmp_path, "s3", "cp", f"s3://{repo}/main/one/a.txt", str(tmp_path / "got"))
    assert (tmp_path / "got").read_bytes() == b"alpha"
    aws(server, tmp_path, "s3", "rm", "--recursive", f"s3://{repo}/main/tree/")
    rest = aws(server, tmp_path, "s3api", "list-objects-v2", "--bucket", repo, "--prefix",
               "main/tree/").stdout  # fmt: skip
    assert "Contents" not in json.loads(rest)
    assert aws(server, tmp_path, "s3", "ls", f"s3://{repo}/main/one/").stdout.strip()
