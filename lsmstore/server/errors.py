"""Errors as lakeFS reports them: a status code and ``{"message": "..."}``, plus the
machine-readable ``"type"`` (:mod:`lsmstore.error_types`, which also picks the status).

:class:`ApiError` is raised by handlers for HTTP-level problems (bad query values,
oversized bodies, missing credentials); every :class:`~lsmstore.errors.LsmError` gets
the status lakeFS gives the same condition (``pkg/api/controller.go
handleApiErrorCallback``), so clients that depend on exact codes work.  Anything else
is a bug: 500 with a generic message (the log carries the traceback).
"""

from __future__ import annotations

from lsmstore import error_types
from lsmstore.errors import LsmError


class ApiError(Exception):
    """An error answer: ``status``, the ``message`` of lakeFS's error body and its
    ``kind`` (the body's ``type``; by default the one of the status)."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
        *,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.kind = kind or error_types.TYPE_OF_STATUS.get(status, "LsmError")


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def not_found(message: str) -> ApiError:
    return ApiError(404, message)


def status_of(exc: BaseException) -> int:
    """The HTTP status for ``exc`` (500 for anything that is not an expected error)."""
    if isinstance(exc, ApiError):
        return exc.status
    return error_types.status_of(exc)


def type_of(exc: BaseException) -> str:
    """The ``type`` of the error body for ``exc``."""
    if isinstance(exc, ApiError):
        return exc.kind
    return error_types.type_of(exc) if status_of(exc) != 500 else "LsmError"


def message_of(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return exc.message
    if isinstance(exc, LsmError) and status_of(exc) != 500:
        return str(exc) or type(exc).__name__
    return "internal error"
