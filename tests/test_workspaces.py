"""Workspaces on the embedded store, on Redis and through a server, and through the
command: races with writers and the compactor lose no acknowledged write, and the
command's exit codes.  (The calls themselves -- stash, pop, list, drop, their typed
errors -- are in the contract suite, tests/test_client_api.py, on every transport;
file-level behaviour -- reads of popped files, compaction, GC of dropped workspaces --
is tests/test_workspace_files.py.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import lsmstore
from lsmstore.cli.exitcodes import ExitCode
from lsmstore.compaction.job import CompactionJob
from lsmstore.errors import NothingToCommitError
from lsmstore.testing.compaction import make_config
from lsmstore.testing.server_process import ServerProcess
from tests.helpers.cli import Cli
from tests.helpers.remote import lsm_server  # noqa: F401 - the fixture


async def write_until(stop: asyncio.Event, branch: Any, t: int, acked: dict[str, bytes]) -> None:
    """Writer ``t``: puts new keys until ``stop``, recording each acknowledged one."""
    i = 0
    while not stop.is_set():
        key = f"w{t}/{i:05d}"
        await branch.put(key, key.encode())
        acked[key] = key.encode()
        i += 1
        await asyncio.sleep(0)


@pytest.fixture(params=["embedded", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    url = None
    if request.param == "redis":
        url = f"{request.getfixturevalue('redis_server_url')}?prefix=w{uuid.uuid4().hex[:8]}:"
    async with lsmstore.connect(
        url, home=str(tmp_path / "home"), batch_interval_ms=1, compaction_in_process="off"
    ) as s:
        yield s


async def test_stash_races_writers_and_compaction(store: Any, tmp_path: Path) -> None:
    """Writers and compaction jobs run while the branch is stashed and popped back
    again and again: every acknowledged write ends up readable, none twice-lost."""
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("race", storage_namespace=ns)
    main = repo.branch("main")
    await main.put("seed", b"s")
    acked: dict[str, bytes] = {"seed": b"s"}
    stop = asyncio.Event()

    async def compactor() -> None:
        cfg = make_config(compaction_l1_files=1)
        while not stop.is_set():
            job = CompactionJob(store.refstore, repo.objects, "race", "main", cfg)
            await job.run()
            await asyncio.sleep(0.001)

    tasks = [asyncio.create_task(write_until(stop, main, t, acked)) for t in range(4)]
    tasks.append(asyncio.create_task(compactor()))
    for n in range(8):
        await asyncio.sleep(0.02)
        try:
            await main.stash(f"s{n}")
        except NothingToCommitError:
            continue
        await main.pop(f"s{n}")
    stop.set()
    await asyncio.gather(*tasks)
    await main.flush()
    for key, value in acked.items():
        assert await main.get(key) == value, key
    assert await repo.workspaces() == []


async def test_stash_over_http_races_remote_writers(
    lsm_server: ServerProcess,  # noqa: F811
) -> None:
    """Remote writers keep writing while another client stashes and pops the branch
    through the server (its own compactor running): the server's exclusive branch lock
    and the RefStore step lose no acknowledged write."""
    key_id, secret = lsm_server.admin
    async with (
        lsmstore.connect(lsm_server.url, access_key_id=key_id, secret_access_key=secret) as writers,
        lsmstore.connect(lsm_server.url, access_key_id=key_id, secret_access_key=secret) as mover,
    ):
        repo = await writers.create_repository("wrace", storage_namespace="local://wrace")
        main = repo.branch("main")
        acked: dict[str, bytes] = {}
        stop = asyncio.Event()

        tasks = [asyncio.create_task(write_until(stop, main, t, acked)) for t in range(4)]
        moving = (await mover.get_repository("wrace")).branch("main")
        moved = 0
        while moved < 6:
            try:
                await moving.stash(f"s{moved}")
            except NothingToCommitError:  # no write landed since the last pop yet
                await asyncio.sleep(0.01)
                continue
            await moving.pop(f"s{moved}")
            moved += 1
        stop.set()
        await asyncio.gather(*tasks)
        assert len(acked) > 0
        for key, value in acked.items():
            assert await main.get(key) == value, key
        assert await repo.workspaces() == []


def test_cli_stash_list_show_pop_drop(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    cli("repo", "create", "lsm://wssx", check=True)
    (tmp_path / "f.txt").write_text("hello")
    cli("fs", "upload", str(tmp_path / "f.txt"), "lsm://wssx/main/f.txt", check=True)
    saved = cli.json("stash", "save", "lsm://wssx/main", "wip")
    assert saved["name"] == "wip" and saved["branch"] == "main" and saved["l1_files"] >= 1
    assert cli.json("diff", "lsm://wssx/main") == []
    listed = cli.json("stash", "list", "lsm://wssx")
    assert [w["name"] for w in listed] == ["wip"]
    assert cli("stash", "list", "lsm://wssx", check=True).stdout.splitlines()[1].startswith("wip ")
    assert cli.json("stash", "show", "lsm://wssx", "wip")["branch"] == "main"

    again = cli("stash", "save", "lsm://wssx/main", "wip")
    assert again.returncode == ExitCode.NOTHING_TO_COMMIT  # nothing staged now
    cli("fs", "upload", str(tmp_path / "f.txt"), "lsm://wssx/main/g.txt", check=True)
    taken = cli("stash", "save", "lsm://wssx/main", "wip")
    assert taken.returncode == ExitCode.EXISTS and "wip" in taken.stderr
    assert "Traceback" not in taken.stderr

    cli("branch", "create", "lsm://wssx/dev", "-s", "lsm://wssx/main", check=True)
    cli("pop", "lsm://wssx/dev", "wip", check=True)
    assert [c["path"] for c in cli.json("diff", "lsm://wssx/dev")] == ["f.txt"]
    missing = cli("pop", "lsm://wssx/dev", "wip")
    assert missing.returncode == ExitCode.NOT_FOUND

    cli("stash", "save", "lsm://wssx/main", "g", check=True)
    assert cli("stash", "drop", "lsm://wssx", "g").returncode == ExitCode.USAGE  # no --yes
    cli("stash", "drop", "lsm://wssx", "g", "-y", check=True)
    assert cli.json("stash", "list", "lsm://wssx") == []
