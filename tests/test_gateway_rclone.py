"""rclone (Debian's, installed by dev.sh) against the S3 gateway: copy, sync, check."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from helpers.server import make_repo

from lsmstore.testing.server_process import ServerProcess

pytestmark = pytest.mark.timeout(300)


def rclone(server: ServerProcess, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("rclone")
    assert exe is not None, "rclone is not installed (dev.sh ensure_debs installs it)"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp),
        "RCLONE_CONFIG": str(tmp / "rclone.conf"),
        "RCLONE_CONFIG_GW_TYPE": "s3",
        "RCLONE_CONFIG_GW_PROVIDER": "Other",
        "RCLONE_CONFIG_GW_ACCESS_KEY_ID": server.admin[0],
        "RCLONE_CONFIG_GW_SECRET_ACCESS_KEY": server.admin[1],
        "RCLONE_CONFIG_GW_ENDPOINT": server.url,
        "RCLONE_CONFIG_GW_REGION": "us-east-1",
        "RCLONE_CONFIG_GW_FORCE_PATH_STYLE": "true",
        # Buckets are repositories: rclone must not try to create one.
        "RCLONE_S3_NO_CHECK_BUCKET": "true",
    }
    out = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    return out


def test_copy_sync_check(server: ServerProcess, admin: httpx.Client, tmp_path: Path) -> None:
    repo = make_repo(admin)
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "one.txt").write_bytes(b"one")
    (src / "d" / "two.bin").write_bytes(os.urandom(100_000))
    rclone(server, tmp_path, "copy", str(src), f"gw:{repo}/main/r")
    rclone(server, tmp_path, "check", str(src), f"gw:{repo}/main/r")
    (src / "three.txt").write_bytes(b"three")
    (src / "one.txt").unlink()
    rclone(server, tmp_path, "sync", str(src), f"gw:{repo}/main/r")
    rclone(server, tmp_path, "check", str(src), f"gw:{repo}/main/r")
    listed = rclone(server, tmp_path, "lsf", "-R", f"gw:{repo}/main/r").stdout.split()
    assert sorted(listed) == ["d/", "d/two.bin", "three.txt"]
    back = tmp_path / "back"
    rclone(server, tmp_path, "copy", f"gw:{repo}/main/r", str(back))
    assert (back / "d" / "two.bin").read_bytes() == (src / "d" / "two.bin").read_bytes()
    (src / "three.txt").write_bytes(b"changed")
    with pytest.raises(AssertionError):  # check notices a difference
        rclone(server, tmp_path, "check", str(src), f"gw:{repo}/main/r")
