"""Storage namespaces: where they resolve, which overlap, and who owns one.

A storage namespace belongs to exactly one repository (docs/security.md, "Namespaces,
ownership and deletion").  Three parts keep it so:

* **Exclusive in the RefStore.**  :func:`overlapping` names the repositories whose
  namespace equals, lies inside or contains a given one (compared by
  :func:`namespace_key`: scheme, bucket or host, and path segments, after resolving
  ``local://``).  A create records the repository first and checks afterwards
  (:func:`check_exclusive`); of two concurrent creates on overlapping namespaces, the
  check of the later one sees the record of the earlier one (the RefStore orders both),
  so at most one keeps its namespace (both may lose, and retry).
* **Owned in the namespace.**  An ownership marker, ``_lsm/owner.json``, names the
  repository's unique id (:attr:`lsmstore.refstore.base.Repository.uid`).  It is
  written when the repository is created and marked *released* (never deleted) when it
  is deleted; a new repository may take over a released namespace, never one another
  repository still owns.
* **Checked before deleting.**  Every process that deletes files from a namespace
  (staging sweep, garbage collection, the collection of a deleted repository's
  staging) calls :func:`verify_owner` first and deletes nothing unless the marker
  names the repository it works for -- so a RefStore restored from an old backup, or
  two RefStores on one bucket, cannot delete another owner's files.

``local://rel/path`` namespaces resolve against ``$LSMSTORE_HOME/data`` of the process
that *creates* the repository; the resolved ``file://`` URL is stored with the
repository (:attr:`Repository.location`) so every process sharing the RefStore uses the
same directory (:func:`location_of`).

Repositories recorded before ids existed have ``uid == ""``; :func:`owner_id` gives
them a stable id derived from their record (name, creation time, namespace), which a
re-created repository does not share, and :func:`verify_owner` writes their marker on
first use (docs/decisions.md, "Namespace ownership").
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import secrets
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from lsmstore import layout
from lsmstore.errors import (
    InvalidURLError,
    NamespaceInUseError,
    NotOwnerError,
    ObjectExistsError,
    ObjectNotFoundError,
    UnavailableError,
)
from lsmstore.objects.addresses import ALLOWED_EXTERNAL_PREFIXES_KEY
from lsmstore.refstore.base import RefStore, Repository
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.storage.url import local_namespace_path
from lsmstore.validate import check_url_text

#: The ownership marker's key inside a namespace (outside every area GC lists).
MARKER = f"{layout.PREFIX}/owner.json"
FORMAT = "lsmstore-namespace-owner"


def new_uid(token: Callable[[int], str] = secrets.token_hex) -> str:
    """A fresh repository id: 32 lowercase hex digits of randomness."""
    return token(16)


def owner_id(repo: Repository) -> str:
    """The id a namespace's marker names for ``repo``: its ``uid``, or for a repository
    recorded before ids existed one derived from its record."""
    if repo.uid:
        return repo.uid
    text = f"{repo.name}\0{float(repo.created_at)!r}\0{repo.storage_namespace}"
    return "legacy" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:26]


def resolve(storage_namespace: str, home: Path) -> str:
    """The location to record for a new repository: the ``file://`` URL of a
    ``local://`` namespace under ``home/data``; ``""`` for any other (the namespace
    itself is the location)."""
    check_url_text(storage_namespace, "storage namespace", InvalidURLError)
    if storage_namespace.lower().startswith("local://"):
        return local_namespace_path(storage_namespace, home).absolute().as_uri()
    return ""


def location_of(repo: Repository) -> str:
    """The URL to open a repository's objects at (the same in every process)."""
    return repo.location or repo.storage_namespace


def reachable_location(repo: Repository) -> str:
    """:func:`location_of`, or UnavailableError when it is a recorded ``local://``
    directory this process cannot see (another machine's, another container's)."""
    if repo.location.startswith("file:"):
        where = Path(unquote(urlsplit(repo.location).path))
        if not where.is_dir():
            raise UnavailableError(
                f"repository {repo.name}: its storage namespace {repo.storage_namespace} "
                f"lives at {where}, which this process cannot reach (every process sharing "
                "a RefStore must see that directory)"
            )
    return location_of(repo)


