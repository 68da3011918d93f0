"""Exit codes shared by every long-running lsmstore process (server, compactor, committer).

They are part of the operations contract (docs/operations.md): supervisors and cron
jobs may act on them, e.g. systemd's ``RestartPreventExitStatus=2`` stops a
crash-loop on a bad configuration.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    #: Stopped on request (SIGTERM/SIGINT), or a one-shot run (``--once``) that did
    #: all its work.
    OK = 0
    #: A one-shot run finished but some of its work failed (a job, a sweep, a commit).
    FAILED = 1
    #: Bad flags or configuration; retrying without a change cannot help.
    USAGE = 2
    #: A one-shot run could not reach a dependency (RefStore or object store);
    #: retrying later may help.  A long-running process never exits for this: it
    #: waits for the dependency and reports not-ready meanwhile.
    UNAVAILABLE = 3
    #: An unexpected internal error (a bug); the log holds the traceback.
    INTERNAL = 70
