"""What every handler shares: the Store, the authenticator, metrics, settings, and the
server's life-cycle state (ready, draining).  The per-branch exclusion of writes is the
Store's (:mod:`lsmstore.operations.exclusion`), taken by the operations the routes call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lsmstore.affinity import Membership
from lsmstore.client import Branch, Repository, Store
from lsmstore.config import Config
from lsmstore.refstore.names import check_repository_name
from lsmstore.server.auth import Authenticator
from lsmstore.server.forwarding import Forwarder
from lsmstore.server.metrics import Metrics
from lsmstore.tasks import retrieve_exception

#: How long a repository record read from the RefStore is reused by this process, and
#: how long a branch seen to exist is taken to exist by the write routes' 404 check
#: (:meth:`Context.check_branch`).
REPOSITORY_TTL_S = 1.0


@dataclass
class Context:
    store: Store
    config: Config
    auth: Authenticator
    metrics: Metrics
    clock: Callable[[], float] = time.monotonic
    draining: bool = False
    #: This daemon as a member of its RefStore's group (``server_affinity = on``).
    membership: Membership | None = None
    #: Forwards writes to their branch's owner (with the membership).
    forwarder: Forwarder | None = None
    _repos: dict[str, tuple[float, Repository]] = field(default_factory=dict)
    _loading: dict[str, asyncio.Future[Repository]] = field(default_factory=dict)
    _branches: dict[tuple[str, str], float] = field(default_factory=dict)
    #: Counts the branches forgotten: a check that read a branch while one was forgotten
    #: does not remember it (it may have read it before its deletion).
    _forgets: int = 0

    async def repository(self, name: str) -> Repository:
        """The repository (RepositoryNotFoundError / InvalidNameError), cached briefly.
        Requests that miss together share one RefStore read (when the entry expires
        under load, hundreds of requests would each read it)."""
        now = self.clock()
        hit = self._repos.get(name)
        if hit is not None and hit[0] > now:
            return hit[1]
        check_repository_name(name)
        loading = self._loading.get(name)
        if loading is None:
            loading = self._loading[name] = asyncio.ensure_future(self._load(name, now))
            loading.add_done_callback(retrieve_exception)
        return await asyncio.shield(loading)

    async def _load(self, name: str, now: float) -> Repository:
        me = asyncio.current_task()
        try:
            repo = await self.store.get_repository(name)
        finally:
            current = self._loading.get(name) is me
            if current:
                del self._loading[name]
        if current:  # not forgotten meanwhile (a deletion)
            if len(self._repos) > 10_000:
                self._repos.clear()
            self._repos[name] = (now + REPOSITORY_TTL_S, repo)
        return repo

    def forget_repository(self, name: str) -> None:
        self._repos.pop(name, None)
        self._loading.pop(name, None)
        for key in [k for k in self._branches if k[0] == name]:
            del self._branches[key]
        self._forgets += 1

    async def check_branch(self, branch: Branch) -> None:
        """RefNotFoundError (404) if the branch does not exist -- read at most once per
        :data:`REPOSITORY_TTL_S` per branch (:meth:`branch_seen`), so that a write route
        answers 404 before reading its body without a RefStore read per request."""
        repo, name = branch.repository.name, branch.name
        if self.branch_seen(repo, name):
            return
        forgets = self._forgets
        await branch.head()
        if self._forgets == forgets:  # nothing deleted through this process meanwhile
            self.saw_branch(repo, name)

    def branch_seen(self, repo: str, name: str) -> bool:
        """Whether the branch was seen to exist within :data:`REPOSITORY_TTL_S` (by
        :meth:`saw_branch`).  Only a shortcut for answering 404 early: a write to a
        branch deleted meanwhile by another process still fails, at its L1 append
        ("ref not found", 404), and nothing of it is acknowledged."""
        until = self._branches.get((repo, name))
        return until is not None and until > self.clock()

    def saw_branch(self, repo: str, name: str) -> None:
        if len(self._branches) > 10_000:
            self._branches.clear()
        self._branches[(repo, name)] = self.clock() + REPOSITORY_TTL_S

    def forget_branch(self, repo: str, name: str) -> None:
        """The branch was deleted through this process: check it again."""
        self._branches.pop((repo, name), None)
        self._forgets += 1
