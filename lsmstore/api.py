"""The client API as an interface: what every store handle offers, embedded or remote.

:func:`lsmstore.connect` returns an embedded :class:`lsmstore.client.Store` for a
RefStore URL (or the default) and a :class:`lsmstore.remote.RemoteStore` for an
``http(s)://`` server URL.  Both satisfy these protocols, and one parametrised test
suite (``tests/test_client_api.py``) runs against each, so code written against
them -- the ``lsmstore`` command, the fsspec filesystem, :mod:`lsmstore.sync` --
behaves the same on either.  Contracts (errors, consistency) are those of
docs/client.md and docs/versioning.md; the remote side maps each HTTP error back to
the same typed exception.

The embedded classes offer more (the engine parts version-control code and the
workers use: ``refstore``, ``objects``, ``context()`` ...); those are not part of
this interface.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from lsmstore.config import Config
from lsmstore.objects import LinkItem
from lsmstore.refstore.base import Ref as RefValue
from lsmstore.types import Change, Commit, Entry, LogEntry, MergeResult, ObjectStats, Stat


@runtime_checkable
class ObjectReaderAPI(Protocol):
    size: int
    stats: ObjectStats

    async def read(self, offset: int = 0, length: int | None = None) -> bytes: ...
    def __aiter__(self) -> AsyncIterator[bytes]: ...
    async def aclose(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class ReadsAPI(Protocol):
    """Reads of a branch or of any ref."""

    async def get(self, key: str | bytes) -> bytes: ...
    async def lookup(self, key: str | bytes) -> tuple[bytes, Stat]: ...
    async def exists(self, key: str | bytes) -> bool: ...
    async def stat(self, key: str | bytes) -> Stat: ...
    def list(
        self,
        prefix: str | bytes = b"",
        *,
        after: str | bytes | None = None,
        limit: int | None = None,
        delimiter: str | bytes | None = None,
    ) -> AsyncIterator[Entry]: ...
    async def stat_object(self, path: str) -> ObjectStats: ...
    async def open(self, path: str) -> Any: ...  # an ObjectReaderAPI
    def list_objects(
        self,
        prefix: str = "",
        delimiter: str = "",
        after: str | None = None,
        amount: int | None = None,
    ) -> AsyncIterator[ObjectStats]: ...


class RefAPI(ReadsAPI, Protocol):
    expression: str

    async def commit(self) -> Commit: ...


class BranchAPI(ReadsAPI, Protocol):
    name: str

    async def put(
        self, key: str | bytes, value: bytes, *, identity: bytes | None = None
    ) -> None: ...
    async def put_many(self, items: Any) -> None: ...
    async def delete(self, key: str | bytes) -> None: ...
    async def delete_many(self, keys: Iterable[str | bytes]) -> None: ...
    async def stage_sst(self, sst: str | os.PathLike[str] | bytes) -> str: ...
    async def commit(
        self,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        committer: str | None = None,
        allow_empty: bool = False,
    ) -> Commit: ...
    async def diff_uncommitted(self) -> list[Change]: ...
    async def flush(self) -> None: ...
    async def head(self) -> RefValue: ...
    async def reset(self) -> RefValue: ...
    async def upload(
        self,
        path: str,
        data: Any,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        if_absent: bool = False,
    ) -> ObjectStats: ...
    async def link_many(self, links: Iterable[LinkItem]) -> None:
        """Register many objects whose data is already on the store, with one
        acknowledgement.  Each link is an :class:`ObjectLink` or, cheaper to build, a
        tuple of its fields in order: ``(path, physical_address, size, checksum)``
        optionally followed by ``content_type``, ``metadata``, ``mtime``
        (:data:`~lsmstore.objects.LinkTuple`).  Every link is checked first: one bad
        link -- a tuple of another length, a field of the wrong type, a path or an
        address breaking the rules -- raises its InvalidInputError (InvalidNameError
        for a bad path) and nothing is staged."""
        ...

    async def delete_object(self, path: str) -> None: ...
    async def delete_objects(self, paths: Iterable[str]) -> None: ...
    async def copy_object(
        self, src_path: str, dst_path: str, *, src_ref: str | None = None
    ) -> ObjectStats: ...


class RepositoryAPI(Protocol):
    name: str
    storage_namespace: str
    default_branch: str

    @property
    def created_at(self) -> float: ...
    def branch(self, name: str | None = None) -> Any: ...  # a BranchAPI
    def ref(self, expression: str) -> Any: ...  # a RefAPI
    async def list_branches(
        self, *, prefix: str = "", after: str | None = None, limit: int = 1000
    ) -> list[str]: ...
    async def create_branch(self, name: str, *, source: str | None = None) -> Any: ...
    async def delete_branch(self, name: str) -> None: ...
    async def create_tag(self, name: str, target: str) -> str: ...
    async def delete_tag(self, name: str) -> None: ...
    async def list_tags(
        self, *, prefix: str = "", after: str | None = None, limit: int = 1000
    ) -> list[str]: ...
    def log(
        self,
        ref: str | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
        first_parent: bool = True,
    ) -> AsyncIterator[LogEntry]: ...
    def diff(self, left: str, right: str) -> AsyncIterator[Change]: ...
    async def merge(
        self,
        source: str,
        *,
        into: str | None = None,
        strategy: Any = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
        squash: bool = False,
    ) -> MergeResult: ...
    async def revert(
        self,
        commit: str,
        *,
        branch: str | None = None,
        parent: int = 1,
        strategy: Any = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> MergeResult: ...


class StoreAPI(Protocol):
    config: Config

    async def create_repository(
        self, name: str, *, storage_namespace: str, default_branch: str = "main"
    ) -> Any: ...  # a RepositoryAPI
    async def get_repository(self, name: str) -> Any: ...
    async def list_repositories(self, *, after: str | None = None, limit: int = 1000) -> Any: ...
    async def delete_repository(self, name: str) -> None: ...
    async def aclose(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None: ...
