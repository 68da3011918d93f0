"""The committer worker process: ``python -m committer`` / ``lsmstore-committer``.

It commits branches' staged changes by policy with the commit job
(:mod:`lsmstore.commit.job`); docs/versioning.md describes the flow, its crash table and
the worker's policy.
"""
