"""The README's shell session runs as written, line by line, through the real command
(on a temporary home, from a directory holding ./tables)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from tests.helpers.cli import Cli

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_cli_session(tmp_path: Path) -> None:
    section = README.read_text().split("### From a shell", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    lines = [ln.split("#")[0].strip() for ln in block.group(1).splitlines()]
    lines = [ln for ln in lines if ln]
    assert lines and all(ln.startswith("lsmstore ") for ln in lines)

    work = tmp_path / "work"
    (work / "tables").mkdir(parents=True)
    (work / "tables" / "users.csv").write_text("id,name\n1,ann\n")
    (work / "tables" / "orders.csv").write_text("id,user\n7,1\n")
    cli = Cli(tmp_path / "home")
    last = None
    for line in lines:
        args = [a.replace("./tables", str(work / "tables")) for a in shlex.split(line)[1:]]
        last = cli(*args)
        assert last.returncode == 0, f"{line}\n{last.stderr}"
    assert last is not None
    # the last line lists main~1 (before the merge): both tables
    assert [e["path"] for e in json.loads(last.stdout)] == [
        "tables/orders.csv",
        "tables/users.csv",
    ]
    graph = cli("log", "lsm://shop/main", "--graph", check=True).stdout
    assert "drop users" in graph and "|\\" in graph
