"""An fsspec filesystem for ``lsm://repository/ref/path`` (registered as ``lsm``).

::

    import pandas as pd

    df = pd.read_parquet("lsm://repo/main/tables/t.parquet")
    df.to_parquet("lsm://repo/dev/tables/t.parquet")         # an upload on branch dev

    fs = fsspec.filesystem("lsm", refstore="redis://127.0.0.1:6379/0")
    with fs.transaction("repo", "main", message="nightly load") as tx:
        fs.pipe(f"repo/{tx.branch}/a.csv", b"...")            # on a temporary branch
    # success: committed and merged into main, the temporary branch deleted

Paths are ``repository/ref/path`` (the protocol prefix is optional; ``lakefs://``
is accepted too).  The store is opened lazily on fsspec's event loop from the
filesystem's options: ``refstore``/``server``/``config`` and any setting of
:func:`lsmstore.connect`, or ``store_factory`` (a callable returning an open store)
-- so the same code works embedded, on a shared RefStore and against the server.

Reads are ranged (``open(..., "rb")`` fetches only the blocks read, through the
object reader); a file opened for writing is spooled locally (RAM, then a temporary
file past ``spool_bytes``) and uploaded on ``close()`` as one object.  Missing paths
raise :class:`~lsmstore.errors.ObjectNotFoundError` (a ``FileNotFoundError``); a
missing repository raises :class:`~lsmstore.errors.RepositoryNotFoundError` naming the
store looked in (not a ``FileNotFoundError``, which engines such as pyarrow replace by
their own message: a wrong name or an unset server must show); ``exists`` is False for
both.  Other errors are the client's typed errors.

Transactions (as lakefs-spec has them): ``fs.transaction(repository, base_branch)``
creates a branch ``tx-<random>`` from ``base_branch``; on success of the ``with``
block (and of its ``validate`` callable, when given) its changes are committed and
merged into ``base_branch`` and the branch is deleted; on an exception the branch is
deleted (kept for inspection with ``keep_on_failure``) and nothing reaches the base.  A crash
inside the block leaves the ``tx-`` branch behind (delete it with ``lsmstore branch
delete``); a crash between the merge and the delete leaves it too, with its changes
already merged.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from fsspec.asyn import AsyncFileSystem, sync
from fsspec.spec import AbstractBufferedFile

import lsmstore
from lsmstore.api import store_location
from lsmstore.errors import (
    InvalidInputError,
    NotFoundError,
    NothingToCommitError,
    ObjectNotFoundError,
    RepositoryNotFoundError,
)
from lsmstore.types import ObjectStats

SCHEMES = ("lsm://", "lakefs://")
_STORE_OPTIONS = ("refstore", "server", "config")


def split_path(path: str) -> tuple[str, str, str]:
    """``repository/ref/path`` -> its three parts (missing parts are empty)."""
    parts = path.split("/", 2)
    while len(parts) < 3:
        parts.append("")
    return parts[0], parts[1], parts[2]


async def _all(page: Callable[..., Any], name: Callable[[Any], str]) -> list[str]:
    """Every name of a paged listing (``page(after=..., limit=...)``)."""
    names: list[str] = []
    after: str | None = None
    while True:
        items = await page(after=after, limit=1000)
        names.extend(name(i) for i in items)
        if len(items) < 1000:
            return names
        after = names[-1]


def _info(repo: str, ref: str, s: ObjectStats) -> dict[str, Any]:
    name = f"{repo}/{ref}/{s.path}".rstrip("/")
    if s.path_type == "common_prefix":
        return {"name": name, "size": 0, "type": "directory"}
    return {
        "name": name,
        "size": s.size,
        "type": "file",
        "checksum": s.checksum,
        "ETag": s.checksum,
        "mtime": s.mtime,
        # an object is never changed in place: it is created when last written
        "created": s.mtime,
        "LastModified": datetime.fromtimestamp(s.mtime, UTC),
        "content_type": s.content_type,
        "physical_address": s.physical_address,
        "metadata": dict(s.metadata),
    }


def _file_info(info: dict[str, Any], path: str) -> dict[str, Any]:
    if info["type"] != "file":
        raise IsADirectoryError(f"{path} is a directory (a prefix), not an object")
    return info


class LsmFileSystem(AsyncFileSystem):  # type: ignore[misc]
    protocol = ("lsm", "lakefs")
    root_marker = ""
    async_impl = True

    def __init__(
        self,
        refstore: str | None = None,
        *,
        store_factory: Callable[[], Any] | None = None,
        spool_bytes: int = 64 << 20,
        **options: Any,
    ) -> None:
        fs_options = {
            k: options.pop(k)
            for k in ("asynchronous", "loop", "batch_size", "skip_instance_cache",
                      "use_listings_cache", "listings_expiry_time", "max_paths")
            if k in options
        }  # fmt: skip
        super().__init__(**fs_options)
        self._refstore = refstore
        self._options = options
        self._factory = store_factory
        self._store: Any = None
        self.spool_bytes = spool_bytes

    # --- the store ---------------------------------------------------------------------

    async def _get_store(self) -> Any:
        if self._store is None:
            if self._factory is not None:
                self._store = self._factory()
            else:
                opts = dict(self._options)
                server = opts.pop("server", None)
                self._store = lsmstore.connect(server or self._refstore, **opts)
        return self._store

    async def _repo(self, name: str) -> Any:
        if not name:
            raise InvalidInputError("path names no repository (expected repository/ref/path)")
        store = await self._get_store()
        try:
            return await store.get_repository(name)
        except RepositoryNotFoundError as e:
            raise RepositoryNotFoundError(f"{e} (looked in {store_location(store)})") from e

    async def _aclose(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            await store.aclose()

    def close(self) -> None:
        """Close the store (flushing writes); the filesystem reopens it on next use."""
        if self._store is not None:
            sync(self.loop, self._aclose)

    # --- paths -------------------------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        p = str(path)
        for scheme in SCHEMES:
            if p.lower().startswith(scheme):
                p = p[len(scheme) :]
                break
        return p.rstrip("/")

    def unstrip_protocol(self, name: str) -> str:
        return f"lsm://{name}"

    # --- reads -------------------------------------------------------------------------

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        repo_name, ref, sub = split_path(path)
        try:
            if not repo_name:
                store = await self._get_store()
                names = await _all(store.list_repositories, lambda r: r.name)
                out = [{"name": n, "size": 0, "type": "directory"} for n in names]
            elif not ref:
                repo = await self._repo(repo_name)
                names = await _all(repo.list_branches, lambda b: b)
                out = [{"name": f"{repo_name}/{b}", "size": 0, "type": "directory"} for b in names]
            else:
                repo = await self._repo(repo_name)
                prefix = sub + "/" if sub else ""
                r = repo.ref(ref)
                out = [
                    _info(repo_name, ref, s)
                    async for s in r.list_objects(prefix=prefix, delimiter="/")
                ]
                if not out and sub:
                    # a file, not a directory: ls of a file lists the file (fsspec rule)
                    out = [_info(repo_name, ref, await r.stat_object(sub))]
        except RepositoryNotFoundError:
            raise  # not a missing file: a wrong name or store, said loudly (engines hide those)
        except NotFoundError as e:
            raise ObjectNotFoundError(path, f"{path}: {e}") from e
        return out if detail else [o["name"] for o in out]

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        repo_name, ref, sub = split_path(path)
        if not sub:
            await self._ls(path)  # the repository/ref must exist
            return {"name": path, "size": 0, "type": "directory"}
        try:
            repo = await self._repo(repo_name)
            r = repo.ref(ref)
            try:
                return _info(repo_name, ref, await r.stat_object(sub))
            except ObjectNotFoundError:
                async for _ in r.list_objects(prefix=sub + "/", amount=1):
                    return {"name": path, "size": 0, "type": "directory"}
                raise
        except RepositoryNotFoundError:
            raise  # not a missing file: a wrong name or store, said loudly (engines hide those)
        except NotFoundError as e:
            raise ObjectNotFoundError(path, f"{path}: {e}") from e

    async def _cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        path = self._strip_protocol(path)
        repo_name, ref, sub = split_path(path)
        try:
            repo = await self._repo(repo_name)
            async with await repo.ref(ref).open(sub) as reader:
                size = reader.size
                s = 0 if start is None else (start if start >= 0 else max(0, size + start))
                e = size if end is None else (end if end >= 0 else max(0, size + end))
                if e <= s:
                    return b""
                data: bytes = await reader.read(s, e - s)
                return data
        except RepositoryNotFoundError:
            raise  # not a missing file: a wrong name or store, said loudly (engines hide those)
        except NotFoundError as e:
            raise ObjectNotFoundError(path, f"{path}: {e}") from e

    async def _get_file(self, rpath: str, lpath: str, **kwargs: Any) -> None:
        if await asyncio.to_thread(os.path.isdir, lpath):
            return
        rpath = self._strip_protocol(rpath)
        repo_name, ref, sub = split_path(rpath)
        repo = await self._repo(repo_name)
        async with await repo.ref(ref).open(sub) as reader:
            f = await asyncio.to_thread(open, lpath, "wb")
            try:
                async for chunk in reader:
                    await asyncio.to_thread(f.write, chunk)
            finally:
                await asyncio.to_thread(f.close)

    async def _exists(self, path: str, **kwargs: Any) -> bool:
        try:
            await self._info(path, **kwargs)
        except (FileNotFoundError, NotFoundError):
            return False
        return True

    # --- what engines ask about files (DuckDB, Polars, pyarrow) ----------------------------

    def modified(self, path: str) -> datetime:
        """When the object was last written (UTC)."""
        info = _file_info(self.info(path), path)
        return datetime.fromtimestamp(info["mtime"], UTC)

    def created(self, path: str) -> datetime:
        """When the object was written: objects are never changed in place, so this is
        :meth:`modified`."""
        return self.modified(path)

    def ukey(self, path: str) -> str:
        """A key that changes whenever the object's content does: its checksum and
        physical address."""
        info = _file_info(self.info(path), path)
        return f"{info['checksum']}:{info['physical_address']}"

    def checksum(self, path: str) -> int:
        """An integer that changes whenever the object's content does (from its
        content checksum)."""
        return int(hashlib.md5(self.ukey(path).encode()).hexdigest(), 16)

    # --- writes ------------------------------------------------------------------------

    async def _branch(self, path: str) -> tuple[Any, str]:
        repo_name, ref, sub = split_path(self._strip_protocol(path))
        if not ref or not sub:
            raise InvalidInputError(f"{path}: expected repository/branch/path to write")
        repo = await self._repo(repo_name)
        return repo.branch(ref), sub

    async def _pipe_file(
        self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any
    ) -> None:
        branch, sub = await self._branch(path)
        await branch.upload(sub, value, if_absent=mode == "create", **_upload_options(kwargs))
        self.invalidate_cache(self._parent(path))

    async def _put_file(
        self, lpath: str, rpath: str, mode: str = "overwrite", **kwargs: Any
    ) -> None:
        if await asyncio.to_thread(os.path.isdir, lpath):
            return
        branch, sub = await self._branch(rpath)
        await branch.upload(sub, lpath, if_absent=mode == "create", **_upload_options(kwargs))
        self.invalidate_cache(self._parent(rpath))

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        branch, sub = await self._branch(path)
        await branch.delete_object(sub)
        self.invalidate_cache(self._parent(path))

    async def _rm(
        self, path: str | list[str], recursive: bool = False, batch_size: int | None = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        paths = await self._expand_path(path, recursive=recursive)
        by_branch: dict[tuple[str, str], list[str]] = {}
        for p in paths:
            repo_name, ref, sub = split_path(self._strip_protocol(p))
            if sub and (await self._info(p))["type"] == "file":
                by_branch.setdefault((repo_name, ref), []).append(sub)
        for (repo_name, ref), subs in by_branch.items():
            repo = await self._repo(repo_name)
            for i in range(0, len(subs), 1000):
                await repo.branch(ref).delete_objects(subs[i : i + 1000])
        for p in paths:
            self.invalidate_cache(self._parent(p))

    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        r1, ref1, sub1 = split_path(self._strip_protocol(path1))
        branch, sub2 = await self._branch(path2)
        if r1 == branch.repository.name:
            await branch.copy_object(sub1, sub2, src_ref=ref1)
        else:
            repo = await self._repo(r1)
            async with await repo.ref(ref1).open(sub1) as reader:
                st = reader.stats
                await branch.upload(
                    sub2,
                    reader.iter_chunks(),
                    content_type=st.content_type or None,
                    metadata=st.metadata,
                )
        self.invalidate_cache(self._parent(path2))

    async def _mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        pass  # directories are prefixes: nothing to create

    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        pass

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | str | None = "default",
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> LsmFile:
        if mode not in ("rb", "wb", "xb"):
            raise InvalidInputError(f"mode {mode!r}: lsm:// files open as rb, wb or xb")
        return LsmFile(
            self,
            path,
            mode,
            block_size=5 << 20 if block_size in (None, "default") else block_size,
            autocommit=autocommit,
            cache_options=cache_options,
            **kwargs,
        )

    # --- transactions ------------------------------------------------------------------

    @property
    def transaction(self) -> LsmTransaction:
        """``with fs.transaction(repository, base_branch) as tx:`` (module docstring)."""
        return LsmTransaction(self)


def _upload_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs[k] for k in ("content_type", "metadata") if kwargs.get(k) is not None}


class LsmFile(AbstractBufferedFile):  # type: ignore[misc]
    """A file of the filesystem: ranged reads, or a spooled upload on close."""

    fs: LsmFileSystem

    def __init__(self, fs: LsmFileSystem, path: str, mode: str, **kwargs: Any) -> None:
        self._reader: Any = None
        self._spool: Any = None
        self._upload_kwargs = _upload_options(kwargs)
        kwargs.pop("content_type", None)
        kwargs.pop("metadata", None)
        super().__init__(fs, path, mode, **kwargs)

    # reads: one object reader per open file; each cache miss is one ranged read
    def _fetch_range(self, start: int, end: int) -> bytes:
        data: bytes = sync(self.fs.loop, self._read, start, end)
        return data

    async def _read(self, start: int, end: int) -> bytes:
        if self._reader is None:
            repo_name, ref, sub = split_path(self.fs._strip_protocol(self.path))
            repo = await self.fs._repo(repo_name)
            self._reader = await repo.ref(ref).open(sub)
        if end <= start:
            return b""
        data: bytes = await self._reader.read(start, end - start)
        return data

    # writes: spool every block, upload once at the end
    def _initiate_upload(self) -> None:
        self._spool = tempfile.SpooledTemporaryFile(max_size=self.fs.spool_bytes)

    def _upload_chunk(self, final: bool = False) -> bool:
        self.buffer.seek(0)
        self._spool.write(self.buffer.read())
        if final:
            self._spool.seek(0)
            sync(self.fs.loop, self._upload)
        return True

    async def _upload(self) -> None:
        branch, sub = await self.fs._branch(self.path)
        try:
            await branch.upload(
                sub, self._spool, if_absent=self.mode == "xb", **self._upload_kwargs
            )
        finally:
            self._spool.close()
        self.fs.invalidate_cache(self.fs._parent(self.path))

    def close(self) -> None:
        super().close()
        self._reader = None  # a reader holds no resources beyond the store's


class LsmTransaction:
    """A temporary branch whose changes are committed and merged on success."""

    def __init__(self, fs: LsmFileSystem) -> None:
        self.fs = fs
        self.repository = ""
        self.base_branch = ""
        self.branch = ""
        self.message = ""
        self.commit_id: str | None = None
        self.validate: Callable[[LsmTransaction], None] | None = None
        self.keep_on_failure = False

    def __call__(
        self,
        repository: str,
        base_branch: str = "main",
        *,
        message: str | None = None,
        validate: Callable[[LsmTransaction], None] | None = None,
        keep_on_failure: bool = False,
    ) -> Self:
        """``validate`` runs after the block, before the commit (its exception fails
        the transaction); ``keep_on_failure`` leaves the branch of a failed transaction
        for inspection instead of deleting it."""
        self.repository = repository
        self.base_branch = base_branch
        self.message = message or f"fsspec transaction on {base_branch}"
        self.validate = validate
        self.keep_on_failure = keep_on_failure
        return self

    def uri(self, path: str) -> str:
        """The transaction's ``lsm://`` URI of ``path``."""
        return f"lsm://{self.repository}/{self.branch}/{path.lstrip('/')}"

    def __enter__(self) -> Self:
        if not self.repository:
            raise InvalidInputError("use fs.transaction(repository, base_branch)")
        self.branch = f"tx-{secrets.token_hex(6)}"
        sync(self.fs.loop, self._begin)
        return self

    async def _begin(self) -> None:
        repo = await self.fs._repo(self.repository)
        await repo.create_branch(self.branch, source=self.base_branch)

    async def _finish(self, ok: bool) -> None:
        repo = await self.fs._repo(self.repository)
        merged = False
        try:
            if ok:
                tx = repo.branch(self.branch)
                head = await tx.head()
                if head.l1 or head.l2:
                    try:
                        await tx.commit(self.message)
                    except NothingToCommitError:
                        pass  # the staged writes changed nothing
                result = await repo.merge(
                    self.branch, into=self.base_branch, message=f"Merge {self.message}"
                )
                self.commit_id = result.commit_id
                merged = True
        finally:
            if merged or not self.keep_on_failure:
                await repo.delete_branch(self.branch)
            self.fs.invalidate_cache()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None and self.validate is not None:
            try:
                self.validate(self)
            except BaseException:
                sync(self.fs.loop, self._finish, False)
                raise
        sync(self.fs.loop, self._finish, exc_type is None)
