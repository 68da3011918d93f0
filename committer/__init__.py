"""The committer: turns a branch's staged changes into commits (job) by policy (worker).

``python -m committer`` (or ``lsmstore-committer``) runs the worker; docs/versioning.md
describes the commit flow, its crash table and the worker's policy.
"""
