"""A store wrapper that injects failures, latency and pauses, and counts calls.

For tests of the layers above the object store (writer, reader, compactor, cache)::

    store = FaultyStore(MemoryStore())
    store.fail("put", times=2)                       # the next 2 puts raise UnavailableError
    store.fail("get", times=None, prefix="_lsm/ranges/")   # every range read fails
    store.land_then_fail("put")                      # next put lands, then reports failure
    store.delay(("get", "get_range"), 0.05)          # latency on every read
    gate = store.hold("get", prefix="a")             # next get of a key under "a" waits...
    await gate.entered.wait(); gate.release()        # ...until released
    store.calls["get"], store.count("get", prefix="_lsm/ranges/"), store.log

Faults are checked in the order they were added; each applies to the operations it
names (``get``, ``get_range``, ``put``, ``head``, ``delete``, ``list``; for ``list`` the
"key" is the prefix) and to keys accepted by ``prefix`` and ``match``.  ``times`` is the
number of matching calls a fault affects (``None``: all of them until removed);
``probability`` draws from the injectable ``rng``; latency uses the injectable ``sleep``.
A call with an invalid key or on a closed store fails as the inner store would, before
any fault or count.  ``aclose()`` closes the inner store.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from lsmstore.errors import InvalidInputError, UnavailableError
from lsmstore.storage.base import ObjectMeta, ObjectStore, PutMode, check_key

OPS = ("get", "get_range", "put", "head", "delete", "list")

ErrorFactory = Callable[[str, str], BaseException]  # (operation, key) -> exception to raise


def _unavailable(op: str, key: str) -> BaseException:
    return UnavailableError(f"injected failure: {op} {key}")


def _landed(op: str, key: str) -> BaseException:
    return UnavailableError(f"injected failure after {op} {key} was applied", outcome_unknown=True)


@dataclass(eq=False)
class Fault:
    """One injected behaviour; returned by the :class:`FaultyStore` methods."""

    ops: frozenset[str]
    prefix: str = ""
    match: Callable[[str], bool] | None = None
    times: int | None = 1
    probability: float = 1.0
    error: ErrorFactory | None = None
    after: bool = False  # run the inner call first, then raise (its effect stays)
    latency: float = 0.0
    jitter: float = 0.0
    gate: asyncio.Event | None = None
    #: Set when a call first reaches this fault (for ``hold``: the call is now waiting).
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    hits: int = 0  # calls affected so far

    def release(self) -> None:
        """Let held calls (``hold``) continue."""
        if self.gate is not None:
            self.gate.set()

    def applies(self, op: str, key: str, rng: random.Random) -> bool:
        if op not in self.ops or not key.startswith(self.prefix):
            return False
        if self.match is not None and not self.match(key):
            return False
        return self.probability >= 1.0 or rng.random() < self.probability


def _ops(ops: str | Iterable[str]) -> frozenset[str]:
    result = frozenset([ops] if isinstance(ops, str) else ops)
    unknown = result - set(OPS)
    if unknown or not result:
        raise InvalidInputError(
            f"unknown store operations {sorted(unknown)}; expected some of {OPS}"
        )
    return result


class FaultyStore(ObjectStore):
    def __init__(
        self,
        inner: ObjectStore,
        *,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.inner = inner
        self.url = inner.url
        self.rng = rng or random.Random(0)
        self._sleep = sleep
        self.faults: list[Fault] = []
        self.calls: Counter[str] = Counter()
        self.log: list[tuple[str, str]] = []  # (operation, key) of every counted call

    # --- configuring -----------------------------------------------------------------

    def add(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def fail(
        self,
        ops: str | Iterable[str],
        *,
        times: int | None = 1,
        prefix: str = "",
        match: Callable[[str], bool] | None = None,
        probability: float = 1.0,
        error: ErrorFactory = _unavailable,
    ) -> Fault:
        """Matching calls raise ``error(op, key)`` (default UnavailableError) without I/O."""
        return self.add(Fault(_ops(ops), prefix, match, times, probability, error))

    def land_then_fail(
        self,
        ops: str | Iterable[str] = "put",
        *,
        times: int | None = 1,
        prefix: str = "",
        match: Callable[[str], bool] | None = None,
        error: ErrorFactory = _landed,
    ) -> Fault:
        """The inner call runs (a put lands), then ``UnavailableError(outcome_unknown=True)``."""
        return self.add(Fault(_ops(ops), prefix, match, times, error=error, after=True))

    def delay(
        self,
        ops: str | Iterable[str],
        seconds: float,
        *,
        jitter: float = 0.0,
        times: int | None = None,
        prefix: str = "",
        match: Callable[[str], bool] | None = None,
    ) -> Fault:
        """Matching calls first sleep ``seconds`` (+ up to ``jitter``, drawn from ``rng``)."""
        return self.add(Fault(_ops(ops), prefix, match, times, latency=seconds, jitter=jitter))

    def hold(
        self,
        ops: str | Iterable[str],
        *,
        times: int | None = 1,
        prefix: str = "",
        match: Callable[[str], bool] | None = None,
    ) -> Fault:
        """Matching calls wait until ``fault.release()``; ``fault.entered`` is set on arrival."""
        return self.add(Fault(_ops(ops), prefix, match, times, gate=asyncio.Event()))

    def remove(self, fault: Fault) -> None:
        if fault in self.faults:
            self.faults.remove(fault)
        fault.release()

    def clear(self) -> None:
        """Remove every fault (held calls are released); counts are kept."""
        for fault in list(self.faults):
            self.remove(fault)

    def count(self, op: str, *, prefix: str = "") -> int:
        """Calls of ``op`` whose key starts with ``prefix``."""
        return sum(1 for o, k in self.log if o == op and k.startswith(prefix))

    # --- the wrapper -----------------------------------------------------------------

    async def _before(self, op: str, key: str) -> list[Fault]:
        self.calls[op] += 1
        self.log.append((op, key))
        later: list[Fault] = []
        for fault in list(self.faults):
            if not fault.applies(op, key, self.rng):
                continue
            fault.hits += 1
            if fault.times is not None and fault.hits >= fault.times and fault in self.faults:
                self.faults.remove(fault)
            fault.entered.set()
            if fault.latency or fault.jitter:
                await self._sleep(fault.latency + fault.jitter * self.rng.random())
            if fault.gate is not None:
                await fault.gate.wait()
            if fault.error is not None:
                if fault.after:
                    later.append(fault)
                else:
                    raise fault.error(op, key)
        return later

    @staticmethod
    def _after(later: list[Fault], op: str, key: str) -> None:
        for fault in later:
            assert fault.error is not None
            raise fault.error(op, key)

    def _enter(self, key: str) -> None:
        check_key(key)
        self._check_open()

    async def get(self, key: str) -> bytes:
        self._enter(key)
        later = await self._before("get", key)
        data = await self.inner.get(key)
        self._after(later, "get", key)
        return data

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        self._enter(key)
        later = await self._before("get_range", key)
        data = await self.inner.get_range(key, start, end)
        self._after(later, "get_range", key)
        return data

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        self._enter(key)
        later = await self._before("put", key)
        await self.inner.put(key, data, mode)
        self._after(later, "put", key)

    async def put_fresh(self, key: str, data: bytes) -> asyncio.Future[None]:
        """The inner store's ``put_fresh`` (its own durability step), with the faults of
        ``put``; a fault raised after the call leaves the object written."""
        self._enter(key)
        later = await self._before("put", key)
        durable = await self.inner.put_fresh(key, data)
        self._after(later, "put", key)
        return durable

    async def head(self, key: str) -> ObjectMeta:
        self._enter(key)
        later = await self._before("head", key)
        meta = await self.inner.head(key)
        self._after(later, "head", key)
        return meta

    async def delete(self, key: str, *, missing_ok: bool = True) -> None:
        self._enter(key)
        later = await self._before("delete", key)
        await self.inner.delete(key, missing_ok=missing_ok)
        self._after(later, "delete", key)

    async def aclose(self) -> None:
        await super().aclose()
        await self.inner.aclose()

    async def list(
        self, prefix: str = "", *, after: str | None = None
    ) -> AsyncIterator[ObjectMeta]:
        self._check_open()
        later = await self._before("list", prefix)
        async for meta in self.inner.list(prefix, after=after):
            yield meta
        self._after(later, "list", prefix)
