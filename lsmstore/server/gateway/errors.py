"""S3's error answers: ``<Error><Code>...`` with the status S3 gives each code, and the
mapping of every other exception onto one (the typed errors of
:mod:`lsmstore.error_types`, the server's :class:`~lsmstore.server.errors.ApiError`)."""

from __future__ import annotations

from lsmstore.errors import (
    ConflictError,
    EntryTooLargeError,
    InvalidInputError,
    ObjectExistsError,
    ObjectNotFoundError,
    PermissionDeniedError,
    PreconditionFailedError,
    RefNotFoundError,
    RepositoryNotFoundError,
    UnavailableError,
)
from lsmstore.server.errors import ApiError, message_of, status_of

#: The status of each code (S3's error code list).
STATUS: dict[str, int] = {
    "AccessDenied": 403,
    "AuthorizationHeaderMalformed": 400,
    "AuthorizationQueryParametersError": 400,
    "BadDigest": 400,
    "ConditionalRequestConflict": 409,
    "EntityTooLarge": 400,
    "EntityTooSmall": 400,
    "IncompleteBody": 400,
    "InternalError": 500,
    "InvalidAccessKeyId": 403,
    "InvalidArgument": 400,
    "InvalidDigest": 400,
    "InvalidPart": 400,
    "InvalidPartOrder": 400,
    "InvalidRange": 416,
    "InvalidRequest": 400,
    "MalformedXML": 400,
    "MethodNotAllowed": 405,
    "MissingContentLength": 411,
    "NoSuchBucket": 404,
    "NoSuchKey": 404,
    "NoSuchUpload": 404,
    "NotImplemented": 501,
    "PreconditionFailed": 412,
    "RequestTimeout": 400,
    "RequestTimeTooSkewed": 403,
    "ServiceUnavailable": 503,
    "SignatureDoesNotMatch": 403,
    "SlowDown": 503,
    "XAmzContentSHA256Mismatch": 400,
}


class S3Error(Exception):
    """An S3 error answer: its code, message and extra headers (status from the code)."""

    def __init__(self, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = STATUS[code]
        self.message = message
        self.headers = headers or {}


def s3_error_of(e: BaseException) -> S3Error:
    """The S3 error an exception answers as; unexpected ones are InternalError."""
    if isinstance(e, S3Error):
        return e
    msg = message_of(e)
    if isinstance(e, RepositoryNotFoundError):
        return S3Error("NoSuchBucket", msg)
    if isinstance(e, ObjectNotFoundError | RefNotFoundError):
        return S3Error("NoSuchKey", msg)
    if isinstance(e, ObjectExistsError | PreconditionFailedError):
        return S3Error("PreconditionFailed", msg)
    if isinstance(e, EntryTooLargeError):
        return S3Error("EntityTooLarge", msg)
    if isinstance(e, ConflictError):
        return S3Error("ConditionalRequestConflict", msg)
    if isinstance(e, PermissionDeniedError):
        return S3Error("AccessDenied", msg)
    if isinstance(e, InvalidInputError):
        return S3Error("InvalidArgument", msg)
    if isinstance(e, UnavailableError):
        return S3Error("ServiceUnavailable", msg)
    status = status_of(e)
    code = {
        401: "AccessDenied", 403: "AccessDenied", 404: "NoSuchKey", 408: "RequestTimeout",
        412: "PreconditionFailed", 413: "EntityTooLarge", 416: "InvalidRange",
        429: "SlowDown", 503: "ServiceUnavailable", 501: "NotImplemented",
    }.get(status)  # fmt: skip
    if code is None:
        code = "InvalidRequest" if 400 <= status < 500 else "InternalError"
    headers = e.headers if isinstance(e, ApiError) else {}
    return S3Error(code, msg, {k: v for k, v in headers.items() if k != "WWW-Authenticate"})


def not_implemented(what: str) -> S3Error:
    return S3Error("NotImplemented", f"{what} is not implemented by this server")
