"""Creating a repository: its record, its first commit and its default branch.

Steps: check every argument (nothing written on bad input); write the initial commit
(the empty tree) to the namespace, so that a namespace that cannot be written fails
before anything is recorded; record the repository in the RefStore (create-if-absent);
create the default branch on that commit
(:func:`lsmstore.versioning.refs.init_default_branch`, which writes the commit again:
it is content-addressed, the second write keeps the first).  A crash between recording
the repository and creating its branch leaves a repository without a branch: the same
create request finishes that work (the record is taken, but with the same namespace and
default branch and no branch yet), anything else is RefExistsError.  A crash before the
record leaves an unreferenced commit object in the namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lsmstore import validate
from lsmstore.errors import InvalidURLError, RefExistsError
from lsmstore.objects.addresses import ALLOWED_EXTERNAL_PREFIXES_KEY, parse_allowed_prefixes
from lsmstore.refstore.base import Repository as RepositoryInfo
from lsmstore.refstore.names import check_ref_name, check_repository_name
from lsmstore.versioning.refs import init_default_branch, write_initial_commit

if TYPE_CHECKING:
    from lsmstore.client import Repository, Store


async def create(
    store: Store,
    name: str,
    *,
    storage_namespace: str,
    default_branch: str = "main",
    metadata: Mapping[str, str] | None = None,
) -> Repository:
    """Record a repository and create its default branch (module docstring)."""
    check_repository_name(name)
    check_ref_name(default_branch)
    validate.check_url_text(storage_namespace, "storage namespace", InvalidURLError)
    md = validate.check_metadata(metadata, "repository metadata")
    parse_allowed_prefixes(
        md.get(ALLOWED_EXTERNAL_PREFIXES_KEY), storage_namespace.partition("://")[0].lower()
    )
    created = store.clock()
    info = RepositoryInfo(name, storage_namespace, default_branch, created_at=created, metadata=md)
    # the handle (no I/O) gives the version-control context the commit is written with
    await write_initial_commit(store.repository(info).context(), int(created))
    try:
        await store.refstore.create_repository(info)
    except RefExistsError:
        existing = await store.refstore.get_repository(name)
        if (
            existing.storage_namespace != storage_namespace
            or existing.default_branch != default_branch
            or await store.refstore.get_refs(name, [default_branch])
        ):
            raise
        info = existing
    repo = store.repository(info)
    await init_default_branch(repo.context(), created_at=int(created))
    return repo
