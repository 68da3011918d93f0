"""What every long-running lsmstore process shares (docs/operations.md): JSON-lines
logging with a request id, common flags, signal handling, exit codes, backoff with
jitter for dependency outages, and readiness reporting (health port, status file)."""

from lsmstore.service.backoff import Backoff
from lsmstore.service.exitcodes import ExitCode
from lsmstore.service.flags import add_common_flags, add_worker_flags
from lsmstore.service.logs import (
    EventCapture,
    JsonFormatter,
    capture_events,
    configure_logging,
    current_request_id,
    log_event,
    new_request_id,
    request_context,
)
from lsmstore.service.readiness import HealthServer, Readiness, StatusFile
from lsmstore.service.runtime import Service, run_service
from lsmstore.service.signals import Shutdown

__all__ = [
    "Backoff",
    "EventCapture",
    "ExitCode",
    "HealthServer",
    "JsonFormatter",
    "Readiness",
    "Service",
    "Shutdown",
    "StatusFile",
    "add_common_flags",
    "add_worker_flags",
    "capture_events",
    "configure_logging",
    "current_request_id",
    "log_event",
    "new_request_id",
    "request_context",
    "run_service",
]
