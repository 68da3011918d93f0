"""A write batch: many raw records and object writes of one branch, staged as *one*
write with one acknowledgement -- the server's batch endpoint and any front end that
takes many writes at once build one (docs/server.md, "Batch write").

::

    batch = WriteBatch(branch)
    batch.kv(b"k", b"v")                       # a raw record (``Branch.put``)
    batch.kv_delete(b"old")                    # a raw tombstone (``Branch.delete``)
    batch.link("a.parquet", address, size, checksum)
    batch.put("b.csv", data, content_type="text/csv")
    batch.delete("c.json")
    batch.copy("a.parquet", "d.parquet")
    await batch.apply()

Each adding method checks its entry at once and raises the typed error of the first bad
one (InvalidKeyError, InvalidNameError, EntryTooLargeError, InvalidInputError) with
nothing staged; the caller can name the entry in its answer.  ``kv`` entries are built
exactly as ``Branch.put`` builds its records (same bounds; identity the SHA-256 of the
value unless given) and look nothing up, nor do ``link`` entries (as ``link_many``): a
raw or linked overwrite of a staged object leaves its data to the GC job's orphan scan.
``put``, ``delete`` and ``copy`` entries record the staged data they replace as garbage
candidates, as the single-object writes do (:mod:`lsmstore.operations.objects`).

:meth:`WriteBatch.apply`, under the branch's shared lock: the ``if_absent`` paths are
claimed across processes (:func:`~lsmstore.operations.objects.claim_absent`, held until
the batch is staged) and checked (ObjectExistsError names the first that holds an object; nothing is
written), copies read their sources, the data of the ``put`` entries is written to fresh
``data/<id>`` objects (concurrently), then every record goes to the branch's writer as
one write: they land in one L1 file and become visible together.  A failure after data
was written follows the data-object life cycle (delete on a definite failure, garbage
candidate on an unknown outcome).  Crash between the data writes and the L1 append:
unreferenced data objects, no entry (the orphan scan collects them).

A path given twice keeps its last entry.  A batch is applied once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lsmstore.errors import InvalidInputError, ObjectExistsError
from lsmstore.graveler.record import Record, RecordTuple
from lsmstore.objects.api import find_object
from lsmstore.objects.entry import AddressType, ObjectEntry
from lsmstore.objects.linking import LinkStager
from lsmstore.objects.rules import check_content_type, check_metadata, check_path
from lsmstore.operations.objects import (
    claim_absent,
    copied_entry,
    entry_record,
    link_stager,
    new_data_key,
    now_of,
    previous,
    previous_many,
    record_replaced,
    settle_failed_data,
)
from lsmstore.staging.keys import check_key, make_record
from lsmstore.staging.pending import Staged
from lsmstore.storage.base import PutMode
from lsmstore.types import ObjectLink

if TYPE_CHECKING:
    from lsmstore.client import Branch

_new_tuple = tuple.__new__


class _Put:
    __slots__ = ("content_type", "data", "index", "key", "metadata", "path")

    def __init__(self, index: int, path: str, key: bytes, data: bytes, ctype: str,
                 md: dict[str, str]) -> None:  # fmt: skip
        self.index, self.path, self.key, self.data = index, path, key, data
        self.content_type, self.metadata = ctype, md


class _Copy:
    __slots__ = ("index", "key", "src_path", "src_ref")

    def __init__(self, index: int, key: bytes, src_path: str, src_ref: str | None) -> None:
        self.index, self.key, self.src_path, self.src_ref = index, key, src_path, src_ref


class WriteBatch:
    """Entries for one branch, applied as one write (module docstring)."""

    __slots__ = ("_absent", "_applied", "_branch", "_copies", "_max_key", "_max_value",
                 "_now", "_puts", "_records", "_replacing", "_stager")  # fmt: skip

    def __init__(self, branch: Branch) -> None:
        self._branch = branch
        cfg = branch.repository.store.config
        self._max_key, self._max_value = cfg.max_key_bytes, cfg.max_value_bytes
        self._now = now_of(branch)
        #: Made by the first ``link`` (a batch of raw records needs none).
        self._stager: LinkStager | None = None
        #: The records in entry order; a ``put``'s or ``copy``'s is made at apply.
        self._records: list[Staged | RecordTuple | None] = []
        self._puts: list[_Put] = []
        self._copies: list[_Copy] = []
        #: The entries that replace data (put, delete, copy), index -> the data address
        #: they stage (None: none of ours): the old data becomes a garbage candidate
        #: unless it is the same.
        self._replacing: dict[int, str | None] = {}
        #: ``(path, key)`` of the ``if_absent`` entries.
        self._absent: list[tuple[str, bytes]] = []
        self._applied = False

    def __len__(self) -> int:
        return len(self._records)

    @property
    def branch(self) -> Branch:
        return self._branch

    def kv(self, key: Any, value: Any, identity: Any = None) -> None:
        """A raw record, as ``Branch.put(key, value, identity=identity)``."""
        self._records.append(
            make_record(key, value, identity, self._max_key, self._max_value, defer_identity=True)
        )

    def kv_delete(self, key: Any) -> None:
        """A raw tombstone, as ``Branch.delete(key)``."""
        self._records.append(Record(check_key(key, self._max_key), b"", None))

    def link(
        self,
        path: Any,
        physical_address: Any,
        size: Any,
        checksum: Any,
        content_type: Any = None,
        metadata: Any = None,
        mtime: Any = None,
        *,
        if_absent: bool = False,
    ) -> None:
        """An object whose data is already at ``physical_address``, as ``Branch.link``."""
        key = check_path(path, self._max_key)
        link = ObjectLink(path, physical_address, size, checksum, content_type, metadata, mtime)
        stager = self._stager
        if stager is None:
            stager = self._stager = link_stager(self._branch, self._now)
        self._records.append(stager.stage(key, link)[0])
        if if_absent:
            self._absent.append((path, key))

    def put(
        self,
        path: Any,
        data: Any,
        content_type: Any = None,
        metadata: Mapping[str, str] | None = None,
        *,
        if_absent: bool = False,
    ) -> None:
        """An object with the bytes ``data``, as ``Branch.upload``."""
        key = check_path(path, self._max_key)
        if not isinstance(data, bytes):
            raise InvalidInputError(f"put data of {path!r} must be bytes")
        ctype = check_content_type(content_type)
        md = check_metadata(metadata)
        index = len(self._records)
        self._puts.append(_Put(index, path, key, data, ctype, md))
        self._replacing[index] = None
        self._records.append(None)
        if if_absent:
            self._absent.append((path, key))

    def delete(self, path: Any) -> None:
        """A deletion of the object at ``path`` (absent paths are ignored, as
        ``delete_objects``)."""
        key = check_path(path, self._max_key)
        self._replacing[len(self._records)] = None
        self._records.append(Record(key, b"", None))

    def copy(self, src_path: Any, dst_path: Any, src_ref: str | None = None) -> None:
        """``dst_path`` becomes an object with the data of ``src_path`` (read on
        ``src_ref``, default this branch, when the batch is applied), as
        ``Branch.copy_object``."""
        check_path(src_path, self._max_key)
        key = check_path(dst_path, self._max_key)
        if src_ref is not None and (not isinstance(src_ref, str) or not src_ref):
            raise InvalidInputError(f"copy source ref must be a non-empty str, not {src_ref!r}")
        index = len(self._records)
        self._copies.append(_Copy(index, key, src_path, src_ref))
        self._replacing[index] = None
        self._records.append(None)

    async def apply(self) -> int:
        """Stage every entry as one write (module docstring); the number of entries."""
        if self._applied:
            raise InvalidInputError("a write batch is applied once")
        self._applied = True
        records = self._records
        if not records:
            return 0
        branch = self._branch
        repo = branch.repository
        async with contextlib.AsyncExitStack() as held:
            await held.enter_async_context(repo.store.exclusion.shared(repo.name, branch.name))
            if self._absent:
                await held.enter_async_context(claim_absent(branch, [k for _, k in self._absent]))
                for path, key in self._absent:
                    if (await previous(branch, key))[0]:
                        raise ObjectExistsError(path)
            for c in self._copies:
                records[c.index] = await self._copied(c)
            written: list[tuple[str, str]] = []
            try:
                if self._puts:
                    await asyncio.gather(*(self._write_data(p, written) for p in self._puts))
                final: list[Staged | RecordTuple] = records  # type: ignore[assignment]
                looked = list(self._replacing)
                olds = await previous_many(branch, [final[i][0] for i in looked]) if looked else []
                await branch.writer().write_staged(final)
            except BaseException as e:
                await settle_failed_data(branch, written, e)
                raise
        if looked:
            await record_replaced(
                branch,
                [
                    (final[i][0], old, self._replacing[i])
                    for i, old in zip(looked, olds, strict=True)
                ],
                "overwritten",
            )
        return len(final)

    async def _write_data(self, p: _Put, written: list[tuple[str, str]]) -> None:
        branch = self._branch
        data_key = new_data_key(branch)
        await branch.repository.objects.put(data_key, p.data, PutMode.CREATE)
        written.append((p.path, data_key))
        md5 = hashlib.md5(p.data).hexdigest()
        e = ObjectEntry(data_key, AddressType.RELATIVE, len(p.data), md5, self._now[0],
                        self._now[1], p.content_type, p.metadata)  # fmt: skip
        self._records[p.index] = entry_record(branch, p.key, e)
        self._replacing[p.index] = data_key

    async def _copied(self, c: _Copy) -> RecordTuple:
        branch = self._branch
        repo = branch.repository
        source = repo.ref(c.src_ref) if c.src_ref is not None else branch
        src, rec = await find_object(source, c.src_path)
        if src is None:  # an inline object: its copy is the same record
            return _new_tuple(Record, (c.key, rec.identity, rec.value))
        if src.is_relative():
            self._replacing[c.index] = src.address
        return entry_record(branch, c.key, copied_entry(src, self._now))