@dataclass(frozen=True, slots=True)
class NamespaceKey:
    """A namespace as compared for overlap: two overlap when scheme and authority are
    equal and one's segments start with the other's."""

    scheme: str
    authority: str
    segments: tuple[str, ...]

    def overlaps(self, other: NamespaceKey) -> bool:
        if (self.scheme, self.authority) != (other.scheme, other.authority):
            return False
        n = min(len(self.segments), len(other.segments))
        return self.segments[:n] == other.segments[:n]


def namespace_key(url: str) -> NamespaceKey:
    """The key of a location URL (``file://``, ``s3://``, ``mem://``; a ``local://``
    namespace must be resolved first).  Options (``?...``) are not part of it: two
    namespaces on one bucket overlap whatever endpoint they name."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    authority = parts.netloc.lower() if scheme in ("s3", "mem") else ""
    path = unquote(parts.path)
    if scheme == "local":
        path = unquote(parts.netloc) + "/" + path
    if scheme == "file":
        path = posixpath.normpath(path) if path else "/"
    segments = tuple(s for s in path.split("/") if s)
    return NamespaceKey(scheme, authority, segments)


def key_of(repo: Repository) -> NamespaceKey:
    return namespace_key(location_of(repo))


def reach_of(repo: Repository) -> list[NamespaceKey]:
    """Where ``repo`` may read: its namespace and its allowed external prefixes (links,
    :mod:`lsmstore.objects.addresses`; a ``local://`` prefix resolved like its
    namespace)."""
    own = key_of(repo)
    keys = [own]
    for prefix in repo.metadata.get(ALLOWED_EXTERNAL_PREFIXES_KEY, "").split():
        key = namespace_key(prefix)
        if key.scheme == "local" and repo.location:
            depth = len(namespace_key(repo.storage_namespace).segments)
            root = own.segments[: len(own.segments) - depth]
            key = NamespaceKey("file", "", (*root, *key.segments))
        keys.append(key)
    return keys


def collides(a: Repository, b: Repository) -> bool:
    """Whether ``a`` and ``b`` cannot both exist: their namespaces overlap, or one may
    link into the other's namespace."""
    ka, kb = key_of(a), key_of(b)
    return any(k.overlaps(kb) for k in reach_of(a)) or any(k.overlaps(ka) for k in reach_of(b))


async def _repositories(refstore: RefStore) -> AsyncIterator[Repository]:
    after: str | None = None
    while page := await refstore.list_repositories(after=after, limit=1000):
        for r in page:
            yield r
        after = page[-1].name


async def overlapping(refstore: RefStore, repo: Repository) -> list[Repository]:
    """Every other repository that :func:`collides` with ``repo`` (one listing of all
    repositories)."""
    return [r async for r in _repositories(refstore) if r.name != repo.name and collides(repo, r)]


async def owner_within(refstore: RefStore, url: str, home: Path) -> Repository | None:
    """A repository whose namespace overlaps the location ``url`` (a ``local://`` one
    resolved under ``home/data``, as :func:`resolve`), or None (one listing of all
    repositories)."""
    key = namespace_key(resolve(url.rstrip("/"), home) or url)
    async for r in _repositories(refstore):
        if key_of(r).overlaps(key):
            return r
    return None


def in_use_error(repo: Repository, other: Repository) -> NamespaceInUseError:
    return NamespaceInUseError(
        f"storage namespace {repo.storage_namespace} overlaps {other.storage_namespace} "
        f"of repository {other.name}: a namespace belongs to one repository"
    )


async def check_exclusive(refstore: RefStore, repo: Repository) -> None:
    """NamespaceInUseError if another repository's namespace overlaps ``repo``'s.

    Called after ``repo`` is recorded: see the module docstring for why that order
    decides races."""
    others = await overlapping(refstore, repo)
    if others:
        raise in_use_error(repo, others[0])


