"""The README's session block runs as written (against a temporary home directory)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_starts_with_the_two_commands() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README.read_text(), re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["./dev.sh run", "./dev.sh test"]
    ci = (README.parent / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == "./dev.sh test"


def test_readme_session_runs(tmp_path: Path) -> None:
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    code = block.group(1).replace("file:///tmp/lsm-demo", (tmp_path / "ns").as_uri())
    env = {**os.environ, "LSMSTORE_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "added tables/users/part-1.parquet" in lines
    assert "removed tables/users/part-0.parquet" in lines
    assert lines[2] == "['tables/events/part-0.parquet', 'tables/users/part-1.parquet']"
    assert lines[-1] == "True"  # main~1 (before the merge) still has the removed file
