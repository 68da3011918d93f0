"""Object writes (docs/client.md, "Objects API"): upload, link, link_many, delete one or
many, copy -- the methods ``Branch`` gets from :class:`ObjectWrites`, and the rules every
front end shares through them: the data-object life cycle, ``if_absent``, and the
garbage candidates a write leaves.

The data-object life cycle (docs/objects.md, "Crashes"), the same for an upload and a
batch's ``put`` entries (:mod:`lsmstore.operations.batch`): the data is written
completely (atomically) under a fresh ``data/<id>`` key *before* its entry is staged;
the write is acknowledged only once the entry is.  A crash in between leaves at most an
unreferenced data object and no entry.  When staging fails with a definite error the
data is deleted at once; when its outcome is unknown (or the caller was cancelled while
it was in flight) the data is recorded as a garbage candidate instead, since the entry
may have landed (:func:`settle_failed_data`).

Replaced data: a write that replaces or deletes an object whose entry is *staged* (not
committed) records the old ``data/`` object as a garbage candidate
(:func:`record_replaced`); committed data is never a candidate (GC's mark phase decides).
``link``/``link_many`` and raw writes look nothing up and leave such data to the GC
job's orphan scan.

``if_absent`` (lakeFS's ``If-None-Match: *``) is decided by the RefStore, so it holds
across every process sharing it (several servers, embedded writers): check and stage run
under a *claim* of the path (:func:`claim_absent`) -- an in-process lock, then the
RefStore lease ``absent/<repository id>/<branch>/<digest of the path>``, taken by a
compare-and-set in the RefStore, polled while another process holds it.  Under the
claim the path is looked up on a ref fetched from the RefStore after the claim was
taken (never a cached one), and the entry is staged (appended to the branch's L1,
acknowledged) before the claim is released; of two writers racing on one path the
second therefore sees the first's entry and fails with ObjectExistsError.  An upload
writes its data *before* taking the claim (after a cheap first check that fails
fast), so the claim is held only for one lookup and one append; the data of a writer
that loses is deleted at once (nothing ever referenced it).  The lease lives
:data:`CLAIM_TTL_S` and its holder renews it every third of that while it holds the
claim (an append may wait at the L1 hard limit for up to ``stall_timeout_s``): a
process that dies holding it blocks the path at most :data:`CLAIM_TTL_S`, a live one
keeps it however long its append takes.  Only a holder whose event loop is stalled
for two thirds of :data:`CLAIM_TTL_S` (a paused process) could let a second writer
through (docs/decisions.md).  A writer that cannot take a claim within
:data:`CLAIM_WAIT_S` raises ConflictError (nothing written).

Exclusion: every write here holds the branch's shared lock
(:mod:`lsmstore.operations.exclusion`) while it stages.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from lsmstore import layout, validate
from lsmstore.errors import (
    ConflictError,
    InvalidInputError,
    LsmError,
    ObjectExistsError,
    ObjectNotFoundError,
    UnavailableError,
)
from lsmstore.gc.data import record_candidates
from lsmstore.graveler.record import Record
from lsmstore.objects.addresses import Namespace
from lsmstore.objects.api import ObjectReads, find_object, namespace, object_stats
from lsmstore.objects.entry import AddressType, ObjectEntry, decode_entry, encode_value
from lsmstore.objects.linking import LinkStager, link_entry, made_record
from lsmstore.objects.model import LinkItem, inline_stats
from lsmstore.objects.rules import check_content_type, check_metadata, check_path
from lsmstore.objects.source import Source
from lsmstore.staging.files import new_file_id
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.types import ObjectLink, ObjectStats

if TYPE_CHECKING:
    from lsmstore.client import Branch, Repository

_new_tuple = tuple.__new__
log = logging.getLogger(__name__)

#: Per repository, a :class:`LinkStager` whose ``at`` makes each call's (its rules are
#: the namespace's and the store configuration's, both fixed for a repository object).
_stagers: weakref.WeakKeyDictionary[Repository, LinkStager] = weakref.WeakKeyDictionary()

#: One lock per (store, repository, branch, path) while an ``if_absent`` write checks and
#: stages; weakly held, so a lock lives only while someone waits on or holds it.
_path_locks: weakref.WeakValueDictionary[tuple[int, str, str, bytes], asyncio.Lock] = (
    weakref.WeakValueDictionary()
)
#: How long an ``if_absent`` claim's RefStore lease lives unless renewed (its holder
#: renews it every third of this until it releases it after one lookup and one append;
#: a holder that died blocks the path this long).
CLAIM_TTL_S = 15.0
#: How long a writer waits for another writer's claim of the same path.
CLAIM_WAIT_S = 60.0


# --- the rules shared by every object write ---------------------------------------------


def now_of(branch: Branch) -> tuple[int, int]:
    """The store clock's now as ``(seconds, nanoseconds)``, an entry's mtime."""
    t = branch.repository.store.clock()
    s = int(t)
    return s, min(int((t - s) * 1e9), 999_999_999)


def entry_record(branch: Branch, key: bytes, entry: ObjectEntry) -> Record:
    """The staged record of ``entry`` at ``key`` (EntryTooLargeError past the value bound)."""
    return made_record(key, *encode_value(entry), branch.repository.store.config.max_value_bytes)


def link_stager(branch: Branch, now: tuple[int, int]) -> LinkStager:
    """A :class:`LinkStager` of the branch's repository for one call."""
    repo = branch.repository
    stager = _stagers.get(repo)
    if stager is None:
        stager = _stagers[repo] = LinkStager(namespace(repo), repo.store.config, now)
    return stager.at(now)  # never the cached one itself: its makers would grow


