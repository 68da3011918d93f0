"""Ref reads made before a flight's RefStore call begins share that call; reads made
after it began never use its answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

from helpers.staging import BRANCH, REPO, embedded_refstore

from lsmstore.refstore.base import Ref
from lsmstore.staging.refcache import RefCache


class Counting:
    """A fetch function recording, per call, how many appends preceded its start."""

    def __init__(self, inner, appended: list[str]) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.appended = appended
        self.starts: list[int] = []
        self.release = asyncio.Event()

    async def __call__(self, repo: str, name: str) -> Ref:
        self.starts.append(len(self.appended))
        await self.release.wait()
        return await self.inner(repo, name)


async def test_reads_of_one_turn_share_one_call(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    fetch = Counting(rs.get_ref, [])
    fetch.release.set()
    cache = RefCache(rs, fetch)
    futs = [cache.get(REPO, BRANCH) for _ in range(100)]  # no await in between
    refs = await asyncio.gather(*futs)
    assert cache.fetches == 1
    assert all(r == refs[0] for r in refs)
    await cache.aclose()
    await rs.aclose()


async def test_a_read_sees_every_append_acknowledged_before_it(tmp_path: Path) -> None:
    rs = await embedded_refstore(tmp_path)
    appended: list[str] = []
    fetch = Counting(rs.get_ref, appended)
    cache = RefCache(rs, fetch)
    first = cache.get(REPO, BRANCH)
    await asyncio.sleep(0)  # the first call begins (and waits for release)
    assert fetch.starts == [0]
    await rs.append_l1(REPO, BRANCH, "f1")
    appended.append("f1")
    # begun after the append was acknowledged: must not be answered by the first call
    second = cache.get(REPO, BRANCH)
    third = cache.get(REPO, BRANCH)
    fetch.release.set()
    assert (await first).l1 in ((), ("f1",))
    assert (await second).l1 == ("f1",)
    assert (await third).l1 == ("f1",)
    assert fetch.starts == [0, 1]  # the second call began after the append
    assert cache.fetches == 2
    await cache.aclose()
    await rs.aclose()
