"""A short run of the fault soak (lsmstore/testing/soak.py; long runs: ``python -m bench
soak --minutes N``): three writer processes on one branch, a compactor and a committer,
kill -9 of each at random times and at named steps, Redis (AOF) restarted and killed
mid-load, S3 faults from a proxy on loopback.  Every acknowledged write must be readable
through the branch, the listing and the committed head; no delete may come back; the
workers must never crash and must exit 0 on SIGTERM."""

from __future__ import annotations

from pathlib import Path

from lsmstore.testing.soak import SoakOptions, run_soak


async def test_short_fault_soak(tmp_path: Path) -> None:
    lines: list[str] = []
    report = await run_soak(
        SoakOptions(workdir=tmp_path, seed=1, duration_s=75, chaos_every_s=3, log=lines.append)
    )
    summary = report.to_dict()
    assert report.violations == [], summary
    assert (report.lost, report.resurrected) == (0, 0), summary
    # it did what a soak must do (the first events are one of each kind, in seeded order)
    assert report.acknowledged_writes > 0 and report.keys_checked > 0, summary
    assert report.kills["writer"] >= 1 and report.kills["redis"] >= 1, summary
    assert report.kills["compactor"] >= 1 and report.kills["committer"] >= 1, summary
    assert report.redis_restarts >= 2 and report.s3_storms >= 1, summary
    assert report.proxy["forward"] > 0 and sum(report.proxy.values()) > report.proxy["forward"]
    # the history holds every kind of operation, acknowledged
    for kind in ("put", "overwrite", "put_many", "delete", "stage_sst"):
        assert report.history[f"{kind}_ack"] > 0, (kind, summary)
