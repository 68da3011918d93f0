"""One logging set-up for every lsmstore process: one JSON object per line on stderr.

Every line carries ``ts`` (UTC, ISO 8601, milliseconds), ``level``, ``service``,
``logger``, ``msg``, ``request_id`` when the line was logged inside
:func:`request_context`, and the ``extra={"fields": {...}}`` of the call (an
``event`` name and its data).  ``--log-format text`` gives one readable line per record
instead, for a terminal.

The request id is a :mod:`contextvars` variable: it follows an asyncio task and the
tasks it creates, so everything logged on behalf of one HTTP request, one compaction job
or one commit shares it.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import logging
import secrets
import sys
from collections.abc import Iterator
from typing import Any, TextIO

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "lsmstore_request_id", default=None
)


def new_request_id() -> str:
    """A fresh request id: 16 hex digits."""
    return secrets.token_hex(8)


def current_request_id() -> str | None:
    return _request_id.get()


class request_context:
    """Log lines inside carry ``request_id`` (a new one unless given).  A plain class,
    not a ``contextmanager`` generator: the server enters one per request."""

    __slots__ = ("_rid", "_token")

    def __init__(self, request_id: str | None = None) -> None:
        self._rid = request_id or new_request_id()

    def __enter__(self) -> str:
        self._token = _request_id.set(self._rid)
        return self._rid

    def __exit__(self, *exc: object) -> None:
        _request_id.reset(self._token)


def _timestamp(created: float) -> str:
    return datetime.datetime.fromtimestamp(created, datetime.UTC).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring)."""

    def __init__(self, service: str = "") -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {"ts": _timestamp(record.created), "level": record.levelname.lower()}
        if self.service:
            doc["service"] = self.service
        doc["logger"] = record.name
        doc["msg"] = record.getMessage()
        rid = getattr(record, "request_id", None) or _request_id.get()
        if rid:
            doc["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``ts level logger [request_id] msg key=value ...`` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record.created), record.levelname.lower(), record.name]
        rid = getattr(record, "request_id", None) or _request_id.get()
        if rid:
            parts.append(f"[{rid}]")
        parts.append(record.getMessage())
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            parts.extend(f"{k}={json.dumps(v, default=str)}" for k, v in fields.items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(
    level: str = "info",
    fmt: str = "json",
    *,
    service: str = "",
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send every log record to ``stream`` (default stderr) in ``fmt``; replaces the root
    logger's handlers.  Returns the handler."""
    if level.lower() not in LOG_LEVELS:
        raise ValueError(f"log level {level!r}: expected one of {LOG_LEVELS}")
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {LOG_FORMATS}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(service) if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party libraries' chatter (botocore, asyncio debug) only at warning and up.
    for noisy in ("botocore", "aiobotocore", "urllib3", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    return handler


def log_event(
    logger: logging.Logger,
    event: str,
    msg: str | None = None,
    *,
    level: int = logging.INFO,
    **fields: Any,
) -> None:
    """Log ``msg`` (default: ``event``) with ``{"event": event, **fields}``."""
    logger.log(level, msg or event, extra={"fields": {"event": event, **fields}})


class EventCapture(logging.Handler):
    """Collects the ``fields`` of records (with ``level`` and ``msg``) in ``docs``; for
    tests and tools that read a process's events in process."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.docs: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "fields", None)
        doc: dict[str, Any] = {"level": record.levelname.lower(), "msg": record.getMessage()}
        rid = getattr(record, "request_id", None) or _request_id.get()
        if rid:
            doc["request_id"] = rid
        if isinstance(fields, dict):
            doc.update(fields)
        self.docs.append(doc)

    def events(self, event: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d.get("event") == event]


@contextlib.contextmanager
def capture_events(logger: str = "") -> Iterator[EventCapture]:
    """Attach an :class:`EventCapture` to ``logger`` (default root) for the duration."""
    handler = EventCapture()
    lg = logging.getLogger(logger)
    old = lg.level
    lg.addHandler(handler)
    if lg.level == logging.NOTSET or lg.level > logging.INFO:
        lg.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        lg.removeHandler(handler)
        lg.setLevel(old)
