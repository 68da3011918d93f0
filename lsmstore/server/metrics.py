"""Prometheus metrics of the server (``GET /metrics``), one registry per server.

Per operation (lakeFS operationId) and status: request count and latency histogram;
writes in flight; batch sizes of the batch endpoint; per branch the L1/L2 lengths seen
by this process's writers; RefStore and object-store call latency and errors as the
store's wrappers report them; flush latency and bytes pending of the branch writers.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
_SIZE_BUCKETS = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class RequestMetrics(Collector):
    """``lsmstore_http_requests_total{operation,status}`` and the histogram
    ``lsmstore_http_request_seconds{operation}``, counted in plain integers by the
    event loop's thread (the only one answering requests) and turned into metric
    families when rendered: prometheus_client's children take a lock for each
    increment, two or three microseconds of every request."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self._bounds = buckets
        self._labels = (*map(floatToGoString, buckets), "+Inf")
        #: (operation, status) -> requests answered
        self._counts: dict[tuple[str, int], int] = {}
        #: operation -> requests per bucket (the last one: above every bound), and the
        #: sum of the seconds in a list of its own
        self._buckets: dict[str, tuple[list[int], list[float]]] = {}

    def observe(self, operation: str, status: int, seconds: float) -> None:
        key = (operation, status)
        counts = self._counts
        counts[key] = counts.get(key, 0) + 1
        hist = self._buckets.get(operation)
        if hist is None:
            hist = self._buckets[operation] = ([0] * (len(self._bounds) + 1), [0.0])
        hist[0][bisect_left(self._bounds, seconds)] += 1  # le: the bound included
        hist[1][0] += seconds

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "lsmstore_http_requests", "HTTP requests answered", labels=["operation", "status"]
        )
        for (operation, status), n in list(self._counts.items()):
            requests.add_metric([operation, str(status)], n)
        yield requests
        latency = HistogramMetricFamily(
            "lsmstore_http_request_seconds",
            "HTTP request latency, from the request line to the last body byte sent",
            labels=["operation"],
        )
        for operation, (per_bucket, total) in list(self._buckets.items()):
            cumulative, running = [], 0
            for bound, n in zip(self._labels, per_bucket, strict=True):
                running += n
                cumulative.append((bound, float(running)))
            latency.add_metric([operation], cumulative, total[0])
        yield latency


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = RequestMetrics(LATENCY_BUCKETS)
        r.register(self.requests)
        self.in_flight = Gauge(
            "lsmstore_http_requests_in_flight", "HTTP requests being handled", registry=r
        )
        self.writes_in_flight = Gauge(
            "lsmstore_writes_in_flight",
            "write requests waiting for their acknowledgement",
            registry=r,
        )
        self.batch_records = Histogram(
            "lsmstore_batch_records",
            "entries per batch-endpoint request",
            buckets=_SIZE_BUCKETS,
            registry=r,
        )
        self.flush_seconds = Histogram(
            "lsmstore_write_ack_seconds",
            "time from a write request's body being read to its acknowledgement (flush + append)",
            ["operation"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.l1_files = Gauge(
            "lsmstore_branch_l1_files",
            "L1 files of a branch as last seen",
            ["repository", "branch"],
            registry=r,
        )
        self.l2_files = Gauge(
            "lsmstore_branch_l2_files",
            "L2 files of a branch as last seen",
            ["repository", "branch"],
            registry=r,
        )
        self.pending_bytes = Gauge(
            "lsmstore_writer_pending_bytes",
            "bytes accepted by branch writers and not yet acknowledged",
            registry=r,
        )
        self.writers = Gauge(
            "lsmstore_branch_writers",
            "branch writers open in this process, closing ones included (docs/security.md)",
            registry=r,
        )
        self.views = Gauge(
            "lsmstore_branch_views", "branch views cached in this process", registry=r
        )
        self.backend_seconds = Histogram(
            "lsmstore_backend_seconds",
            "RefStore and object-store call latency",
            ["backend", "call"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.backend_errors = Counter(
            "lsmstore_backend_errors", "RefStore and object-store call errors", ["backend", "call"],
            registry=r,
        )  # fmt: skip
        self.draining = Gauge("lsmstore_server_draining", "1 while the server drains", registry=r)
        self.connections_refused = Counter(
            "lsmstore_http_connections_refused",
            "Connections answered and closed outside a request (docs/security.md, Limits)",
            ["reason"], registry=r,
        )  # fmt: skip

        self.forwarded = Counter(
            "lsmstore_forwarded_writes",
            "Writes for a branch another daemon owns (docs/server.md, Forwarding writes): "
            "forwarded (answered by the owner), fallback (owner unreachable: applied here), "
            "received (applied here for another daemon), redirected (answered 307)",
            ["outcome"], registry=r,
        )  # fmt: skip

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def on_append(self, repo: str, branch: str, ref: Any) -> None:
        """An append listener of the Store: the branch's L1/L2 lengths after it."""
        self.l1_files.labels(repo, branch).set(len(ref.l1))
        self.l2_files.labels(repo, branch).set(len(ref.l2))

    def collect(self, store: Any) -> None:
        """Refresh the gauges read from the store's writers (called before rendering)."""
        writers = getattr(store, "_writers", {})
        self.pending_bytes.set(sum(getattr(w, "_pending_bytes", 0) for w in list(writers.values())))
        self.writers.set(len(writers) + len(getattr(store, "_retiring", ())))
        self.views.set(len(getattr(store, "_views", ())))
