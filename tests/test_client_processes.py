"""Two writer processes on one branch (embedded default, real subprocesses): each sees
the other's acknowledged writes, and a later acknowledged write wins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import lsmstore

CHILD = Path(__file__).parent / "helpers" / "child_writer.py"


class Child:
    def __init__(self, home: Path, repo: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(home), repo, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        assert self.proc.wait(30) == 0


async def test_two_writer_processes_on_one_branch(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with lsmstore.connect(home=str(home)) as store:
        await store.create_repository("shared", storage_namespace=(tmp_path / "ns").as_uri())
    a, b = Child(home, "shared"), Child(home, "shared")
    try:
        for i in range(5):
            assert a.ask(f"put a{i} from-a-{i}") == "ok"
            assert b.ask(f"put b{i} from-b-{i}") == "ok"
            # each sees the other's acknowledged writes at once
            assert b.ask(f"get a{i}") == f"value from-a-{i}"
            assert a.ask(f"get b{i}") == f"value from-b-{i}"
            # a write acknowledged later wins, whichever process made it
            first, second = (a, b) if i % 2 else (b, a)
            assert first.ask(f"put shared v{i}-first") == "ok"
            assert second.ask(f"put shared v{i}-second") == "ok"
            assert a.ask("get shared") == b.ask("get shared") == f"value v{i}-second"
    finally:
        a.close()
        b.close()
    async with lsmstore.connect(home=str(home)) as store:
        main = (await store.get_repository("shared")).branch()
        assert await main.get("shared") == b"v4-second"
        assert len([e async for e in main.list()]) == 11
