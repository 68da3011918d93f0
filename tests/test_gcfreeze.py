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

from lsmstore.gcfreeze import YOUNG_THRESHOLD

SCRIPT = r"""
import asyncio, gc, json, sys
import lsmstore

async def main():
    out = {}
    if len(sys.argv) > 4:  # the application's own young threshold
        gc.set_threshold(int(sys.argv[4]), *gc.get_threshold()[1:])
    async with lsmstore.connect(home=sys.argv[1], gc_freeze=sys.argv[2]) as store:
        repo = await store.create_repository("rep", storage_namespace=sys.argv[3])
        out["before_write"] = gc.get_freeze_count()
        out["young_before"] = gc.get_threshold()[0]
        await repo.branch("main").put("k", b"v")
        out["after_write"] = gc.get_freeze_count()
        out["young_after"] = gc.get_threshold()[0]
        await (await repo.create_branch("other", source="main")).put("k", b"w")  # no refreeze
        out["after_second_writer"] = gc.get_freeze_count()
        out["read"] = (await repo.branch("main").get("k")).decode()
    print(json.dumps(out))

asyncio.run(main())
"""


def run(tmp_path: Path, setting: str, *young: int) -> dict[str, object]:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(tmp_path / "home"),
            setting,
            (tmp_path / "data").as_uri(),
            *map(str, young),
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
    # CPython's default young threshold is raised, so the puts waiting on a batch die
    # by reference counting before a young collection walks them
    assert out["young_before"] in (700, 2000)
    assert out["young_after"] == YOUNG_THRESHOLD


async def test_off_leaves_the_collector_alone(tmp_path: Path) -> None:
    out = await asyncio.to_thread(run, tmp_path, "off")
    assert out["before_write"] == out["after_write"] == out["after_second_writer"] == 0
    assert out["young_after"] == out["young_before"]
    assert out["read"] == "v"


async def test_the_applications_own_young_threshold_is_kept(tmp_path: Path) -> None:
    out = await asyncio.to_thread(run, tmp_path, "on", 1234)
    assert isinstance(out["after_write"], int) and out["after_write"] > 1000  # frozen
    assert out["young_before"] == out["young_after"] == 1234


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
