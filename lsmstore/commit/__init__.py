"""The commit job: a branch's staged changes (L2 + L1) applied to its base as a new
commit (:mod:`lsmstore.commit.job`; docs/versioning.md has the flow and its crash table).

``Branch.commit`` runs it in the caller's process; the committer worker
(``python -m committer``) runs it by policy over every branch.
"""
