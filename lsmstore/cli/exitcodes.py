"""Exit codes of the ``lsmstore`` command (docs/cli.md, "Exit codes").

A script can tell what went wrong without parsing messages: each error class of
:mod:`lsmstore.errors` maps to one code, the most specific class first.
"""

from __future__ import annotations

import enum

from lsmstore import errors


class ExitCode(enum.IntEnum):
    OK = 0
    #: An unexpected failure (a bug): the message says so; ``--debug`` shows the traceback.
    INTERNAL = 1
    #: Bad usage: unknown option, malformed URI, invalid name or input, bad configuration.
    USAGE = 2
    #: The repository, ref, object or workspace does not exist.
    NOT_FOUND = 3
    #: It already exists (repository, branch, tag, object with --if-absent, workspace).
    EXISTS = 4
    #: The branch moved under the operation (compare-and-swap lost after retries).
    CONFLICT = 5
    #: A merge (or revert) found conflicting changes; nothing was written.
    MERGE_CONFLICT = 6
    #: A commit found nothing to commit.
    NOTHING_TO_COMMIT = 7
    #: A backend or server is unreachable, timed out, or answered garbage.
    UNAVAILABLE = 8
    #: The server refused the credentials (remote only).
    PERMISSION = 9
    #: Stored data is damaged or in a format this version cannot read.
    CORRUPT = 10
    #: The capability is not available in this version (lakectl commands such as
    #: ``import --from``); nothing was changed.
    NOT_AVAILABLE = 11
    #: Interrupted (SIGINT / Ctrl-C).
    INTERRUPTED = 130


_BY_CLASS: tuple[tuple[type[BaseException], ExitCode], ...] = (
    (errors.MergeConflictError, ExitCode.MERGE_CONFLICT),
    (errors.NothingToCommitError, ExitCode.NOTHING_TO_COMMIT),
    (errors.AlreadyExistsError, ExitCode.EXISTS),
    (errors.ConflictError, ExitCode.CONFLICT),
    (errors.PreconditionFailedError, ExitCode.CONFLICT),
    (errors.CorruptFileError, ExitCode.CORRUPT),
    (errors.InvalidInputError, ExitCode.USAGE),
    (errors.NotFoundError, ExitCode.NOT_FOUND),
    (errors.ObjectNotFoundError, ExitCode.NOT_FOUND),
    (PermissionError, ExitCode.PERMISSION),
    (errors.UnavailableError, ExitCode.UNAVAILABLE),
    (errors.WriteStalledError, ExitCode.UNAVAILABLE),
    (errors.ClosedError, ExitCode.INTERNAL),
    (errors.NotAvailableError, ExitCode.NOT_AVAILABLE),
)


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit code of an error (INTERNAL for anything unexpected)."""
    if isinstance(exc, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    for cls, code in _BY_CLASS:
        if isinstance(exc, cls):
            return code
    return ExitCode.INTERNAL
