"""The compactor worker process: ``python -m compactor`` / ``lsmstore-compactor``.

It runs the compaction engine (:mod:`lsmstore.compaction`) over every repository and
branch and sweeps staging garbage; docs/compaction.md describes it.
"""
