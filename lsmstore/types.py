"""The public value types: what the API hands out (and the few things it takes in).

Plain, immutable data with no behaviour beyond checking and naming themselves: no
module here imports the engine, so a caller -- the remote client, a server route, a
tool -- can use them without loading the storage engine.  The engine builds and reads
them (:mod:`lsmstore.staging.reader`, :mod:`lsmstore.graveler.commit`,
:mod:`lsmstore.graveler.diff`, :mod:`lsmstore.versioning`, :mod:`lsmstore.objects`);
the :mod:`lsmstore` namespace re-exports them.

* :class:`Entry`, :class:`Stat` -- a key in a listing, a key's ``stat``;
* :class:`Commit` (validated on construction; its ID is the SHA-256 of its canonical
  bytes, docs/format.md), :class:`LogEntry`, :class:`MergeResult`, :class:`Change`;
* :class:`ObjectStats`, :class:`ObjectLink` -- lakeFS's objects.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from lsmstore.errors import InvalidInputError

if TYPE_CHECKING:
    from lsmstore.graveler.record import Record

__all__ = [
    "STRATEGIES",
    "Change",
    "ChangeKind",
    "Commit",
    "Entry",
    "ImportPath",
    "ImportStatus",
    "LogEntry",
    "MergeResult",
    "ObjectLink",
    "ObjectStats",
    "PathType",
    "Stat",
    "Strategy",
    "check_tree_id",
]

# --- keys ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stat:
    """What ``stat`` tells about a key."""

    key: bytes
    size: int  # bytes of the value
    identity: bytes
    staged: bool  # True: the newest record is an uncommitted write; False: committed

    @property
    def path(self) -> str:
        return self.key.decode("utf-8", "surrogateescape")


@dataclass(frozen=True, slots=True)
class Entry:
    """One listing entry: a key with its value's size and identity, or a common prefix.

    ``value`` is the value itself (None for a common prefix); it takes no part in
    comparisons or ``repr``."""

    key: bytes
    size: int = 0
    identity: bytes = b""
    common_prefix: bool = False
    value: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def path(self) -> str:
        """The key decoded as UTF-8 (undecodable bytes as surrogate escapes)."""
        return self.key.decode("utf-8", "surrogateescape")


# --- versioning ------------------------------------------------------------------------

#: The canonical commit bytes (docs/format.md, "Ranges, metaranges and commits";
#: decoded by :mod:`lsmstore.graveler.commit`): magic, version, then the fields with
#: big-endian integers.
MAGIC = b"LSMC"
VERSION = 1
MAX_PARENTS = 2
U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
_MAX_U32 = (1 << 32) - 1
_MAX_U63 = (1 << 63) - 1

#: A range, metarange or commit ID: 64 lowercase hex digits (bytes).
HEX_ID = re.compile(rb"^[0-9a-f]{64}$")


def check_tree_id(tree_id: str, what: str = "metarange") -> str:
    """A range or metarange ID is 64 lowercase hex characters; InvalidInputError otherwise."""
    if not isinstance(tree_id, str) or not HEX_ID.match(tree_id.encode("ascii", "replace")):
        raise InvalidInputError(f"invalid {what} ID {tree_id!r}: expected 64 lowercase hex digits")
    return tree_id


def _utf8(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise InvalidInputError(f"commit {what} must be a str, got {type(value).__name__}")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInputError(f"commit {what} is not valid Unicode: {e}") from None
    if len(data) > _MAX_U32:
        raise InvalidInputError(f"commit {what} is longer than {_MAX_U32} bytes")
    return data


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit.  Construction validates every field (:class:`InvalidInputError`)."""

    metarange_id: str
    parents: tuple[str, ...]
    committer: str
    message: str
    created_at: int  # seconds since the Unix epoch
    metadata: Mapping[str, str] = field(default_factory=dict)
    generation: int = 1

    def __post_init__(self) -> None:
        check_tree_id(self.metarange_id)
        parents = tuple(self.parents)
        object.__setattr__(self, "parents", parents)
        if len(parents) > MAX_PARENTS:
            raise InvalidInputError(f"a commit has at most {MAX_PARENTS} parents, got {parents}")
        for p in parents:
            check_tree_id(p, "parent commit")
        if len(set(parents)) != len(parents):
            raise InvalidInputError(f"commit parents repeat: {parents}")
        for name in ("created_at", "generation"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_U63:
                raise InvalidInputError(
                    f"commit {name} must be an int in [0, 2**63), got {value!r}"
                )
        if parents and self.generation < 2:
            raise InvalidInputError(
                f"a commit with parents has generation >= 2, not {self.generation}"
            )
        if not parents and self.generation != 1:
            raise InvalidInputError(
                f"a commit without parents has generation 1, not {self.generation}"
            )
        metadata = dict(self.metadata)
        for k, v in metadata.items():
            _utf8(k, "metadata key")
            _utf8(v, f"metadata value of {k!r}")
        object.__setattr__(self, "metadata", metadata)
        _utf8(self.committer, "committer")
        _utf8(self.message, "message")

    def serialize(self) -> bytes:
        """The canonical bytes (module docstring); the stored object."""
        out = bytearray(MAGIC)
        out.append(VERSION)
        out += self.metarange_id.encode("ascii")
        out += U64.pack(self.generation)
        out += U64.pack(self.created_at)
        out.append(len(self.parents))
        for p in self.parents:
            out += p.encode("ascii")
        for text in (self.committer, self.message):
            data = text.encode("utf-8")
            out += U32.pack(len(data))
            out += data
        items = sorted((k.encode("utf-8"), v.encode("utf-8")) for k, v in self.metadata.items())
        out += U32.pack(len(items))
        for k, v in items:
            out += U32.pack(len(k))
            out += k
            out += U32.pack(len(v))
            out += v
        return bytes(out)

    @property
    def id(self) -> str:
        """SHA-256 (hex) of :meth:`serialize`."""
        return hashlib.sha256(self.serialize()).hexdigest()


@dataclass(frozen=True, slots=True)
class LogEntry:
    """A commit and its ID, as the log yields them."""

    id: str
    commit: Commit

    # Convenient pass-throughs of the commit's fields.
    @property
    def parents(self) -> tuple[str, ...]:
        return self.commit.parents

    @property
    def message(self) -> str:
        return self.commit.message

    @property
    def committer(self) -> str:
        return self.commit.committer

    @property
    def created_at(self) -> int:
        return self.commit.created_at

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.commit.metadata)

    @property
    def generation(self) -> int:
        return self.commit.generation

    @property
    def metarange_id(self) -> str:
        return self.commit.metarange_id


