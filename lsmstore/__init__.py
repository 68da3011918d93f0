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
"""

from lsmstore.client import Branch, Ref, Repository, ResolvedRef, Store, connect
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
from lsmstore.objects import ObjectReader
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
