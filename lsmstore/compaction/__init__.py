"""Compaction: merges a branch's L1 files into non-overlapping L2 files with a
compare-and-swap (docs/compaction.md).

The policy (:mod:`~lsmstore.compaction.policy`), the merge plan and its process
(:mod:`~lsmstore.compaction.merge_plan`, :mod:`~lsmstore.compaction.merge_worker`), one
job (:mod:`~lsmstore.compaction.job`), the engine that runs jobs for a branch
(:mod:`~lsmstore.compaction.runner`) and compaction inside a client process
(:mod:`~lsmstore.compaction.inprocess`).  The worker process (``python -m compactor``)
runs the same engine over every branch.
"""
