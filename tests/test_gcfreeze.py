"""The first write of a process freezes its startup state out of CPython's full
collections (``gc_freeze``), once; ``gc_freeze = "off"`` leaves the collector alone.
Each case runs in a fresh interpreter: the collector's state is per process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import asyncio, gc, json, sys
import lsmstore

async def main():
    out = {}
    async with lsmstore.connect(home=sys.argv[1], gc_freeze=sys.argv[2]) as store:
        repo = await store.create_repository("r", storage_namespace=sys.argv[3])
        out["before_write"] = gc.get_freeze_count()
        await repo.branch("main").put("k", b"v")
        out["after_write"] = gc.get_freeze_count()
        await (await repo.create_branch("other", source="main")).put("k", b"w")  # no refreeze
        out["after_second_writer"] = gc.get_freeze_count()
        out["read"] = (await repo.branch("main").get("k")).decode()
    print(json.dumps(out))

asyncio.run(main())
"""


def run(tmp_path: Path, setting: str) -> dict[str, object]:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(tmp_path / "home"),
            setting,
            (tmp_path / "data").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("setting", ["auto", "on"])
async def test_first_write_freezes_the_startup_state_once(tmp_path: Path, setting: str) -> None:
    out = await asyncio.to_thread(run, tmp_path, setting)
    assert out["before_write"] == 0
    frozen = out["after_write"]
    assert isinstance(frozen, int) and frozen > 1000  # modules, classes, functions
    assert out["after_second_writer"] == frozen
    assert out["read"] == "v"


async def test_off_leaves_the_collector_alone(tmp_path: Path) -> None:
    out = await asyncio.to_thread(run, tmp_path, "off")
    assert out["before_write"] == out["after_write"] == out["after_second_writer"] == 0
    assert out["read"] == "v"


def test_paused_turns_the_collector_off_and_back_to_what_it_was() -> None:
    import gc

    from lsmstore.gcfreeze import paused

    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused():
        raise RuntimeError("the collector comes back on an error too")
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the application's choice is kept
    finally:
        gc.enable()
