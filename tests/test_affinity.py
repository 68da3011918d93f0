"""Branch affinity: rendezvous ownership over the RefStore's live members."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lsmstore.affinity import Membership, branch_key, rendezvous_owner
from lsmstore.errors import InvalidInputError
from lsmstore.refstore.base import Member
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.testing.refstore_contract import FakeClock

KEYS = [branch_key(f"repo{i % 7}", f"branch-{i}") for i in range(3000)]


def members(*names: str) -> list[Member]:
    return [Member(n, f"http://127.0.0.1:{8000 + i}", 0.0) for i, n in enumerate(names)]


def owners(ms: list[Member]) -> dict[str, str]:
    out = {}
    for k in KEYS:
        owner = rendezvous_owner(ms, k)
        assert owner is not None
        out[k] = owner.name
    return out


def test_rendezvous_is_deterministic_and_order_free() -> None:
    ms = members("a", "b", "c")
    assert owners(ms) == owners(list(reversed(ms)))
    assert rendezvous_owner([], "r/main") is None


def test_rendezvous_spreads_and_moves_only_the_leavers_branches() -> None:
    before = owners(members("a", "b", "c"))
    counts = Counter(before.values())
    assert set(counts) == {"a", "b", "c"}
    assert all(800 < n < 1200 for n in counts.values()), counts
    after = owners(members("a", "c"))
    moved = {k for k in KEYS if before[k] != after[k]}
    assert moved == {k for k in KEYS if before[k] == "b"}  # nothing else moves
    assert Counter(after[k] for k in moved).keys() == {"a", "c"}  # spread over the rest
    joined = owners(members("a", "b", "c", "d"))
    assert {k for k in KEYS if joined[k] != before[k]} == {k for k in KEYS if joined[k] == "d"}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedRefStore, FakeClock]]:
    clock = FakeClock()
    s = EmbeddedRefStore(tmp_path / "refs", clock=clock)
    yield s, clock
    await s.aclose()


async def test_members_agree_and_ownership_moves_when_one_stops(
    store: tuple[EmbeddedRefStore, FakeClock],
) -> None:
    refstore, clock = store
    local = FakeClock()
    group = [
        Membership(refstore, name=n, address=f"http://127.0.0.1:{p}", clock=local)
        for n, p in (("d1", 8001), ("d2", 8002), ("d3", 8003))
    ]
    for m in group:
        await m.beat()
    for m in group:
        await m.beat()  # every one now sees all three
    assert all({x.name for x in m.members} == {"d1", "d2", "d3"} for m in group)
    branches = [("repo", f"b{i}") for i in range(60)]
    view = {b: group[0].owner(*b).name for b in branches}
    assert all(m.owner(*b).name == view[b] for m in group for b in branches)
    assert all(sum(m.owns(*b) for m in group) == 1 for b in branches)
    assert set(view.values()) == {"d1", "d2", "d3"}

    # d3 is killed: it stops renewing; past its lifetime the others drop it
    clock.now += 6
    local.now += 6
    for m in group[:2]:
        await m.beat()
    assert {x.name for x in group[0].members} == {"d1", "d2", "d3"}  # not expired yet
    clock.now += 5
    local.now += 5
    for m in group[:2]:
        await m.beat()
    for m in group[:2]:
        assert {x.name for x in m.members} == {"d1", "d2"}
    for b in branches:
        new = group[0].owner(*b).name
        assert new == group[1].owner(*b).name
        assert new == view[b] or view[b] == "d3"
        assert new != "d3"

    # d2 shuts down: it withdraws at once
    await group[1].aclose()
    await group[0].beat()
    assert [x.name for x in group[0].members] == ["d1"]
    assert all(group[0].owns(*b) for b in branches)


async def test_a_member_without_answers_counts_itself_alone(
    store: tuple[EmbeddedRefStore, FakeClock],
) -> None:
    refstore, _ = store
    local = FakeClock()
    a = Membership(refstore, name="a", address="http://127.0.0.1:1", ttl_s=10, clock=local)
    b = Membership(refstore, name="b", address="http://127.0.0.1:2", ttl_s=10)
    await b.beat()
    await a.beat()
    assert {m.name for m in a.members} == {"a", "b"}
    assert a.members == tuple(a.members)
    local.now += 11  # no heartbeat answered for longer than the lifetime
    assert [m.name for m in a.members] == ["a"]
    assert a.owns("repo", "main")
    await b.aclose()
    await a.aclose()
    assert await refstore.list_members() == []


async def test_start_announces_and_close_withdraws(
    store: tuple[EmbeddedRefStore, FakeClock],
) -> None:
    refstore, _ = store
    m = Membership(refstore, name="a", address="http://127.0.0.1:1", heartbeat_s=0.01, ttl_s=5)
    await m.start()
    assert [x.name for x in await refstore.list_members()] == ["a"]
    await m.aclose()
    assert await refstore.list_members() == []


def test_bad_settings() -> None:
    for hb, ttl in ((0, 10), (10, 10), (-1, 5)):
        with pytest.raises(InvalidInputError):
            Membership(None, name="a", address="x", heartbeat_s=hb, ttl_s=ttl)  # type: ignore[arg-type]
