"""Throttling of failed authentications (docs/server.md, "Failed authentications").

Secrets must not be guessable at line rate.  Every failed authentication (a wrong
secret, an unknown key, a bad or expired token, a malformed header; not a request
that sends no credentials at all) is counted twice: under the access key id it
claimed (Basic credentials and login name one) and under the client's address.  Past
``max_per_key`` failures of one key id, or ``max_per_client`` failures from one
address, within ``window_s`` (a sliding window: the times of the last failures are
kept), every authentication of that key id or from that address answers **429** with
lakeFS's error body and ``Retry-After`` (seconds until the oldest counted failure
leaves the window) -- *before* the secret is checked, a correct one included, so
throttled guesses cost no scrypt and tell nothing.  Refused attempts are not counted:
a client that waits ``Retry-After`` gets one attempt per failure that left the window,
so at most ``max_per_*`` guesses per window get through.  0 turns a limit off.

The per-key limit stops guessing spread over many addresses, at a price: someone who
knows a key id can lock it out (429) for a window by failing on purpose.  Watch
``lsmstore_auth_failures_total{outcome="throttled"}``.  Behind a proxy every client
has the proxy's address: turn the per-client limit off there (``0``).

State is per process and bounded (``max_tracked`` key ids and addresses each, least
recently failed forgotten first; of each, its first :data:`MAX_SUBJECT` characters:
no access key id is longer, but a login may name one of any length).  The clock is injectable.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter

from lsmstore.server.errors import ApiError

T = TypeVar("T")

MAX_TRACKED = 100_000
#: Characters of a key id or address kept (the longest access key id).
MAX_SUBJECT = 128


class _Window:
    """The times of the last ``limit`` failures of each subject (key id or address)."""

    def __init__(self, limit: int, window_s: float, max_tracked: int) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_tracked = max_tracked
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    @property
    def tracked(self) -> bool:
        return bool(self._failures)

    def wait_s(self, subject: str | None, now: float) -> float:
        """Seconds until ``subject`` may try again (0: now)."""
        if subject is None or self.limit <= 0:
            return 0.0
        subject = subject[:MAX_SUBJECT]
        times = self._failures.get(subject)
        if times is None:
            return 0.0
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[subject]
            return 0.0
        if len(times) < self.limit:
            return 0.0
        return times[0] + self.window_s - now

    def failed(self, subject: str | None, now: float) -> None:
        if subject is None or self.limit <= 0:
            return
        subject = subject[:MAX_SUBJECT]
        times = self._failures.get(subject)
        if times is None:
            times = self._failures[subject] = deque(maxlen=self.limit)
            while len(self._failures) > self.max_tracked:
                self._failures.popitem(last=False)
        else:
            self._failures.move_to_end(subject)
        times.append(now)


class AuthThrottle:
    """Counts failed authentications per key id and per address (module docstring)."""

    def __init__(
        self,
        *,
        window_s: float,
        max_per_key: int,
        max_per_client: int,
        clock: Callable[[], float] = time.monotonic,
        max_tracked: int = MAX_TRACKED,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.clock = clock
        self._keys = _Window(max_per_key, window_s, max_tracked)
        self._clients = _Window(max_per_client, window_s, max_tracked)
        self.failures = Counter(
            "lsmstore_auth_failures",
            "failed authentications: rejected (401), or throttled (429) after too many",
            ["outcome"],
            registry=registry,
        )

    def check(self, key_id: str | None, client: str | None) -> None:
        """ApiError(429) with ``Retry-After`` when the key id or the address is over
        its limit."""
        now = self.clock()
        wait = max(self._keys.wait_s(key_id, now), self._clients.wait_s(client, now))
        if wait > 0:
            self.failures.labels("throttled").inc()
            seconds = max(1, math.ceil(wait))
            raise ApiError(
                429,
                f"too many failed authentications: retry in {seconds} s",
                {"Retry-After": str(seconds)},
            )

    def failed(self, key_id: str | None, client: str | None) -> None:
        now = self.clock()
        self.failures.labels("rejected").inc()
        self._keys.failed(key_id, now)
        self._clients.failed(client, now)

    @property
    def idle(self) -> bool:
        """No failure is being counted: nothing can be throttled."""
        return not self._keys.tracked and not self._clients.tracked

    async def guard(
        self,
        key_id: Callable[[], str | None],
        client: str | None,
        attempt: Callable[[], Awaitable[T]],
    ) -> T:
        """Run ``attempt`` (an authentication) unless throttled; count its 401.
        ``key_id`` tells the key id claimed; it is only asked while failures are
        counted, so requests cost nothing extra on a server nobody attacks."""
        if not self.idle:
            self.check(key_id(), client)
        try:
            return await attempt()
        except ApiError as e:
            if e.status == 401:
                self.failed(key_id(), client)
            raise


def client_address(scope: Any) -> str | None:
    """The peer address of an ASGI scope (None when the server does not know it)."""
    client = scope.get("client")
    return str(client[0]) if client else None
