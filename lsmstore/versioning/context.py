"""What every versioning operation needs of one repository.

A :class:`RepoContext` bundles the repository's name, its RefStore, the object store of
its storage namespace, a source of committed ranges, the range policy trees are cut
with, and a small cache of parsed commits.  Commits are immutable and named by their
digest, so the cache never needs invalidating.  Cheap to build; safe for concurrent
tasks of one event loop.  It owns nothing: closing the stores is the caller's job.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol, TypeVar

from lsmstore import layout
from lsmstore.config import Config
from lsmstore.graveler.commit import read_commit
from lsmstore.graveler.range_encoder import RangeEncoder
from lsmstore.graveler.ranges import RangePolicy
from lsmstore.graveler.source import DirectSource, RangeSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.layout import Level
from lsmstore.refstore.base import RefStore
from lsmstore.storage.base import ObjectStore
from lsmstore.types import Commit

T = TypeVar("T")

#: Parsed commits kept per context (a commit is a few hundred bytes).
COMMIT_CACHE_ENTRIES = 10_000


def range_policy(config: Config) -> RangePolicy:
    """The range cut policy the configuration names (``commit_range_*``)."""
    return RangePolicy(
        min_bytes=config.commit_range_min_bytes,
        max_bytes=config.commit_range_max_bytes,
        raggedness=config.commit_range_raggedness,
    )


class FileCacheLike(Protocol):
    """What the context needs of ``lsmstore.cache.FileCache`` (immutable files by key)."""

    async def get(
        self, store: ObjectStore, key: str, parse: Callable[[bytes, str], T], *, kind: str = ...
    ) -> T: ...


class RepoContext:
    """One repository's stores and settings, as versioning code sees them."""

    def __init__(
        self,
        name: str,
        refstore: RefStore,
        objects: ObjectStore,
        *,
        policy: RangePolicy | None = None,
        source: RangeSource | None = None,
        files: FileCacheLike | None = None,
        default_branch: str = "main",
        clock: Callable[[], float] = time.time,
        range_encoder: RangeEncoder | None = None,
    ) -> None:
        """``range_encoder`` names and encodes the ranges commits and merges write
        (default: threads)."""
        self.name = name
        self.refstore = refstore
        self.objects = objects
        self.policy = policy or RangePolicy()
        self.source: RangeSource = source or DirectSource(objects)
        self.files = files
        self.default_branch = default_branch
        self.clock = clock
        self.range_encoder = range_encoder
        self._commits: OrderedDict[str, Commit] = OrderedDict()

    async def commit(self, commit_id: str) -> Commit:
        """The commit named ``commit_id``: RefNotFoundError if none is stored,
        InvalidInputError for a malformed ID, CorruptFileError for a damaged object."""
        found = self._commits.get(commit_id)
        if found is not None:
            self._commits.move_to_end(commit_id)
            return found
        commit = await read_commit(self.objects, commit_id, cache=self.files)
        self.remember(commit_id, commit)
        return commit

    def remember(self, commit_id: str, commit: Commit) -> None:
        """Keep a commit this process wrote or read."""
        self._commits[commit_id] = commit
        while len(self._commits) > COMMIT_CACHE_ENTRIES:
            self._commits.popitem(last=False)

    async def staging_reader(self, branch: str, level: Level, file_id: str) -> SSTReader:
        """The parsed L1/L2 file ``file_id`` of ``branch`` (through the file cache if any)."""
        key = layout.staging_key(branch, level, file_id)
        if self.files is not None:
            reader: SSTReader = await self.files.get(self.objects, key, SSTReader, kind="sst")
            return reader
        data = await self.objects.get(key)
        return await asyncio.to_thread(SSTReader, data, key)
