"""Repository life cycle: create and delete.

Creation takes these steps, each safe to crash after (docs/security.md, "Namespaces,
ownership and deletion"):

1. refuse early, writing nothing, a namespace visibly in use (an overlapping record in
   this RefStore, another owner's marker in or around the namespace);
2. write the initial commit (content-addressed, so harmless if the create then fails;
   it also proves the namespace writable before anything is recorded);
3. record the repository (its unique id and resolved location) in the RefStore;
4. check again that no other record overlaps it: the RefStore orders concurrent creates,
   so the later check sees the earlier record, and the loser forgets its own record;
5. write the ownership marker into the namespace;
6. create the default branch on the initial commit
   (:func:`lsmstore.versioning.refs.init_default_branch`).

A crash after step 3 leaves a record without a default branch: a create of the same
name and settings finishes the work (:func:`half_created`); the namespace holds only the
initial commit and the marker, which names this repository.

Deletion marks the namespace's marker released, then forgets the record and its refs;
the files stay until garbage collection (a released namespace may be taken by a new
repository, whose id differs, so no old process can delete its files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsmstore import namespace
from lsmstore.errors import NamespaceInUseError, RefExistsError, RepositoryNotFoundError
from lsmstore.refstore.base import Repository as RepositoryInfo
from lsmstore.versioning.refs import init_default_branch, write_initial_commit

if TYPE_CHECKING:
    from lsmstore.client import Repository, Store
    from lsmstore.storage.base import ObjectStore


async def create(store: Store, info: RepositoryInfo) -> Repository:
    from lsmstore import client  # the handle type (the client imports this module)

    """Create the repository ``info`` describes (already checked); its handle.
    RefExistsError if the name is taken, NamespaceInUseError if the namespace is."""
    try:
        info = await half_created(store, info)
    except RepositoryNotFoundError:
        pass
    taken = await namespace.overlapping(store.refstore, info)
    if taken:
        raise namespace.in_use_error(info, taken[0])
    namespace.check_not_reserved(info)
    objects = store.objects(namespace.location_of(info))
    found = await namespace.read_marker(objects)
    if found is not None and not found.released and found.owner != info.uid:
        raise NamespaceInUseError(
            f"storage namespace {info.storage_namespace} is owned by repository "
            f"{found.repository} (id {found.owner}), possibly of another RefStore"
        )
    if found is None or found.owner != info.uid:
        await _check_free(store, objects, info)
    created_at = int(info.created_at)
    await write_initial_commit(client.Repository(store, info).context(), created_at)
    try:
        await store.refstore.create_repository(info)
    except RefExistsError:
        info = await half_created(store, info)
    try:
        await namespace.check_exclusive(store.refstore, info)
        await namespace.claim(objects, info)
    except NamespaceInUseError:
        await _forget_record(store, info)
        raise
    repo = await store.get_repository(info.name)
    await init_default_branch(repo.context(), created_at=created_at)
    return repo


async def delete(store: Store, info: RepositoryInfo) -> None:
    """Release the namespace's marker, then forget the record and its refs."""
    await namespace.release(store.objects(namespace.location_of(info)), info)
    await store.refstore.delete_repository(info.name)


async def half_created(store: Store, info: RepositoryInfo) -> RepositoryInfo:
    """The recorded repository named ``info.name`` if a create of the same settings
    crashed before creating its default branch (this request finishes that work);
    RefExistsError if the name is taken otherwise; RepositoryNotFoundError if free."""
    existing = await store.refstore.get_repository(info.name)
    if (
        existing.storage_namespace != info.storage_namespace
        or existing.default_branch != info.default_branch
        or await store.refstore.get_refs(info.name, [info.default_branch])
    ):
        raise RefExistsError(f"repository already exists: {info.name}")
    return existing


async def _check_free(store: Store, objects: ObjectStore, info: RepositoryInfo) -> None:
    """Markers of other owners around or inside the namespace (lsmstore.namespace)."""
    urls = namespace.ancestor_urls(namespace.location_of(info))
    ancestors = [store.open_objects(u) for u in urls]
    try:
        await namespace.check_free(objects, ancestors, info)
    finally:
        for outer in ancestors:
            await outer.aclose()


async def _forget_record(store: Store, info: RepositoryInfo) -> None:
    """Undo a create that lost its namespace: delete the record if it is still ours
    (it has no branch yet, so nothing was written through it)."""
    try:
        current = await store.refstore.get_repository(info.name)
        if current.uid == info.uid and not await store.refstore.list_refs(info.name, limit=1):
            await store.refstore.delete_repository(info.name)
    except RepositoryNotFoundError:
        pass
