"""kill -9 a writer process with writes in flight: every write it acknowledged is
readable afterwards with its value (local files + embedded RefStore)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import lsmstore

CHILD = Path(__file__).parent / "helpers" / "child_writer.py"


def flood_and_kill(home: Path, acks: int) -> dict[str, str]:
    """Run a flooding writer, SIGKILL it after ``acks`` acknowledgements; every
    acknowledgement it printed (including ones read after the kill)."""
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(home), "crash", "flood", "200000"],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked: dict[str, str] = {}
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            _, key, value = line.split()
            acked[key] = value
            if len(acked) >= acks:  # well into the flood, with batches in flight
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # lines printed before the kill but not yet read are acknowledged too
    for line in proc.stdout:
        if line.endswith("\n"):
            _, key, value = line.split()
            acked[key] = value
    assert proc.returncode == -signal.SIGKILL
    return acked


async def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with lsmstore.connect(home=str(home)) as store:
        await store.create_repository("crash", storage_namespace=(tmp_path / "ns").as_uri())
    acked = await asyncio.to_thread(flood_and_kill, home, 3000)
    assert len(acked) >= 3000
    async with lsmstore.connect(home=str(home)) as store:
        main = (await store.get_repository("crash")).branch()
        for key, value in acked.items():
            assert await main.get(key) == value.encode(), key
        listed = {e.path async for e in main.list(prefix="flood/")}
        assert set(acked) <= listed  # and possibly unacknowledged writes that landed
