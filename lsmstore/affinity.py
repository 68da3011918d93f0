"""Branch affinity: which live daemon batches a branch's writes.

Daemons sharing one RefStore announce themselves as its members
(:meth:`lsmstore.refstore.base.RefStore.announce_member`) and renew that every
``heartbeat_s``; a member that stops renewing drops out ``ttl_s`` after its last
heartbeat, one that shuts down withdraws at once.  The owner of a branch is chosen by
rendezvous (highest random weight) hashing of ``repository/branch`` over the live
members: every daemon with the same member list picks the same owner, and when a member
leaves only the branches it owned move (each to its runner-up), spread evenly over the
rest.

Ownership is advisory.  Any daemon may still append to any branch (the RefStore orders
appends), so two daemons that disagree about the member list -- for at most
``ttl_s + heartbeat_s`` after a change -- cost batching (more, smaller L1 files, more
fetches of files another daemon wrote), never data.

Concurrency: a :class:`Membership` belongs to one event loop; :meth:`Membership.owner`
reads the member list of the latest heartbeat without I/O.  What it keeps in memory is
that list, replaced with every heartbeat (so at most ``heartbeat_s`` old while the
RefStore answers; after ``ttl_s`` without an answer the daemon counts itself alone and
owns every branch: writes go on locally, as without affinity).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Sequence

from lsmstore.errors import InvalidInputError, LsmError
from lsmstore.refstore.base import Member, RefStore

log = logging.getLogger(__name__)


def branch_key(repository: str, branch: str) -> str:
    """What ownership hashes: names cannot hold ``/`` twice ambiguously (a repository
    name has no ``/``)."""
    return f"{repository}/{branch}"


def _weight(member: str, key: str) -> int:
    digest = hashlib.blake2b(
        key.encode("utf-8"), digest_size=8, key=member.encode("utf-8")[:64], person=b"lsm-owner"
    ).digest()
    return int.from_bytes(digest, "big")


def rendezvous_owner(members: Sequence[Member], key: str) -> Member | None:
    """The member with the highest weight for ``key`` (ties: the greatest name); None
    for no member.  Depends only on the members' names, not on their order."""
    best: Member | None = None
    best_rank: tuple[int, str] = (-1, "")
    for m in members:
        rank = (_weight(m.name, key), m.name)
        if rank > best_rank:
            best, best_rank = m, rank
    return best


class Membership:
    """This process as a member of its RefStore's group, and its view of the others.

    ``name`` must be unique per process and never reused (a random id: a restarted
    daemon is a new member, and its predecessor's record expires).  ``address`` is
    where the others reach it.  :meth:`start` announces it and runs heartbeats until
    :meth:`aclose`, which withdraws it.  ``clock`` measures how long the RefStore went
    unanswered.
    """

    def __init__(
        self,
        refstore: RefStore,
        *,
        name: str,
        address: str,
        heartbeat_s: float = 2.0,
        ttl_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < heartbeat_s < ttl_s:
            raise InvalidInputError(
                f"member heartbeat {heartbeat_s!r} s must be positive and below the "
                f"lifetime {ttl_s!r} s"
            )
        self.refstore = refstore
        self.name = name
        self.address = address
        self.heartbeat_s = heartbeat_s
        self.ttl_s = ttl_s
        self._clock = clock
        self._self = Member(name, address, 0.0)
        self._members: tuple[Member, ...] = ()
        self._seen_at = -float("inf")
        self._task: asyncio.Task[None] | None = None

    @property
    def members(self) -> tuple[Member, ...]:
        """The live members as of the latest heartbeat (always including this one);
        only this one once the RefStore has not answered for ``ttl_s``."""
        if self._clock() - self._seen_at > self.ttl_s:
            return (self._self,)
        if any(m.name == self.name for m in self._members):
            return self._members
        return (*self._members, self._self)

    def owner(self, repository: str, branch: str) -> Member:
        """The member that batches this branch's writes."""
        owner = rendezvous_owner(self.members, branch_key(repository, branch))
        assert owner is not None  # members always holds this process
        return owner

    def owns(self, repository: str, branch: str) -> bool:
        return self.owner(repository, branch).name == self.name

    async def beat(self) -> None:
        """One heartbeat: renew this member, then re-read the live members."""
        await self.refstore.announce_member(self.name, self.address, self.ttl_s)
        members = await self.refstore.list_members()
        self._members = tuple(members)
        self._seen_at = self._clock()

    async def start(self) -> None:
        """Announce this member (raising if the RefStore refuses) and keep it alive."""
        await self.beat()
        self._task = asyncio.create_task(self._run(), name=f"membership {self.name}")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self.beat()
            except LsmError as e:  # the next heartbeat retries; ownership degrades alone
                log.warning("membership heartbeat of %s failed: %s", self.name, e)

    async def aclose(self) -> None:
        """Stop the heartbeats and withdraw (best effort: otherwise it expires)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self.refstore.withdraw_member(self.name)
        except LsmError as e:
            log.warning("withdrawing member %s failed (it expires instead): %s", self.name, e)
