"""Errors as lakeFS reports them: a status code and ``{"message": "..."}``.

:class:`ApiError` is raised by handlers for HTTP-level problems (bad query values,
oversized bodies, missing credentials); :func:`status_of` maps every
:class:`~lsmstore.errors.LsmError` to the status lakeFS gives the same condition
(``pkg/api/controller.go handleApiErrorCallback``), so clients that depend on exact
codes (409 "exists", 404 "not found", 412 precondition, 400 "nothing to commit") work.
Anything else is a bug: 500 with a generic message (the log carries the traceback).
"""

from __future__ import annotations

from lsmstore.errors import (
    AlreadyExistsError,
    ConflictError,
    CorruptFileError,
    InvalidInputError,
    LsmError,
    MergeConflictError,
    NotFoundError,
    NothingToCommitError,
    NotOwnerError,
    ObjectNotFoundError,
    PreconditionFailedError,
    UnavailableError,
    WriteStalledError,
)


class ApiError(Exception):
    """An error answer: ``status`` and the ``message`` of lakeFS's error body."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def not_found(message: str) -> ApiError:
    return ApiError(404, message)


# Order matters: subclasses before their bases.
_STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (MergeConflictError, 409),
    (PreconditionFailedError, 412),
    (AlreadyExistsError, 409),
    (ConflictError, 409),
    (NotOwnerError, 409),
    (ObjectNotFoundError, 404),
    (NotFoundError, 404),
    (NothingToCommitError, 400),
    (CorruptFileError, 400),  # a client-supplied file (staged SST) that fails validation
    (InvalidInputError, 400),
    (WriteStalledError, 503),
    (UnavailableError, 503),
)


def status_of(exc: BaseException) -> int:
    """The HTTP status for ``exc`` (500 for anything that is not an expected error)."""
    if isinstance(exc, ApiError):
        return exc.status
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 500


def message_of(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return exc.message
    if isinstance(exc, LsmError) and status_of(exc) != 500:
        return str(exc) or type(exc).__name__
    return "internal error"
