"""Every exception lsmstore raises.

All inherit :class:`LsmError`; public ones also inherit the builtin a caller would
naturally catch (``KeyError`` for missing keys and refs, ``FileNotFoundError`` for
missing objects, ``ValueError`` for bad input, ``ConnectionError`` for unreachable
backends, ``TimeoutError`` for stalls).  Messages name the thing at fault.
"""

from __future__ import annotations

from typing import Any


class LsmError(Exception):
    """Base of every lsmstore error."""


# --- bad input -------------------------------------------------------------------


class InvalidInputError(LsmError, ValueError):
    """The caller passed something the service cannot accept; nothing was changed."""


class InvalidNameError(InvalidInputError):
    """A repository, branch, tag or object name breaks the naming rules."""


class ImportSourceNotAllowedError(InvalidInputError):
    """An import source outside the repository's namespace, its allowed external
    prefixes and the server's ``server_import_sources``, or one that reaches into a
    repository's namespace (400)."""


class EntryTooLargeError(InvalidInputError):
    """A value or a record is too large for its bound or for a backend."""


class InvalidKeyError(InvalidInputError):
    """A key is not one: not str/bytes, not valid Unicode, empty, or longer than the
    configured bound.  Raised the same way by reads and writes; the message shows a
    bounded prefix of the key."""


class InvalidRefExpressionError(InvalidInputError):
    """A ref expression (``main~2^2``, a commit prefix, ...) cannot be parsed."""


class AmbiguousRefError(InvalidRefExpressionError):
    """A commit-ID prefix matches more than one commit; ``matches`` lists some of them."""

    def __init__(self, message: str, matches: list[str]) -> None:
        super().__init__(message)
        self.matches = matches


class InvalidURLError(InvalidInputError):
    """A store or RefStore URL is malformed or names an unknown scheme."""


class InvalidActionError(InvalidInputError):
    """An action file (``_lakefs_actions/*.yaml``) is not a valid action; the message
    names the file (docs/actions.md)."""


# --- not found -------------------------------------------------------------------


class NotFoundError(LsmError, KeyError):
    """A key, ref, repository or commit does not exist."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else self.__class__.__name__


class RepositoryNotFoundError(NotFoundError):
    pass


class RefNotFoundError(NotFoundError):
    """A branch, tag or commit named by a ref expression does not exist."""


class WorkspaceNotFoundError(NotFoundError):
    """A workspace (saved staging changes of a branch) does not exist."""


class ImportNotFoundError(NotFoundError):
    """No import of that id on that branch (``Branch.import_status``)."""


class RecordNotFoundError(NotFoundError):
    """A small record (credentials, settings) does not exist."""


class ObjectNotFoundError(LsmError, FileNotFoundError):
    """An object-store key does not exist (or was garbage-collected)."""

    def __init__(self, key: str, message: str | None = None) -> None:
        super().__init__(message or f"object not found: {key}")
        self.key = key

    def __str__(self) -> str:
        return str(self.args[0])


# --- exists / conditions ---------------------------------------------------------


class AlreadyExistsError(LsmError):
    """Create-if-absent found something already there."""


class ObjectExistsError(AlreadyExistsError, FileExistsError):
    """A put in create mode found the object key already present."""

    def __init__(self, key: str) -> None:
        super().__init__(f"object already exists: {key}")
        self.key = key

    def __str__(self) -> str:
        return str(self.args[0])


class RefExistsError(AlreadyExistsError, ValueError):
    """A repository, branch or tag with that name already exists."""


class NamespaceInUseError(AlreadyExistsError, ValueError):
    """A storage namespace equals, lies inside or contains another repository's, or
    holds another owner's ownership marker (docs/security.md, "Namespaces, ownership
    and deletion")."""


class NotOwnerError(LsmError):
    """A storage namespace's ownership marker does not name this repository: a process
    about to delete files in it deletes nothing."""


class WorkspaceExistsError(AlreadyExistsError, ValueError):
    """A workspace with that name already exists in the repository."""


class RecordExistsError(AlreadyExistsError, ValueError):
    """A small record was put with ``if_absent`` and one of that name exists."""


class PreconditionFailedError(LsmError):
    """An if-match put or delete found a different version of the object."""


class HookFailedError(PreconditionFailedError):
    """A pre-event hook (docs/actions.md) failed, or the action files could not be
    loaded: the operation was aborted and nothing was written (412, as lakeFS).
    ``run_id`` names the recorded run ("" when no run was recorded, and from a remote
    client, where the message names it as lakeFS's does)."""

    def __init__(self, message: str, run_id: str = "") -> None:
        super().__init__(message)
        self.run_id = run_id


class ConflictError(LsmError):
    """A compare-and-swap condition failed. ``found`` is the value the store held."""

    def __init__(self, message: str, found: Any = None) -> None:
        super().__init__(message)
        self.found = found


class MergeConflictError(ConflictError):
    """A three-way merge found keys changed differently on both sides."""

    def __init__(self, message: str, keys: list[bytes]) -> None:
        super().__init__(message)
        self.keys = keys


class NothingToCommitError(LsmError):
    """A commit found no staged changes and empty commits were not allowed."""


# --- environment -----------------------------------------------------------------


class UnavailableError(LsmError, ConnectionError):
    """A backend could not be reached or timed out.

    ``outcome_unknown`` is True when a mutating request may or may not have been
    applied (the caller cannot tell, e.g. a timeout after the request was sent).
    """

    def __init__(self, message: str, *, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class CorruptFileError(LsmError, ValueError):
    """A stored file is truncated, fails its checksum, or is not what it claims."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


class UnsupportedFormatError(CorruptFileError):
    """A file is well formed but uses settings this reader does not implement."""


class WriteStalledError(LsmError, TimeoutError):
    """A write waited past its timeout for compaction/commit to relieve backpressure."""


class ClosedError(LsmError, RuntimeError):
    """The object was used after ``aclose()``."""


class PermissionDeniedError(LsmError, PermissionError):
    """A server refused the credentials (``status`` 401) or the action (403)."""

    def __init__(self, message: str, *, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


class ProtectedBranchError(PermissionDeniedError):
    """The branch matches a branch protection rule: it refuses staging writes, commits,
    resets and deletion (403); merges into it are accepted."""


class NotAvailableError(LsmError):
    """The operation exists in lakeFS (and its command line parses) but this version
    of the store does not offer the capability: nothing was changed."""
