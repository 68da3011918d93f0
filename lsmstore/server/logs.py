"""Logging, flags and exit codes the server shares with the workers.

These re-export :mod:`lsmstore.service` (one set-up for every long-running process).
"""

from __future__ import annotations

import argparse
import enum
import json
import logging
import sys
import time
from typing import Any


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    UNAVAILABLE = 3
    INTERNAL = 70


def add_common_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML configuration file (else $LSMSTORE_CONFIG)")
    p.add_argument("--refstore", help="RefStore URL (local:///dir, redis://..., dynamodb://...)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument("--log-format", default="json", choices=("json", "text"))


class _Json(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def configure_logging(level: str, fmt: str, *, service: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Json(service) if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s"))  # fmt: skip
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