@dataclass(frozen=True, slots=True)
class MergeResult:
    """The outcome of a merge or revert.

    ``merged`` is False when there was nothing to merge (``commit_id`` is then the
    destination's unchanged base and ``commit`` is None).
    """

    commit_id: str
    commit: Commit | None
    merged: bool
    #: The three commits of the three-way merge.  Merge: the commit ``source`` named;
    #: the destination's base the merge started from; their nearest common ancestor
    #: (None: the histories share no commit).  Revert: the reverted commit's parent
    #: (``""`` when it has none: the empty tree); the branch's base the revert started
    #: from; the reverted commit.
    source: str
    destination: str
    merge_base: str | None
    conflicts_resolved: int = 0
    ranges_read: int = 0
    ranges_written: int = 0
    ranges_reused: int = 0
    attempts: int = 1


ChangeKind = Literal["added", "removed", "changed"]


@dataclass(frozen=True, slots=True)
class Change:
    """``key`` is in ``right`` only (added), in ``left`` only (removed), or in both with
    different identities (changed)."""

    key: bytes
    kind: ChangeKind
    left: Record | None
    right: Record | None


#: How a merge settles a conflicting key: the source's record or the destination's
#: (None: it does not; the merge raises MergeConflictError).
Strategy = Literal["source-wins", "dest-wins"]
STRATEGIES: tuple[Strategy | None, ...] = (None, "source-wins", "dest-wins")


