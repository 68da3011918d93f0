"""Run the real ``lsmstore`` command in a subprocess, on a private embedded home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


class Cli:
    """``cli("repo", "list")`` runs ``python -m lsmstore repo list`` with ``home`` as
    ``$LSMSTORE_HOME``; ``cli.json(...)`` adds ``-o json`` and parses stdout."""

    def __init__(self, home: Path, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LSMSTORE_")},
            "LSMSTORE_HOME": str(home),
            "NO_COLOR": "1",
            **(env or {}),
        }

    def __call__(
        self, *args: str, input: bytes | None = None, check: bool = False, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(
            [sys.executable, "-m", "lsmstore", *args],
            env=self.env,
            input=input.decode() if input is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and p.returncode != 0:
            raise AssertionError(f"lsmstore {' '.join(args)} -> {p.returncode}\n{p.stderr}")
        return p

    def json(self, *args: str) -> Any:
        p = self("-o", "json", *args, check=True)
        return json.loads(p.stdout)

    def raw(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "lsmstore", *args],
            env=self.env,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
