"""The compactor: merges a branch's L1 files into non-overlapping L2 files with a
compare-and-swap, and collects the staging files that left a ref.

Runs as a worker process (``python -m compactor`` / ``lsmstore-compactor``) or inside
a client process (:class:`BackgroundCompactor`).  docs/compaction.md describes both.
"""

from compactor.garbage import Sweeper, SweepResult, record_garbage
from compactor.inprocess import BackgroundCompactor
from compactor.job import CompactionJob, JobResult
from compactor.policy import Policy, file_time
from compactor.runner import Compactor
from compactor.worker import Worker

__all__ = [
    "BackgroundCompactor",
    "CompactionJob",
    "Compactor",
    "JobResult",
    "Policy",
    "SweepResult",
    "Sweeper",
    "Worker",
    "file_time",
    "record_garbage",
]
