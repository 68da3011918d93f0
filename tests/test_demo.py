"""The README's first command runs `python -m lsmstore demo`: keep it working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_demo_writes_reads_commits_and_merges(tmp_path: Path) -> None:
    env = {**os.environ, "LSMSTORE_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lsmstore",
            "demo",
            "--puts",
            "2000",
            "--tasks",
            "100",
            "--batch",
            "500",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    lines = {line.split(":", 1)[0].strip(): line for line in out.stdout.splitlines()}
    for step in ("put", "put_many", "get", "list", "delete", "commit"):
        assert step in lines, out.stdout
    assert "exists() False" in lines["delete"]
    assert "merged into main" in lines["commit"]


def test_demo_rejects_bad_arguments() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lsmstore", "demo", "--tasks", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--tasks" in out.stderr
