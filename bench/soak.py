"""``python -m bench soak [--minutes N] [--seed S] [--writers W] [--json FILE]``: the fault
soak (:mod:`lsmstore.testing.soak`) for as long as asked; prints what it did (kills,
Redis restarts, S3 faults, acknowledged writes) and what the history checker found
(lost writes, resurrected deletes, other violations).  Exit status 1 when it found any.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from lsmstore.testing.soak import SoakOptions, run_soak


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench soak")
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--writers", type=int, default=3)
    p.add_argument("--chaos-every", type=float, default=3.0, help="mean seconds between events")
    p.add_argument("--json", help="also write the report here")
    p.add_argument("--quiet", action="store_true", help="no line per chaos event")
    p.add_argument("--workdir", help="keep the processes' logs here (default: a temporary one)")
    args = p.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="lsm-soak-") as tmp:
        work = args.workdir or tmp
        opts = SoakOptions(
            workdir=Path(work),
            seed=args.seed,
            duration_s=args.minutes * 60,
            writers=args.writers,
            chaos_every_s=args.chaos_every,
            log=(lambda line: None) if args.quiet else (lambda line: print(line, flush=True)),
        )
        report = uvloop.run(run_soak(opts))
    doc = {
        "started": started,
        "nproc": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
        "command": "python -m bench soak " + " ".join(argv),
        **report.to_dict(),
    }
    print(json.dumps(doc, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    bad = report.lost or report.resurrected or report.violations
    print(
        f"soak seed {report.seed}: {report.total_kills} kills, {report.redis_restarts} Redis "
        f"restarts, {report.s3_storms} S3 fault storms, {report.acknowledged_writes} "
        f"acknowledged writes, {report.lost} lost, {report.resurrected} resurrected, "
        f"{len(report.violations)} violations",
        file=sys.stderr,
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
