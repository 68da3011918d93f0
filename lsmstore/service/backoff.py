"""Exponential backoff with jitter, for waiting out a dependency outage.

Delay *n* (from 0) is drawn uniformly from ``[d/2, d]`` where
``d = min(cap, base * 2**n)``: it grows quickly to ``cap``, never hammers a recovering
server in lock-step with the other processes (the jitter spreads them), and never
drops to zero.  The random source and the sleep are injectable.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable


class Backoff:
    def __init__(
        self,
        base: float = 0.2,
        cap: float = 10.0,
        *,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        if not 0 < base <= cap:
            raise ValueError(f"backoff: need 0 < base <= cap, got base={base} cap={cap}")
        self.base = base
        self.cap = cap
        self.rng = rng or random.Random()
        self._sleep = sleep
        self.attempts = 0

    def reset(self) -> None:
        """The dependency answered: the next outage starts from ``base`` again."""
        self.attempts = 0

    def next_delay(self) -> float:
        d = min(self.cap, self.base * float(2 ** min(self.attempts, 62)))
        self.attempts += 1
        return float(d / 2 + self.rng.uniform(0, d / 2))

    async def wait(self, stop: asyncio.Event | None = None) -> bool:
        """Sleep the next delay, or until ``stop`` is set; False when stopped."""
        delay = self.next_delay()
        if self._sleep is not None:
            await self._sleep(delay)
            return stop is None or not stop.is_set()
        if stop is None:
            await asyncio.sleep(delay)
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        return not stop.is_set()
