"""The wire form of every :class:`~lsmstore.errors.LsmError`: the HTTP status the server
answers it with and the type name its error body carries, one table for both.

An error body is lakeFS's ``{"message": "..."}`` plus ``"type"``: the name of the
error's class in :mod:`lsmstore.errors` (``"ObjectExistsError"``, ``"RefNotFoundError"``
...).  lakeFS's own clients read ``message`` and ignore the extra field; the remote
client turns ``type`` back into the same class (:func:`error_from`), so a message is
for people only and rewording it changes nothing a program sees.  The statuses are
those lakeFS gives the same conditions (``pkg/api/controller.go``): 409 "exists", 404
"not found", 412 precondition (a create-only write), 400 "nothing to commit".
"""

from __future__ import annotations

from collections.abc import Callable

from lsmstore import errors as _errors
from lsmstore.errors import (
    AlreadyExistsError,
    ConflictError,
    CorruptFileError,
    EntryTooLargeError,
    InvalidInputError,
    LsmError,
    MergeConflictError,
    NotFoundError,
    NothingToCommitError,
    NotOwnerError,
    ObjectExistsError,
    ObjectNotFoundError,
    PermissionDeniedError,
    PreconditionFailedError,
    UnavailableError,
    WriteStalledError,
)

#: The status of each kind of error; subclasses come before their bases (the first
#: match wins).  Anything not here is a bug: 500.
STATUS: tuple[tuple[type[LsmError], int], ...] = (
    (MergeConflictError, 409),
    (ObjectExistsError, 412),  # a create-only write (lakeFS's If-None-Match: *)
    (PreconditionFailedError, 412),
    (AlreadyExistsError, 409),  # NamespaceInUseError too
    (ConflictError, 409),
    (NotOwnerError, 409),
    (ObjectNotFoundError, 404),
    (NotFoundError, 404),
    (NothingToCommitError, 400),
    (EntryTooLargeError, 413),
    (CorruptFileError, 400),  # a client-supplied file (staged SST) that fails validation
    (InvalidInputError, 400),
    (PermissionDeniedError, 403),
    (WriteStalledError, 503),
    (UnavailableError, 503),
)

#: The type name of a status when the error is not an LsmError (an HTTP-level refusal).
TYPE_OF_STATUS = {
    400: "InvalidInputError",
    401: "PermissionDeniedError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "InvalidInputError",
    408: "UnavailableError",
    409: "ConflictError",
    412: "PreconditionFailedError",
    413: "EntryTooLargeError",
    416: "InvalidInputError",
    429: "UnavailableError",
    501: "InvalidInputError",
    503: "UnavailableError",
}

#: Every public error class by name.
CLASSES: dict[str, type[LsmError]] = {
    name: cls
    for name, cls in vars(_errors).items()
    if isinstance(cls, type) and issubclass(cls, LsmError)
}


def status_of(exc: BaseException) -> int:
    """The HTTP status of ``exc`` (500 for anything that is not an expected error)."""
    if isinstance(exc, PermissionDeniedError):
        return exc.status
    for kind, status in STATUS:
        if isinstance(exc, kind):
            return status
    return 500


def type_of(exc: BaseException) -> str:
    """The type name ``exc`` is sent as: its class's name when that is a public error
    class, else the nearest public base's (``"LsmError"`` for none)."""
    for cls in type(exc).__mro__:
        if CLASSES.get(cls.__name__) is cls:
            return cls.__name__
    return "LsmError"


def _plain(cls: type[LsmError]) -> Callable[[str, str], LsmError]:
    return lambda message, what: cls(message)


#: How a class whose constructor takes more than a message is rebuilt from
#: ``(message, what)`` (``what``: the path or name the request was about).
_BUILDERS: dict[type[LsmError], Callable[[str, str], LsmError]] = {
    ObjectNotFoundError: lambda m, what: ObjectNotFoundError(what, m),
    ObjectExistsError: lambda m, what: ObjectExistsError(what),
    MergeConflictError: lambda m, what: MergeConflictError(m, []),
    _errors.AmbiguousRefError: lambda m, what: _errors.AmbiguousRefError(m, []),
    CorruptFileError: lambda m, what: CorruptFileError(what or "file", m),
    _errors.UnsupportedFormatError: lambda m, what: _errors.UnsupportedFormatError(
        what or "file", m
    ),
}


def error_from(
    type_name: str, message: str, *, status: int, what: str = "", outcome_unknown: bool = False
) -> LsmError | None:
    """The error a body of type ``type_name`` stands for (None: a name this client does
    not know, e.g. from a newer server -- the caller falls back to the status).
    ``outcome_unknown`` is set on an UnavailableError (a write whose effect is unknown)."""
    cls = CLASSES.get(type_name)
    if cls is None:
        return None
    if issubclass(cls, PermissionDeniedError):
        return cls(message, status=status)
    if issubclass(cls, UnavailableError):
        return cls(message, outcome_unknown=outcome_unknown)
    build = _BUILDERS.get(cls) or _plain(cls)
    try:
        return build(message, what)
    except TypeError:  # a constructor this table does not know
        return None