def path_lock(branch: Branch, key: bytes) -> asyncio.Lock:
    """The lock that serialises ``if_absent`` check-and-stage on one path in this
    process (the first half of :func:`claim_absent`)."""
    repo = branch.repository
    ident = (id(repo.store), repo.name, branch.name, key)
    lock = _path_locks.get(ident)
    if lock is None:
        lock = _path_locks[ident] = asyncio.Lock()
    return lock


def claim_key(branch: Branch, key: bytes) -> str:
    """The RefStore lease that claims ``key`` of the branch for an ``if_absent`` write:
    keyed by the repository's id (never reused) where it has one."""
    repo = branch.repository
    digest = hashlib.sha256(key).hexdigest()[:40]
    return f"absent/{repo.info.uid or repo.name}/{branch.name}/{digest}"


@contextlib.asynccontextmanager
async def claim_absent(branch: Branch, keys: Iterable[bytes]) -> AsyncIterator[None]:
    """Claim ``keys`` of the branch for ``if_absent`` check-and-stage across processes
    (module docstring): in key order (one order: no deadlock), each key's in-process
    lock, then its RefStore lease.  ConflictError when a lease stays held by another
    writer for :data:`CLAIM_WAIT_S`; every lease taken is released on exit."""
    repo = branch.repository
    refstore = repo.store.refstore
    clock = repo.store.clock
    owner = f"absent-{new_file_id(clock)}"
    leases: list[str] = []
    async with contextlib.AsyncExitStack() as held:
        # Renewing from the start: the leases taken first must outlive the wait for later
        # ones (up to CLAIM_WAIT_S each) and the taking of a large batch's others.
        renewing = asyncio.create_task(_renew(refstore, leases, owner))
        held.push_async_callback(_stop, renewing)  # runs before the leases are released
        for key in sorted(set(keys)):
            await held.enter_async_context(path_lock(branch, key))
            lease = claim_key(branch, key)
            deadline = clock() + CLAIM_WAIT_S
            pause = 0.002
            while not await refstore.acquire_lease(lease, owner, CLAIM_TTL_S):
                if clock() >= deadline:
                    path = key.decode("utf-8", "surrogateescape")
                    raise ConflictError(
                        f"{repo.name}/{branch.name}: another if-absent write of {path!r} "
                        f"held it for {CLAIM_WAIT_S:g} s; nothing was written"
                    )
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.05)
            leases.append(lease)
            held.push_async_callback(_release, refstore, lease, owner)
        yield


#: Lease renewals of one claim in flight at once (a batch may claim thousands of paths).
RENEW_CONCURRENCY = 64


async def _renew(refstore: Any, leases: list[str], owner: str) -> None:
    """Renew the leases a claim holds so far (``leases`` grows while it takes more) every
    third of :data:`CLAIM_TTL_S` until cancelled, :data:`RENEW_CONCURRENCY` at a time; a
    renewal that fails is tried again at the next turn (two are left before the lease
    lapses)."""
    gate = asyncio.Semaphore(RENEW_CONCURRENCY)

    async def one(lease: str) -> None:
        async with gate:
            try:
                if not await refstore.acquire_lease(lease, owner, CLAIM_TTL_S):
                    log.warning("if-absent claim %s lapsed while held", lease)
            except LsmError as e:
                log.warning("renewing if-absent claim %s failed: %s", lease, e)

    while True:
        await asyncio.sleep(CLAIM_TTL_S / 3)
        await asyncio.gather(*(one(lease) for lease in list(leases)))


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _release(refstore: Any, lease: str, owner: str) -> None:
    """Release a claim's lease; one that fails expires after :data:`CLAIM_TTL_S`."""
    with contextlib.suppress(Exception):
        await asyncio.shield(refstore.release_lease(lease, owner))


