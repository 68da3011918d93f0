"""The per-branch reader/writer locks (lsmstore.operations.exclusion): shared holders
enter together, an exclusive holder waits them out and holds new ones back, a
cancelled waiter leaves nothing behind, idle branches' locks are dropped."""

from __future__ import annotations

import asyncio

import pytest

from lsmstore.operations.exclusion import BranchLocks


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_shared_holders_enter_together_and_exclusive_waits_for_them() -> None:
    locks = BranchLocks()
    order: list[str] = []
    first, second = locks.shared("r", "b"), locks.shared("r", "b")
    await first.__aenter__()
    await second.__aenter__()  # both in at once

    async def exclusive() -> None:
        async with locks.exclusive("r", "b"):
            order.append("exclusive")

    ex = asyncio.create_task(exclusive())
    await _turns()
    assert order == []
    await first.__aexit__(None, None, None)
    await _turns()
    assert order == []  # one shared holder is still in
    await second.__aexit__(None, None, None)
    await ex
    assert order == ["exclusive"]
    assert not locks._locks  # idle: dropped


async def test_waiting_exclusive_holds_new_shared_back_then_lets_them_in_together() -> None:
    locks = BranchLocks()
    order: list[str] = []
    held = locks.shared("r", "b")
    await held.__aenter__()
    release = asyncio.Event()

    async def exclusive() -> None:
        async with locks.exclusive("r", "b"):
            order.append("exclusive")
            await release.wait()

    async def shared(name: str) -> None:
        async with locks.shared("r", "b"):
            order.append(name)

    ex = asyncio.create_task(exclusive())
    await _turns()
    late = [asyncio.create_task(shared(f"s{i}")) for i in range(3)]
    await _turns()
    assert order == []  # queued behind the waiting exclusive holder
    await held.__aexit__(None, None, None)
    await _turns()
    assert order == ["exclusive"]
    release.set()
    await asyncio.gather(ex, *late)
    assert order == ["exclusive", "s0", "s1", "s2"]
    assert not locks._locks


async def test_other_branches_do_not_wait() -> None:
    locks = BranchLocks()
    entered: list[str] = []
    held = locks.exclusive("r", "b")
    await held.__aenter__()

    async def enter(name: str, repo: str, branch: str, exclusive: bool) -> None:
        async with locks.exclusive(repo, branch) if exclusive else locks.shared(repo, branch):
            entered.append(name)

    tasks = [
        asyncio.create_task(enter("same branch", "r", "b", False)),
        asyncio.create_task(enter("other branch", "r", "other", True)),
        asyncio.create_task(enter("other repo", "r2", "b", True)),
        asyncio.create_task(enter("other branch shared", "r", "other", False)),
    ]
    await _turns()
    # while r/b is held: every other branch's holder has been in and out, r/b's waits
    assert sorted(entered) == ["other branch", "other branch shared", "other repo"]
    assert not tasks[0].done()
    await held.__aexit__(None, None, None)
    await asyncio.gather(*tasks)
    assert entered[-1] == "same branch"
    assert not locks._locks


@pytest.mark.parametrize("exclusive", [False, True])
async def test_cancelled_waiter_leaves_nothing_behind(exclusive: bool) -> None:
    locks = BranchLocks()
    entered: list[str] = []
    held = locks.exclusive("r", "b")
    await held.__aenter__()

    async def waiter() -> None:
        async with locks.exclusive("r", "b") if exclusive else locks.shared("r", "b"):
            entered.append("cancelled one")

    async def later() -> None:
        async with locks.shared("r", "b"):
            entered.append("later")

    w = asyncio.create_task(waiter())
    await _turns()
    after = asyncio.create_task(later())
    await _turns()
    w.cancel()
    with pytest.raises(asyncio.CancelledError):
        await w
    await held.__aexit__(None, None, None)
    await after
    assert entered == ["later"]
    assert not locks._locks
    async with locks.exclusive("r", "b"):  # free again
        pass


async def test_waiter_cancelled_as_it_is_let_in_gives_the_lock_back() -> None:
    locks = BranchLocks()
    held = locks.exclusive("r", "b")
    await held.__aenter__()

    async def waiter() -> None:
        async with locks.exclusive("r", "b"):
            raise AssertionError("cancelled before it ran")

    w = asyncio.create_task(waiter())
    await _turns()
    await held.__aexit__(None, None, None)  # lets the waiter in...
    w.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await w
    assert not locks._locks
    async with locks.shared("r", "b"):
        pass


async def test_shared_holders_share_one_reader_acquisition() -> None:
    locks = BranchLocks()
    holds = [locks.shared("r", "b") for _ in range(100)]
    for h in holds:
        await h.__aenter__()
    lock = locks._locks[("r", "b")].lock
    assert lock.reader_lock.locked and len(lock._reader_lock._lock._owning) == 1
    late = locks.shared("r", "b")
    step = late.__aenter__().__await__()
    with pytest.raises(StopIteration):  # an open group: in without suspending
        next(step)
    for h in [*holds, late]:
        await h.__aexit__(None, None, None)
    await _turns()
    assert not lock.reader_lock.locked and not locks._locks
    async with locks.exclusive("r", "b"):
        pass


async def test_group_whose_waiters_were_all_cancelled_gives_the_lock_back() -> None:
    locks = BranchLocks()
    held = locks.exclusive("r", "b")
    await held.__aenter__()
    lock = locks._locks[("r", "b")].lock

    async def shared() -> None:
        async with locks.shared("r", "b"):
            raise AssertionError("cancelled before it entered")

    waiters = [asyncio.create_task(shared()) for _ in range(3)]
    await _turns()
    for w in waiters:
        w.cancel()
    for w in waiters:
        with pytest.raises(asyncio.CancelledError):
            await w
    await held.__aexit__(None, None, None)
    await _turns()
    assert not lock.reader_lock.locked and not lock.writer_lock.locked
    assert not locks._locks


async def test_shared_holder_arriving_after_a_failed_group_acquisition_is_not_cancelled() -> None:
    locks = BranchLocks()
    held = locks.exclusive("r", "b")
    await held.__aenter__()
    entry = locks._locks[("r", "b")]
    # A shared holder driven by hand: it waits in the group and leaves only when the
    # test resumes it, so the failed group keeps a holder while the next one arrives.
    first = locks.shared("r", "b").__aenter__().__await__()
    next(first)
    failed = entry.group
    assert failed is not None
    await _turns()  # its task waits for the reader lock
    failed.task.cancel()  # its reader acquisition (behind the exclusive holder) fails
    with pytest.raises(asyncio.CancelledError):
        await failed.task
    await _turns()
    assert failed.acquired.cancelled() and failed.holders == 1 and entry.group is failed
    entered: list[str] = []

    async def later() -> None:
        async with locks.shared("r", "b"):
            entered.append("later")

    after = asyncio.create_task(later())
    await _turns()
    assert not after.done()  # waits behind the exclusive holder, in a group of its own
    with pytest.raises(asyncio.CancelledError):  # the failed group's holder fails
        first.send(None)
    await held.__aexit__(None, None, None)
    await after
    assert entered == ["later"]
    await _turns()
    assert not entry.lock.reader_lock.locked and not entry.lock.writer_lock.locked
    assert not locks._locks