# --- the ownership marker -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Marker:
    owner: str  # the owner's id (owner_id)
    repository: str  # its name when it was written (for operators)
    released: bool = False

    def encode(self) -> bytes:
        doc = {
            "format": FORMAT,
            "version": 1,
            "owner": self.owner,
            "repository": self.repository,
            "released": self.released,
        }
        return json.dumps(doc, sort_keys=True).encode("utf-8")


async def read_marker(objects: ObjectStore, where: str = "") -> Marker | None:
    """The namespace's marker (of the namespace at ``where`` inside it, if given); None
    if it has none; NotOwnerError if it is unreadable (a process must not guess who owns
    the files)."""
    try:
        data = await objects.get(where + MARKER)
    except ObjectNotFoundError:
        return None
    try:
        doc = json.loads(data)
        if doc.get("format") != FORMAT:
            raise ValueError("not an ownership marker")
        return Marker(str(doc["owner"]), str(doc["repository"]), bool(doc.get("released")))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise NotOwnerError(f"{objects.url}: unreadable ownership marker {MARKER}: {e}") from None


async def claim(objects: ObjectStore, repo: Repository) -> None:
    """Write ``repo``'s marker at creation: into a namespace without one, over a
    released one, or again over its own.  NamespaceInUseError if another repository
    owns the namespace."""
    mine = Marker(owner_id(repo), repo.name)
    for _ in range(3):
        found = await read_marker(objects)
        if found is None:
            try:
                await objects.put(MARKER, mine.encode(), PutMode.CREATE)
                return
            except ObjectExistsError:
                continue  # another writer got there first: look at what it wrote
        if found.owner == mine.owner and not found.released:
            return
        if found.owner != mine.owner and not found.released:
            raise NamespaceInUseError(
                f"storage namespace {repo.storage_namespace} is owned by repository "
                f"{found.repository} (id {found.owner}), possibly of another RefStore"
            )
        await objects.put(MARKER, mine.encode(), PutMode.OVERWRITE)
        return
    raise NamespaceInUseError(f"storage namespace {repo.storage_namespace}: marker keeps changing")


#: Most objects :func:`check_free` looks at in a namespace before a repository is
#: created on it (a namespace holding more is refused: choose an empty one).
MAX_SCAN = 100_000


