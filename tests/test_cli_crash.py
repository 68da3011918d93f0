"""Kill -9 in the middle of the command's multi-step operations (docs/cli.md): an
import killed part-way leaves only whole, readable objects staged and no commit, and
running it again finishes the job as one commit; a download killed part-way leaves no
file under the real name."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.cli import Cli


def _spawn(cli: Cli, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "lsmstore", *args],
        env=cli.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_for(check: object, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_import_killed_midway_then_rerun(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    cli("repo", "create", "lsm://crash", check=True)
    src = tmp_path / "src"
    src.mkdir()
    contents = {f"f{i:03d}.bin": os.urandom(2048) + bytes([i % 256]) for i in range(300)}
    for name, data in contents.items():
        (src / name).write_bytes(data)

    proc = _spawn(cli, "import", str(src), "lsm://crash/main/in/", "-p", "1")

    def some_staged() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"import ended before the kill: {proc.stderr.read()!r}")  # type: ignore[union-attr]
        out = cli("-o", "json", "branch", "show", "lsm://crash/main")
        return out.returncode == 0 and '"staged_l1_files": []' not in out.stdout

    _wait_for(some_staged)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    log = cli.json("log", "lsm://crash/main")
    assert [e["message"] for e in log] == ["Repository created"]  # no commit
    staged = cli.json("fs", "ls", "-r", "lsm://crash/main/in/")
    assert 0 < len(staged) < len(contents)
    for s in staged:
        name = s["path"].removeprefix("in/")
        assert s["size_bytes"] == len(contents[name])
        assert cli.raw("fs", "cat", f"lsm://crash/main/{s['path']}").stdout == contents[name]

    refused = cli("import", str(src), "lsm://crash/main/in/")
    assert refused.returncode != 0 and "uncommitted" in refused.stderr
    done = cli.json("import", str(src), "lsm://crash/main/in/", "--allow-dirty")
    assert done["objects"] == len(contents)
    assert [e["message"] for e in cli.json("log", "lsm://crash/main")][1:] == ["Repository created"]
    assert len(cli.json("fs", "ls", "-r", "lsm://crash/main/in/")) == len(contents)
    assert cli.json("diff", "lsm://crash/main") == []


def test_download_killed_midway_leaves_no_partial_file(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    cli("repo", "create", "lsm://dllx", check=True)
    big = tmp_path / "big.bin"
    with big.open("wb") as f:
        for _ in range(24):
            f.write(os.urandom(8 << 20))
    cli("fs", "upload", str(big), "lsm://dllx/main/big.bin", check=True)
    target = tmp_path / "out" / "big.bin"
    proc = _spawn(cli, "fs", "download", "lsm://dllx/main/big.bin", str(target))
    part = target.with_name(".big.bin.lsmstore-part")
    _wait_for(lambda: (part.exists() and part.stat().st_size > 0) or proc.poll() is not None)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not target.exists()  # only the temporary name, never a truncated file
    else:  # finished before we could kill it: the file is whole
        assert target.read_bytes() == big.read_bytes()
    cli("fs", "download", "lsm://dllx/main/big.bin", str(target), check=True)
    assert target.read_bytes() == big.read_bytes()
