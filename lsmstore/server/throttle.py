"""Throttling of failed authentications (docs/security.md, "Failed authentications").

Secrets must not be guessable at line rate, however many servers share the RefStore.
Every failed authentication (a wrong secret, an unknown key, a bad or expired token, a
malformed header; not a request that sends no credentials at all) is counted twice,
in the RefStore's window counters (:meth:`~lsmstore.refstore.base.RefStore.count_in_window`)
shared by every server: under the access key id it claimed (Basic credentials and
login name one) and under the client's address.  Once ``max_per_key`` failures of one
key id, or ``max_per_client`` failures from one address, are counted in a window of
``window_s`` (fixed: it starts at the first failure), every authentication of that key
id or from that address that is not already known good answers **429** with lakeFS's
error body and ``Retry-After`` (seconds until the window ends) -- *before* the secret
is checked, so throttled guesses cost no scrypt and tell nothing.  Refused attempts are
not counted.  So at most ``max_per_*`` guesses per window get through on all servers
together (plus the attempts in flight when the limit was reached: each server checks
the count before the attempt and counts after it).  0 turns a limit off.

Credentials a server has verified recently (:mod:`.auth`, "Propagation") are not
checked against the counters: a client whose key id someone else is guessing keeps
working on the servers that know it, and requests cost no RefStore read.

The per-key limit stops guessing spread over many addresses, at a price: someone who
knows a key id can lock it out (429) for a window, for clients not already known to a
server, by failing on purpose.  Watch ``lsmstore_auth_failures_total{outcome="throttled"}``.
Behind a proxy every client has the proxy's address: turn the per-client limit off
there (``0``).

A key id or address is counted under its own name when it is plain (letters, digits,
``.:-``, at most :data:`MAX_SUBJECT` characters), else under a hash of it.  The clock
(seconds since the epoch, for ``Retry-After``) is injectable; windows follow the
RefStore's clock.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter

from lsmstore.refstore.base import WindowCount
from lsmstore.server.errors import ApiError

T = TypeVar("T")

#: Characters of a key id or address counted under its own name (the longest access
#: key id); longer ones, and ones with other characters, are counted under a hash.
MAX_SUBJECT = 128
_PLAIN = re.compile(r"^[A-Za-z0-9.:-]{1,128}$")


class WindowCounters(Protocol):
    """The RefStore's window counters (``lsmstore.refstore.base.RefStore``)."""

    async def count_in_window(self, name: str, window_s: float) -> WindowCount: ...

    async def read_window_count(self, name: str) -> WindowCount: ...


def counter_name(kind: str, subject: str) -> str:
    """The counter of a key id (``kind`` "key") or an address ("client")."""
    if not _PLAIN.fullmatch(subject):
        subject = "#" + hashlib.sha256(subject.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"auth-failures/{kind}/{subject}"


class AuthThrottle:
    """Counts failed authentications per key id and per address (module docstring)."""

    def __init__(
        self,
        counters: WindowCounters,
        *,
        window_s: float,
        max_per_key: int,
        max_per_client: int,
        clock: Callable[[], float] = time.time,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.counters = counters
        self.window_s = window_s
        self.clock = clock
        self._limits = {"key": max_per_key, "client": max_per_client}
        self.failures = Counter(
            "lsmstore_auth_failures",
            "failed authentications: rejected (401), or throttled (429) after too many",
            ["outcome"],
            registry=registry,
        )

    def _subjects(self, key_id: str | None, client: str | None) -> list[str]:
        return [
            counter_name(kind, subject)
            for kind, subject in (("key", key_id), ("client", client))
            if subject and self._limits[kind] > 0
        ]

    async def check(self, key_id: str | None, client: str | None) -> None:
        """ApiError(429) with ``Retry-After`` when the key id or the address is over
        its limit."""
        names = self._subjects(key_id, client)
        if not names:
            return
        counts = await asyncio.gather(*(self.counters.read_window_count(n) for n in names))
        now = self.clock()
        wait = max(
            (
                c.ends_at - now
                for n, c in zip(names, counts, strict=True)
                if c.value >= self._limits[n.split("/")[1]]
            ),
            default=None,
        )
        if wait is not None:
            self.failures.labels("throttled").inc()
            seconds = max(1, math.ceil(wait))
            raise ApiError(
                429,
                f"too many failed authentications: retry in {seconds} s",
                {"Retry-After": str(seconds)},
            )

    async def failed(self, key_id: str | None, client: str | None) -> None:
        self.failures.labels("rejected").inc()
        names = self._subjects(key_id, client)
        await asyncio.gather(*(self.counters.count_in_window(n, self.window_s) for n in names))

    async def guard(
        self, key_id: str | None, client: str | None, attempt: Callable[[], Awaitable[T]]
    ) -> T:
        """Run ``attempt`` (an authentication) unless throttled; count its 401."""
        await self.check(key_id, client)
        try:
            return await attempt()
        except ApiError as e:
            if e.status == 401:
                await self.failed(key_id, client)
            raise


def client_address(scope: Any) -> str | None:
    """The peer address of an ASGI scope (None when the server does not know it)."""
    client = scope.get("client")
    return str(client[0]) if client else None