def ancestor_urls(url: str) -> list[str]:
    """The namespaces that contain ``url`` (a location), nearest first: parent
    directories of a ``file://`` path, parent prefixes in an ``s3://`` bucket (same
    options)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("file", "s3"):
        return []
    segments = [s for s in parts.path.split("/") if s]
    query = f"?{parts.query}" if parts.query else ""
    out = []
    for n in range(len(segments) - 1, -1, -1):
        path = "/".join(segments[:n])
        if scheme == "file":
            out.append(f"file:///{path}")
        else:
            out.append(f"s3://{parts.netloc}/{path}{query}")
    return out


def check_not_reserved(repo: Repository) -> None:
    """NamespaceInUseError if ``repo``'s namespace has an ``_lsm`` path segment: that
    is where repositories keep their own files (of one deleted but still collected, or
    of one another RefStore knows), never a namespace of its own."""
    if layout.PREFIX in key_of(repo).segments:
        raise NamespaceInUseError(
            f"storage namespace {repo.storage_namespace} has a path segment {layout.PREFIX}, "
            "reserved for the files of the repository around it"
        )


def nested_roots(keys: Iterable[str]) -> set[str]:
    """The namespaces nested inside a listed one: ``"<sub>/"`` for each listed key
    ``<sub>/_lsm/owner.json`` (``sub`` not empty) -- another repository's marker, of
    whatever owner, released or not, unreadable or not (nothing is read)."""
    tail = "/" + MARKER
    return {k[: -len(MARKER)] for k in keys if k.endswith(tail) and len(k) > len(tail)}


def outside_nested(keys: Iterable[str]) -> set[str]:
    """``keys`` (a listing of one namespace) without those of nested namespaces
    (:func:`nested_roots`): what a deleter of the listed namespace may consider at
    all.  Creation refuses nesting (:func:`check_free`); this covers what a create
    cannot see (the outer namespace created later by a RefStore that does not know the
    inner one)."""
    keys = set(keys)
    roots = nested_roots(keys)
    if not roots:
        return keys
    return {k for k in keys if not any(k.startswith(r) for r in roots)}


async def check_free(objects: ObjectStore, ancestors: list[ObjectStore], repo: Repository) -> None:
    """NamespaceInUseError if another owner's files may be in the way of ``repo``'s
    namespace (``objects``), whatever this RefStore knows: a containing namespace
    (``ancestors``) or a contained one holds a marker that is not released, or a
    contained directory holds a repository's files without any marker.  Looks at no
    more than :data:`MAX_SCAN` objects.  Not atomic against another RefStore's create
    at the same moment (this RefStore's own creates are: :func:`check_exclusive`)."""
    for outer in ancestors:
        found = await read_marker(outer)
        if found is not None and not found.released:
            raise NamespaceInUseError(
                f"storage namespace {repo.storage_namespace} lies inside {outer.url}, owned "
                f"by repository {found.repository} (id {found.owner})"
            )
    seen = 0
    marked: set[str] = set()  # directories (``a/b/``) with a marker
    holds: set[str] = set()  # directories holding a repository's files
    async for meta in objects.list(""):
        seen += 1
        if seen > MAX_SCAN:
            raise NamespaceInUseError(
                f"storage namespace {repo.storage_namespace} holds more than {MAX_SCAN} "
                "objects: a repository needs a namespace of its own"
            )
        segments = meta.key.split("/")
        if layout.PREFIX not in segments[1:-1]:
            continue  # the namespace's own files (claim() checks them), or no repository's
        where = "/".join(segments[: segments.index(layout.PREFIX, 1)]) + "/"
        if meta.key != where + MARKER:
            holds.add(where)
            continue
        marked.add(where)
        inner = await read_marker(objects, where)
        if inner is not None and not inner.released:
            raise NamespaceInUseError(
                f"storage namespace {repo.storage_namespace} contains {where}, owned by "
                f"repository {inner.repository} (id {inner.owner})"
            )
    for where in sorted(holds - marked):
        raise NamespaceInUseError(
            f"storage namespace {repo.storage_namespace} contains a repository's files under "
            f"{where} with no ownership marker"
        )


async def verify_owner(objects: ObjectStore, repo: Repository, *, adopt: bool = True) -> None:
    """Raise NotOwnerError unless the namespace's marker names ``repo`` (released or
    not).  Call before deleting anything from ``objects``.

    A namespace without a marker is refused, except that a repository recorded before
    ids existed (``uid == ""``) writes its marker here when ``adopt``."""
    found = await read_marker(objects)
    if found is None and adopt and not repo.uid:
        try:
            await objects.put(MARKER, Marker(owner_id(repo), repo.name).encode(), PutMode.CREATE)
        except ObjectExistsError:
            pass
        found = await read_marker(objects)
    if found is None:
        raise NotOwnerError(
            f"{objects.url}: no ownership marker ({MARKER}); repository {repo.name} "
            "deletes nothing from a namespace it cannot prove it owns"
        )
    if found.owner != owner_id(repo):
        raise NotOwnerError(
            f"{objects.url} belongs to repository {found.repository} (id {found.owner}), "
            f"not to {repo.name} (id {owner_id(repo)}): nothing deleted"
        )


async def release(objects: ObjectStore, repo: Repository) -> None:
    """Mark ``repo``'s marker released (when the repository is deleted), so a new
    repository may take the namespace.  Leaves another owner's marker alone."""
    found = await read_marker(objects)
    if found is not None and found.owner == owner_id(repo) and not found.released:
        released = Marker(found.owner, found.repository, released=True)
        await objects.put(MARKER, released.encode(), PutMode.OVERWRITE)
