"""Commits through the client while writers write, compaction runs in the background and
another client commits the same branch: no acknowledged write is lost or committed
twice, writes after a commit's snapshot stay staged, and the final state is complete."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import lsmstore
from lsmstore.errors import ConflictError, NothingToCommitError


def settings(tmp_path: Path) -> dict[str, Any]:
    return {
        "home": str(tmp_path / "home"),
        "batch_interval_ms": 1,
        "compaction_in_process": "on",
        "compaction_l1_files": 2,
        "compaction_interval_s": 0.01,
        "commit_range_min_bytes": 200,
        "commit_range_max_bytes": 2000,
        "commit_range_raggedness": 8,
        "commit_backoff_ms": 1,
        "commit_backoff_max_ms": 5,
        "commit_max_attempts": 50,
    }


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[lsmstore.Store, lsmstore.Store]]:
    """Two clients of one embedded RefStore (as two processes would be)."""
    async with (
        lsmstore.connect(**settings(tmp_path)) as one,
        lsmstore.connect(**settings(tmp_path)) as two,
    ):
        yield one, two


async def writer(branch: lsmstore.Branch, name: str, n: int, acked: dict[str, bytes]) -> None:
    for i in range(n):
        key, value = f"w/{name}/{i:04d}", f"{name}-{i}".encode()
        await branch.put(key, value)
        acked[key] = value  # acknowledged: the put returned
        if i % 7 == 3:  # an overwrite, acknowledged later than the first write
            value = value + b"-again"
            await branch.put(key, value)
            acked[key] = value


async def committer(branch: lsmstore.Branch, done: asyncio.Event, outcomes: list[str]) -> None:
    while not done.is_set():
        try:
            await branch.commit("periodic")
            outcomes.append("committed")
        except NothingToCommitError:
            outcomes.append("nothing")
        except ConflictError:
            outcomes.append("conflict")
        await asyncio.sleep(0)


async def committed_tree(repo: lsmstore.Repository, ref: str) -> dict[str, bytes]:
    view = repo.ref(ref)
    return {e.path: await view.get(e.path) async for e in view.list()}


async def test_commits_during_writes_compaction_and_another_committer(
    stores: tuple[lsmstore.Store, lsmstore.Store], tmp_path: Path
) -> None:
    one, two = stores
    repo1 = await one.create_repository("rep", storage_namespace=(tmp_path / "ns").as_uri())
    repo2 = await two.get_repository("rep")
    main1, main2 = repo1.branch("main"), repo2.branch("main")
    acked: dict[str, bytes] = {}
    done = asyncio.Event()
    outcomes1: list[str] = []
    outcomes2: list[str] = []
    commits = [
        asyncio.create_task(committer(main1, done, outcomes1)),
        asyncio.create_task(committer(main2, done, outcomes2)),
    ]
    await asyncio.gather(*(writer(main1, f"t{t}", 60, acked) for t in range(4)))
    await main1.put("last", b"1")
    acked["last"] = b"1"
    done.set()
    await asyncio.gather(*commits)
    try:
        await main1.commit("final")
    except NothingToCommitError:
        pass

    assert outcomes1.count("committed") + outcomes2.count("committed") >= 2
    head = await main1.head()
    assert head.l1 == () and head.l2 == ()  # everything acknowledged is committed ...
    assert await committed_tree(repo1, head.base) == acked  # ... with its latest value
    # Each write went into exactly one commit: along the history, every commit only
    # adds keys or changes them to a later acknowledged value, and no commit adds a key
    # a previous one added.
    history = [e async for e in repo1.log("main")]
    added: set[bytes] = set()
    for newer, older in itertools.pairwise(history):
        async for change in repo1.diff(older.id, newer.id):
            assert change.kind in ("added", "changed"), change
            if change.kind == "added":
                assert change.key not in added
                added.add(change.key)
    assert added == {k.encode() for k in acked}