# --- objects ---------------------------------------------------------------------------

PathType = Literal["object", "common_prefix"]


@dataclass(frozen=True, slots=True)
class ObjectStats:
    """One object (lakeFS's ``ObjectStats``), or a common prefix of a delimited listing
    (``path_type="common_prefix"``: only ``path`` is set)."""

    path: str
    path_type: PathType = "object"
    physical_address: str = ""  # full URI: s3://bucket/ns/data/..., file:///..., mem://...
    checksum: str = ""  # the ETag: MD5 hex of the contents for uploads
    size: int = 0
    mtime: int = 0  # seconds since the epoch
    content_type: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ObjectLink:
    """An object whose data is already on the store, for :meth:`Branch.link_many`."""

    path: str
    physical_address: str
    size: int
    checksum: str
    content_type: str | None = None
    metadata: Mapping[str, str] | None = None
    mtime: int | None = None


@dataclass(frozen=True, slots=True)
class ImportPath:
    """One source of an import (lakeFS's ``ImportLocation``): ``path`` an object-store
    URI, ``destination`` where it lands on the branch.  ``type`` ``"common_prefix"``:
    every object whose URI starts with ``path`` lands at ``destination`` + the rest of
    its URI, and the branch's objects under ``destination`` are replaced; ``"object"``:
    the one object ``path`` lands at the path ``destination``."""

    path: str
    destination: str
    type: str = "common_prefix"


@dataclass(frozen=True, slots=True)
class ImportStatus:
    """Where an import stands (lakeFS's ``ImportStatus``).  ``completed`` once its
    commit is on the branch (``commit_id``, ``commit``, ``metarange_id`` set); ``error``
    once it failed or was canceled (then it never commits); neither while it runs.
    ``ingested_objects``: objects listed so far; ``update_time``: seconds since the
    epoch of the last change of this status."""

    id: str
    completed: bool
    update_time: float
    ingested_objects: int
    metarange_id: str | None = None
    commit_id: str | None = None
    commit: Commit | None = None
    error: str | None = None

    @property
    def running(self) -> bool:
        return not self.completed and self.error is None


@dataclass(frozen=True, slots=True)
class BranchProtection:
    """A repository's branch protection rules (glob ``patterns`` over branch names) and
    the ``etag`` of this version, to replace them only if unchanged
    (docs/versioning.md, "Branch protection")."""

    patterns: tuple[str, ...]
    etag: str

    def protects(self, branch: str) -> bool:
        """Whether ``branch`` matches one of the patterns (``fnmatch``, case-sensitive)."""
        return any(fnmatch.fnmatchcase(branch, p) for p in self.patterns)


@dataclass(frozen=True, slots=True)
class ActionRun:
    """One run of the actions of an event (lakeFS's ``ActionRun``; docs/actions.md):
    ``passed`` is False when any of its hooks failed.  Times are seconds since the
    epoch (``end_time`` 0 when no hook ran)."""

    run_id: str
    event_type: str
    branch: str
    source_ref: str
    commit_id: str
    start_time: float
    end_time: float
    passed: bool

    @property
    def status(self) -> str:
        """lakeFS's ``status``: ``completed`` or ``failed``."""
        return "completed" if self.passed else "failed"


@dataclass(frozen=True, slots=True)
class HookRun:
    """One hook of a run (lakeFS's ``HookRun``): ``hook_run_id`` is
    ``<action index>_<hook index>`` (4 digits each); a hook skipped after an earlier
    failure of its action did not pass and has no times."""

    hook_run_id: str
    action: str
    hook_id: str
    start_time: float
    end_time: float
    passed: bool

    @property
    def status(self) -> str:
        return "completed" if self.passed else "failed"
