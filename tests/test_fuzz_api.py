"""Property-based fuzzing of every public entry point (tests/helpers/fuzz_api.py): the
client API (keys and values, objects, refs, commits and merges), the configuration,
storage-namespace and RefStore URLs, and SSTs built to be checksum-valid but malformed,
staged through ``Branch.stage_sst``.

Each family runs in a child process with a memory limit (an allocation a malformed
input could provoke fails there, as a MemoryError the property reports, instead of
exhausting the machine) and a hang guard (each call has its own bound inside; the
child as a whole is killed past :data:`CHILD_LIMIT_S`).  Inputs are derandomized: CI
runs the same ~1,400 of them every time.  Every input must be accepted and read back
exactly, or rejected with an LsmError; each family must see both outcomes, so that a
strategy producing only junk (or only valid input) cannot pass unnoticed.

Run more inputs locally with ``FUZZ_SCALE=10`` (and ``FUZZ_RANDOM=1`` for new ones).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Address-space limit of the child (its resident size is about 100 MiB).
MEMORY_LIMIT = 2 << 30
#: The child is killed after this long (a hang; its inputs normally take seconds).
CHILD_LIMIT_S = 600

TARGETS = [
    "put_get",
    "put_many",
    "reads",
    "refs",
    "commits",
    "config",
    "config_files",
    "urls",
    "objects",
    "stage_sst",
]
#: Families also run through the remote client against a real server process (the
#: same API over HTTP, raw records read raw as embedded).
REMOTE_TARGETS = ["put_get", "put_many", "reads", "refs", "commits", "stage_sst"]
REMOTE_SHARE = 0.1


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.mark.timeout(CHILD_LIMIT_S + 60)
@pytest.mark.parametrize(
    ("target", "remote"),
    [(t, False) for t in TARGETS] + [(t, True) for t in REMOTE_TARGETS],
    ids=[*TARGETS, *(f"remote-{t}" for t in REMOTE_TARGETS)],
)
def test_fuzz(target: str, remote: bool, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LSMSTORE_")}
    env["LSMSTORE_HOME"] = str(tmp_path)
    env["TMPDIR"] = str(tmp_path)
    if remote:  # a tenth of the inputs: each goes over HTTP to a server process
        env["FUZZ_SCALE"] = str(float(os.environ.get("FUZZ_SCALE", "1")) * REMOTE_SHARE)
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.helpers.fuzz_api",
                *(["--remote"] if remote else []),
                target,
            ],
            cwd=ROOT,
            env=env,
            preexec_fn=_limit_memory,
            capture_output=True,
            text=True,
            timeout=CHILD_LIMIT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"fuzz target {target} hung: {e.stderr!r}"[-4000:])
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-6000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    family = target.split("_files")[0]
    assert summary.get(f"{family}:accepted", 0) > 0, summary
    assert summary.get(f"{family}:rejected", 0) > 0, summary