def staged_data_address(value: bytes | None, staged: bool) -> str | None:
    """The relative ``data/`` address of a *staged* object entry's value (data a write
    replacing it makes a garbage candidate), else None: committed, a raw value, a link
    outside ``data/``, or absent."""
    if value is None or not staged:
        return None
    try:
        entry = decode_entry(value, "")
    except LsmError:
        return None  # a raw value: no data of ours behind it
    if entry.is_relative() and entry.address.startswith(layout.DATA):
        return entry.address
    return None


async def previous(branch: Branch, key: bytes) -> tuple[bool, str | None]:
    """Whether ``key`` holds an object now, and :func:`staged_data_address` of it."""
    rec, staged = await branch.view.lookup(key)
    if rec is None or rec.value is None:
        return False, None
    return True, staged_data_address(rec.value, staged)


async def previous_many(branch: Branch, keys: Sequence[bytes]) -> list[str | None]:
    """:func:`staged_data_address` of each key, from one snapshot of the branch and
    without a task per key: warm keys are answered without awaiting."""
    try:
        snap = await branch.view.snapshot()
        out: list[str | None] = []
        for key in keys:
            found = snap.lookup_cached(key)
            if found is None:
                found = await snap.lookup(key)
            rec, staged = found
            out.append(staged_data_address(rec.value if rec is not None else None, staged))
        return out
    except ObjectNotFoundError:  # a staging file collected under the snapshot
        return [old for _, old in await asyncio.gather(*(previous(branch, k) for k in keys))]


async def record_replaced(
    branch: Branch, items: Iterable[tuple[bytes, str | None, str | None]], reason: str
) -> None:
    """Record the old data addresses that ``(key, old, new)`` writes replaced."""
    found = [
        (key.decode("utf-8", "surrogateescape"), old)
        for key, old, new in items
        if old is not None and old != new
    ]
    if found:
        repo = branch.repository
        await record_candidates(
            repo.objects, repo.name, branch.name, found, reason=reason, clock=repo.store.clock
        )


def outcome_unknown(e: BaseException) -> bool:
    """Whether a failed staging may still have landed (not a definite LsmError)."""
    return not isinstance(e, LsmError) or (isinstance(e, UnavailableError) and e.outcome_unknown)


async def settle_failed_data(
    branch: Branch, written: Sequence[tuple[str, str]], error: BaseException
) -> None:
    """After staging the entries of freshly written data failed with ``error``: delete
    the data (``(path, data key)`` pairs) when the entries surely did not land, record
    it as garbage candidates when they may have (module docstring)."""
    if not written:
        return
    repo = branch.repository
    if outcome_unknown(error):
        await asyncio.shield(record_candidates(
            repo.objects, repo.name, branch.name, list(written), reason="stage-unknown",
            clock=repo.store.clock,
        ))  # fmt: skip
        return
    for _, key in written:
        with contextlib.suppress(Exception):  # unreferenced: the orphan scan finds it
            await asyncio.shield(repo.objects.delete(key))


def new_data_key(branch: Branch) -> str:
    """A fresh ``data/<id>`` key of the branch's storage namespace."""
    return layout.data_key(new_file_id(branch.repository.store.clock))


