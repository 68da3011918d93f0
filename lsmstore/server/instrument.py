"""Latency and error metrics of the RefStore and object-store calls the server makes.

:class:`Timed` stands in front of a RefStore or an ObjectStore: every coroutine method
called through it is timed into ``lsmstore_backend_seconds{backend, call}``, and
failures other than the expected "not found"/"exists"/"conflict" answers count in
``lsmstore_backend_errors_total``.  Everything else passes straight through.
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import Any

from lsmstore.errors import AlreadyExistsError, ConflictError, NotFoundError, ObjectNotFoundError
from lsmstore.server.metrics import Metrics

_EXPECTED = (NotFoundError, ObjectNotFoundError, AlreadyExistsError, ConflictError)


class Timed:
    def __init__(self, inner: Any, backend: str, metrics: Metrics) -> None:
        self._inner = inner
        self._backend = backend
        self._metrics = metrics
        url = getattr(inner, "url", None)
        if isinstance(url, str):  # fixed at construction; read on every cache lookup
            self.url = url

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr
        if not inspect.iscoroutinefunction(attr):
            setattr(self, name, attr)  # a plain method: later lookups skip __getattr__
            return attr
        seconds = self._metrics.backend_seconds.labels(self._backend, name)
        errors = self._metrics.backend_errors.labels(self._backend, name)

        @functools.wraps(attr)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await getattr(self._inner, name)(*args, **kwargs)
            except _EXPECTED:
                raise
            except Exception:
                errors.inc()
                raise
            finally:
                seconds.observe(time.perf_counter() - started)

        setattr(self, name, timed)  # later lookups skip __getattr__
        return timed
