"""Version control on a repository: commits' history, branches and tags, diff, merge.

Modules, one concept each: :mod:`~lsmstore.versioning.context` (what operations need of
a repository), :mod:`~lsmstore.versioning.staged` (a branch's staged changes as one
stream), :mod:`~lsmstore.versioning.history` (log, ancestry, merge base),
:mod:`~lsmstore.versioning.refs` (branches and tags), :mod:`~lsmstore.versioning.changes`
(diffs), :mod:`~lsmstore.versioning.merging` (merge and revert).  Ref expressions live
in :mod:`lsmstore.refexpr`; the commit itself in ``lsmstore.commit.job``.  docs/versioning.md
describes the whole.
"""

from lsmstore.versioning.context import RepoContext

__all__ = ["RepoContext"]