class ObjectWrites(ObjectReads):
    """The object writes of a Branch (module docstring)."""

    name: str

    def new_physical_address(self) -> str:
        """A fresh full URI under the namespace's ``data/`` for a client to write an
        object's data to before linking it (lakeFS's ``getPhysicalAddress``)."""
        return namespace(self.repository).base + new_data_key(cast("Branch", self))

    async def upload(
        self,
        path: str,
        data: Any,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        if_absent: bool = False,
    ) -> ObjectStats:
        """Write ``data`` (bytes, a file path, a binary file object or an async iterable
        of chunks) as the object at ``path``, streamed to ``data/<id>`` in the storage
        namespace, then stage its entry; returns once the entry is durable and ordered.

        ``checksum`` is the MD5 hex of the contents.  ``if_absent``: ObjectExistsError
        when the path holds an object (nothing is uploaded).  Bad input raises
        InvalidNameError/InvalidInputError before any I/O.
        """
        branch = cast("Branch", self)
        repo = self.repository
        key = check_path(path, repo.store.config.max_key_bytes)
        ct = check_content_type(content_type)
        md = check_metadata(metadata)
        source = Source(data)
        ns = namespace(repo)
        async with repo.store.exclusion.shared(repo.name, self.name):
            if if_absent and (await previous(branch, key))[0]:
                raise ObjectExistsError(path)  # the cheap first check: nothing uploaded
            data_key = new_data_key(branch)
            payload = source.small()
            durable = None
            if payload is not None:
                # One worker-thread hop; its data becomes durable while the entry is
                # staged and batched, and the writer appends the entry only after.
                durable = await repo.objects.put_fresh(data_key, payload)
            else:
                await repo.objects.put_stream(data_key, source, PutMode.CREATE)
            secs, nanos = now_of(branch)
            entry = ObjectEntry(
                data_key, AddressType.RELATIVE, source.size, source.md5hex, secs, nanos, ct, md
            )
            claim = claim_absent(branch, [key]) if if_absent else contextlib.nullcontext()
            try:
                async with claim:
                    exists, old = await previous(branch, key)
                    if if_absent and exists:
                        raise ObjectExistsError(path)  # the deciding check (docstring)
                    await branch.writer().write(entry_record(branch, key, entry), durable)
            except BaseException as e:
                if durable is not None and not durable.done():
                    with contextlib.suppress(BaseException):
                        await asyncio.shield(durable)  # delete only a finished write
                await settle_failed_data(branch, [(path, data_key)], e)
                raise
        await record_replaced(branch, [(key, old, data_key)], "overwritten")
        return object_stats(path, entry, ns)

    async def link(
        self,
        path: str,
        physical_address: str,
        *,
        size: int,
        checksum: str,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        mtime: int | None = None,
        if_absent: bool = False,
        verify: bool = False,
    ) -> ObjectStats:
        """Register an object whose data is already at ``physical_address`` (a full URI
        inside the storage namespace, or under an allowed external prefix).
        ``verify`` checks that the data exists with exactly ``size`` bytes
        (InvalidInputError otherwise).  ``mtime`` defaults to now.  ``if_absent``:
        ObjectExistsError when the path holds an object (checked and staged as one
        step, module docstring).

        Like ``link_many``, it looks nothing up unless ``if_absent`` asks it to (and
        then the path holds no object to replace): the data of a staged object it
        replaces is left to the GC job's orphan scan, no candidate is recorded."""
        branch = cast("Branch", self)
        repo = self.repository
        key = check_path(path, repo.store.config.max_key_bytes)
        ns = namespace(repo)
        link = ObjectLink(path, physical_address, size, checksum, content_type, metadata, mtime)
        entry = link_entry(ns, link, now_of(branch))
        if verify:
            await self._verify(ns, path, entry)
        record = entry_record(branch, key, entry)
        async with repo.store.exclusion.shared(repo.name, self.name):
            if if_absent:
                async with claim_absent(branch, [key]):
                    if (await previous(branch, key))[0]:
                        raise ObjectExistsError(path)
                    await branch.writer().write(record)
            else:
                await branch.writer().write(record)
        return object_stats(path, entry, ns)

    async def _verify(self, ns: Namespace, path: str, entry: ObjectEntry) -> None:
        repo = self.repository
        loc = ns.locate(entry, path)
        store: ObjectStore = (
            repo.objects if loc.store_url is None else repo.store.objects(loc.store_url)
        )
        try:
            meta = await store.head(loc.key)
        except ObjectNotFoundError:
            raise InvalidInputError(
                f"link of {path!r}: no object at {ns.full_address(entry)}"
            ) from None
        if meta.size != entry.size:
            raise InvalidInputError(
                f"link of {path!r}: the object at {ns.full_address(entry)} has {meta.size} "
                f"bytes, not {entry.size}"
            )

    async def link_many(self, links: Iterable[LinkItem]) -> None:
        """Register many objects in one batch with one acknowledgement (the
        high-throughput write path).  A link is an :class:`ObjectLink` or its tuple form
        (:data:`~lsmstore.objects.model.LinkTuple`, cheaper to build).  Every link is
        checked first: one bad link stages none.  A path given twice keeps its last
        link.  Unlike the single-path writes, it looks nothing up, so it records no
        garbage candidates: data it replaced is found by the GC job's scan for
        unreferenced ``data/`` objects."""
        branch = cast("Branch", self)
        staged = link_stager(branch, now_of(branch)).stage_all(links)
        if staged:
            repo = self.repository
            async with repo.store.exclusion.shared(repo.name, self.name):
                await branch.writer().write_staged(staged)

    async def delete_object(self, path: str) -> None:
        """Delete the object at ``path``; ObjectNotFoundError when there is none."""
        branch = cast("Branch", self)
        repo = self.repository
        key = check_path(path, repo.store.config.max_key_bytes)
        async with repo.store.exclusion.shared(repo.name, self.name):
            exists, old = await previous(branch, key)
            if not exists:
                raise ObjectNotFoundError(path, f"object {path!r} not found in {self._where()}")
            await branch.writer().write(Record(key, b"", None))
        await record_replaced(branch, [(key, old, None)], "deleted")

    async def delete_objects(self, paths: Iterable[str]) -> None:
        """Delete many objects in one batch; absent paths are ignored."""
        branch = cast("Branch", self)
        repo = self.repository
        max_key = repo.store.config.max_key_bytes
        checked = validate.check_items(paths, "delete_objects paths")
        keys = list(dict.fromkeys(check_path(p, max_key) for p in checked))
        if not keys:
            return
        async with repo.store.exclusion.shared(repo.name, self.name):
            olds = [(await previous(branch, k))[1] for k in keys]
            await branch.writer().write_many([Record(k, b"", None) for k in keys])
        await record_replaced(branch, zip(keys, olds, [None] * len(keys), strict=True), "deleted")

    async def copy_object(
        self, src_path: str, dst_path: str, *, src_ref: str | None = None
    ) -> ObjectStats:
        """Make ``dst_path`` an object with the data of ``src_path`` (read on
        ``src_ref``, default this branch): the same physical address, no copy of data;
        a new mtime.  ObjectNotFoundError when the source is absent."""
        branch = cast("Branch", self)
        repo = self.repository
        max_key = repo.store.config.max_key_bytes
        check_path(src_path, max_key)
        key = check_path(dst_path, max_key)
        source: ObjectReads = repo.ref(src_ref) if src_ref is not None else self
        src, rec = await find_object(source, src_path)
        async with repo.store.exclusion.shared(repo.name, self.name):
            _, old = await previous(branch, key)
            if src is None:  # an inline object: its copy is the same record
                await branch.writer().write(_new_tuple(Record, (key, rec.identity, rec.value)))
            else:
                entry = copied_entry(src, now_of(branch))
                await branch.writer().write(entry_record(branch, key, entry))
        if src is None:
            await record_replaced(branch, [(key, old, None)], "overwritten")
            return inline_stats(dst_path, cast(bytes, rec.value), rec.identity)
        new = entry.address if entry.is_relative() else None
        await record_replaced(branch, [(key, old, new)], "overwritten")
        return object_stats(dst_path, entry, namespace(repo))


