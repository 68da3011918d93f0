"""lsmstore: a write service for a Git-for-data store -- an LSM of RocksDB-compatible
SSTables on an object store, ordered by a small strongly consistent RefStore.

::

    import lsmstore

    async with lsmstore.connect() as store:      # embedded default under ~/.lsmstore
        repo = await store.create_repository("demo", storage_namespace="file:///tmp/demo")
        main = repo.branch("main")
        await main.put("a/b.parquet", b"...")
        print(await main.get("a/b.parquet"))

See docs/client.md.  Every exception is a :class:`LsmError` (re-exported here).

The client (``connect``, ``Store``...) and ``ObjectReader`` are imported on first use:
a process that imports one module of the package (a Spark worker unpickling the data
source, a CLI command) does not load the whole client with it.
"""

from typing import TYPE_CHECKING, Any

from lsmstore.config import Config, load_config
from lsmstore.errors import (
    AlreadyExistsError,
    AmbiguousRefError,
    ClosedError,
    ConflictError,
    CorruptFileError,
    EntryTooLargeError,
    HookFailedError,
    ImportNotFoundError,
    ImportSourceNotAllowedError,
    InvalidActionError,
    InvalidInputError,
    InvalidKeyError,
    InvalidNameError,
    InvalidRefExpressionError,
    InvalidURLError,
    LsmError,
    MergeConflictError,
    NamespaceInUseError,
    NotAvailableError,
    NotFoundError,
    NothingToCommitError,
    NotOwnerError,
    ObjectExistsError,
    ObjectNotFoundError,
    PermissionDeniedError,
    PreconditionFailedError,
    ProtectedBranchError,
    RecordExistsError,
    RecordNotFoundError,
    RefExistsError,
    RefNotFoundError,
    RepositoryNotFoundError,
    UnavailableError,
    UnsupportedFormatError,
    WorkspaceExistsError,
    WorkspaceNotFoundError,
    WriteStalledError,
)
from lsmstore.types import (
    Change,
    Commit,
    Entry,
    ImportPath,
    ImportStatus,
    LogEntry,
    MergeResult,
    ObjectLink,
    ObjectStats,
    Stat,
)

if TYPE_CHECKING:
    from lsmstore.client import Branch, Ref, Repository, ResolvedRef, Store, connect
    from lsmstore.objects import ObjectReader

#: The names imported on first use, and their modules.
_LAZY = {
    "Branch": "lsmstore.client",
    "Ref": "lsmstore.client",
    "Repository": "lsmstore.client",
    "ResolvedRef": "lsmstore.client",
    "Store": "lsmstore.client",
    "connect": "lsmstore.client",
    "ObjectReader": "lsmstore.objects",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lsmstore' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AlreadyExistsError",
    "AmbiguousRefError",
    "Branch",
    "Change",
    "ClosedError",
    "Commit",
    "Config",
    "ConflictError",
    "CorruptFileError",
    "Entry",
    "EntryTooLargeError",
    "HookFailedError",
    "ImportNotFoundError",
    "ImportPath",
    "ImportSourceNotAllowedError",
    "ImportStatus",
    "InvalidActionError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidNameError",
    "InvalidRefExpressionError",
    "InvalidURLError",
    "LogEntry",
    "LsmError",
    "MergeConflictError",
    "MergeResult",
    "NamespaceInUseError",
    "NotAvailableError",
    "NotFoundError",
    "NotOwnerError",
    "NothingToCommitError",
    "ObjectExistsError",
    "ObjectLink",
    "ObjectNotFoundError",
    "ObjectReader",
    "ObjectStats",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "ProtectedBranchError",
    "RecordExistsError",
    "RecordNotFoundError",
    "Ref",
    "RefExistsError",
    "RefNotFoundError",
    "Repository",
    "RepositoryNotFoundError",
    "ResolvedRef",
    "Stat",
    "Store",
    "UnavailableError",
    "UnsupportedFormatError",
    "WorkspaceExistsError",
    "WorkspaceNotFoundError",
    "WriteStalledError",
    "connect",
    "load_config",
]
