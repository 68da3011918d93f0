"""/metrics: request counts and latency per operation and status, write and batch
metrics, backend latency, draining gauge -- as a real server exposes them."""

from __future__ import annotations

import httpx
from helpers.server import make_repo
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lsmstore.server.metrics import LATENCY_BUCKETS, RequestMetrics
from lsmstore.testing.server_process import ServerProcess


def _samples(server: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = httpx.get(server.url + "/metrics", auth=server.admin)
    assert r.status_code == 200
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_what_happened(server: ServerProcess, admin: httpx.Client) -> None:
    repo = make_repo(admin)
    for i in range(3):
        r = admin.post(f"/repositories/{repo}/branches/main/objects", params={"path": f"m{i}"},
                       content=b"x")  # fmt: skip
        assert r.status_code == 201
    assert admin.get(f"/repositories/{repo}/branches/nope").status_code == 404
    batch = admin.post(f"/lsm/repositories/{repo}/branches/main/batch",
                       json=[["delete", "m0"], ["delete", "m1"]])  # fmt: skip
    assert batch.status_code == 200
    m = _samples(server)
    ok = (("operation", "uploadObject"), ("status", "201"))
    assert m[("lsmstore_http_requests_total", ok)] >= 3
    missing = (("operation", "getBranch"), ("status", "404"))
    assert m[("lsmstore_http_requests_total", missing)] >= 1
    hist = (("le", "+Inf"), ("operation", "uploadObject"))
    assert m[("lsmstore_http_request_seconds_bucket", hist)] >= 3
    assert m[("lsmstore_batch_records_count", ())] >= 1
    assert m[("lsmstore_batch_records_sum", ())] >= 2
    assert m[("lsmstore_write_ack_seconds_count", (("operation", "uploadObject"),))] >= 3
    assert m[("lsmstore_writes_in_flight", ())] == 0
    assert m[("lsmstore_server_draining", ())] == 0
    l1 = [v for (name, labels), v in m.items()
          if name == "lsmstore_branch_l1_files" and ("repository", repo) in labels]  # fmt: skip
    assert l1, "no L1 gauge for the branch written"
    refstore_calls = [v for (name, labels), v in m.items()
                      if name == "lsmstore_backend_seconds_count"
                      and ("backend", "refstore") in labels]  # fmt: skip
    object_calls = [v for (name, labels), v in m.items()
                    if name == "lsmstore_backend_seconds_count"
                    and ("backend", "objects") in labels]  # fmt: skip
    assert sum(refstore_calls) > 0 and sum(object_calls) > 0


def test_request_metrics_render_as_prometheus_client_would() -> None:
    """The server's lock-free request counts render the samples a prometheus_client
    Counter and Histogram fed the same requests render (bounds inclusive)."""
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = RequestMetrics(LATENCY_BUCKETS)
    ours.register(fast)
    count = Counter("lsmstore_http_requests", "HTTP requests answered", ["operation", "status"],
                    registry=theirs)  # fmt: skip
    hist = Histogram("lsmstore_http_request_seconds", "x", ["operation"],
                     buckets=LATENCY_BUCKETS, registry=theirs)  # fmt: skip
    seen = [("statObject", 200, 0.0001), ("statObject", 200, 0.001), ("statObject", 404, 0.5),
            ("uploadObject", 201, 30.0), ("uploadObject", 201, 0.0025),
            ("statObject", 200, 10.0)]  # fmt: skip
    for operation, status, seconds in seen:
        fast.observe(operation, status, seconds)
        count.labels(operation, str(status)).inc()
        hist.labels(operation).observe(seconds)

    def samples(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
        text = generate_latest(registry).decode()
        return {(s.name, tuple(sorted(s.labels.items())), s.value)
                for family in text_string_to_metric_families(text) for s in family.samples
                if not s.name.endswith("_created")}  # fmt: skip

    assert samples(ours) == samples(theirs)
    assert ("lsmstore_http_request_seconds_bucket",
            (("le", "0.001"), ("operation", "statObject")), 2.0) in samples(ours)  # fmt: skip