async def copy_data(
    source: ObjectReads,
    src_path: str,
    branch: Branch,
    dst_path: str,
    *,
    content_type: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> ObjectStats:
    """Copy the object ``src_path`` of ``source`` (a ref of *any* repository) to
    ``dst_path`` of ``branch`` as new data: streamed into a fresh ``data/<id>`` of the
    branch's namespace and staged as :meth:`ObjectWrites.upload` does (its life cycle and
    acknowledgement).  The copy between repositories: an entry never links into another
    repository's namespace, whose owner may delete the data (docs/objects.md).
    ``content_type`` / ``metadata`` None: the source's.  ObjectNotFoundError when the
    source is absent."""
    reader = await source.open(src_path)
    try:
        s = reader.stats
        ct = content_type if content_type is not None else s.content_type
        md = metadata if metadata is not None else s.metadata

        async def chunks() -> AsyncIterator[bytes]:
            async for chunk in reader.iter_chunks(0, s.size):
                yield chunk

        return await branch.upload(dst_path, chunks(), content_type=ct, metadata=md)
    finally:
        await reader.aclose()


def copied_entry(src: ObjectEntry, now: tuple[int, int]) -> ObjectEntry:
    """The entry of a copy of ``src``: the same data, a new mtime."""
    return ObjectEntry(
        src.address, src.address_type, src.size, src.etag, now[0], now[1], src.content_type,
        dict(src.metadata),
    )  # fmt: skip
