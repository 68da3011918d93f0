"""Staging files that left a ref: durable records, and deletion after a grace period.

Readers may hold an old ref value for a while, so a staging file that a compaction (or
a commit) removed from a ref is deleted only ``grace`` seconds later.  Nothing may leak
forever either, whatever process crashes where.  Two kinds of small, immutable JSON
objects (docs/compaction.md, "Garbage records") make this durable::

    _lsm/gc/<branch>/<record id>.intent    written by a job before its swap
    _lsm/gc/<branch>/<record id>.garbage   files to delete once ``due_ms`` has passed

Record ids are staging-file-style ids (time-sortable, unique); records are written in
create mode and deleted once handled, never changed.

:class:`Sweeper` does the deleting, per repository (or per branch).  One sweep lists
the GC records and the staging files, *then* reads the refs, and:

1. An **intent** younger than the grace period is left alone (its job may still be
   running).  An older one belongs to a finished or dead job (jobs never swap outputs
   older than half the grace period): every file it names that the ref does not hold
   becomes garbage due one grace period from now; the intent is then deleted.
2. A **garbage** record past ``due_ms``: each file it names that the ref does not hold
   is deleted (SST, then sidecar), then the record.  A file the ref holds again is
   forgotten (it gets a new record when it leaves).
3. An **orphan** -- a staging file no ref or workspace holds and no record names, older than the
   grace period by its id -- is recorded as garbage due one grace period from now.
   This catches what a crash between two steps left behind (an L1 file uploaded but
   never appended, outputs of a killed job, inputs of a swap whose garbage record was
   never written, files a commit removed without recording them, branches deleted).
   Files younger than the grace period are never touched: a writer may have uploaded
   one it is about to append, or a job be about to swap it in.

So an unreferenced file is deleted at least one grace period after it was last seen in
a ref, and every unreferenced file is deleted within about two grace periods plus two
sweep intervals.  Clocks of the machines involved must agree to well within half the
grace period.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lsmstore import layout
from lsmstore.compaction.policy import file_time
from lsmstore.errors import (
    CorruptFileError,
    InvalidNameError,
    ObjectExistsError,
    ObjectNotFoundError,
)
from lsmstore.layout import Level
from lsmstore.namespace import verify_owner
from lsmstore.refstore.base import RefStore
from lsmstore.refstore.names import (
    check_file_id,
    check_ref_name,
    check_staged_entry,
    locate_entry,
)
from lsmstore.staging.files import SIDECAR_SUFFIX, SST_SUFFIX, new_file_id
from lsmstore.storage.base import ObjectStore, PutMode

log = logging.getLogger(__name__)

GC_PREFIX = f"{layout.PREFIX}/gc/"
FORMAT = "lsmstore-gc"
VERSION = 1
RecordKind = Literal["intent", "garbage"]
KINDS: tuple[RecordKind, ...] = ("intent", "garbage")
#: A staging file: ``(level, id)``.
StagedFile = tuple[Level, str]

#: Concurrent deletes of one sweep.
DELETE_CONCURRENCY = 16
#: Refs and workspaces fetched per listing call.
REFS_PER_CALL = 1000
#: Listings of a repository's holders tried per sweep while stashes and pops move
#: files between them; then the repository waits for the next sweep.
REFERENCE_ATTEMPTS = 3


def gc_prefix(branch: str) -> str:
    return f"{GC_PREFIX}{check_ref_name(branch)}/"


def record_key(branch: str, record_id: str, kind: RecordKind) -> str:
    return f"{gc_prefix(branch)}{check_file_id(record_id)}.{kind}"


@dataclass(frozen=True, slots=True)
class GcRecord:
    """One GC record (see the module docstring).

    ``files`` are what the record is about: for an intent, the job's inputs (L1 prefix,
    old L2) and outputs (new L2); for a garbage record, the files to delete.  The
    intent also keeps the swap's arguments, for operators reading it.
    """

    kind: RecordKind
    repo: str
    branch: str
    created_ms: int
    files: tuple[StagedFile, ...]
    due_ms: int = 0
    reason: str = ""
    base: str = ""
    l1_prefix: tuple[str, ...] = ()
    l2_old: tuple[str, ...] = ()
    l2_new: tuple[str, ...] = ()

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "kind": self.kind,
            "repo": self.repo,
            "branch": self.branch,
            "created_ms": self.created_ms,
            "files": [list(f) for f in self.files],
        }
        if self.kind == "garbage":
            doc["due_ms"] = self.due_ms
            doc["reason"] = self.reason
        else:
            doc["swap"] = {
                "base": self.base,
                "l1_prefix": list(self.l1_prefix),
                "l2_old": list(self.l2_old),
                "l2_new": list(self.l2_new),
            }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_record(data: bytes, name: str) -> GcRecord:
    """Parse a GC record; CorruptFileError naming ``name`` when it is not one."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("not a GC record")
        if doc.get("version") != VERSION:
            raise ValueError(f"unsupported version {doc.get('version')!r}")
        kind = doc["kind"]
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        files: list[StagedFile] = []
        for item in doc["files"]:
            level, fid = item
            if level not in ("L1", "L2"):
                raise ValueError(f"bad level {level!r}")
            files.append((level, check_staged_entry(fid)))
        created, due = doc["created_ms"], doc.get("due_ms", 0)
        if not isinstance(created, int) or not isinstance(due, int):
            raise ValueError("times must be integers")
        swap = doc.get("swap", {})
        return GcRecord(
            kind=kind,
            repo=str(doc["repo"]),
            branch=check_ref_name(doc["branch"]),
            created_ms=created,
            files=tuple(files),
            due_ms=due,
            reason=str(doc.get("reason", "")),
            base=str(swap.get("base", "")),
            l1_prefix=tuple(map(check_staged_entry, swap.get("l1_prefix", ()))),
            l2_old=tuple(map(check_file_id, swap.get("l2_old", ()))),
            l2_new=tuple(map(check_file_id, swap.get("l2_new", ()))),
        )
    except (ValueError, KeyError, TypeError, InvalidNameError) as e:
        raise CorruptFileError(name, f"malformed GC record: {e}") from None


async def write_record(
    objects: ObjectStore, record: GcRecord, clock: Callable[[], float] = time.time
) -> str:
    """Store ``record`` under a fresh id (create mode); its object key."""
    for attempt in range(2):
        key = record_key(record.branch, new_file_id(clock), record.kind)
        try:
            await objects.put(key, record.encode(), PutMode.CREATE)
            return key
        except ObjectExistsError:
            if attempt:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def intent_record(
    repo: str,
    branch: str,
    *,
    base: str,
    l1_prefix: Sequence[str],
    l2_old: Sequence[str],
    l2_new: Sequence[str],
    now: float,
) -> GcRecord:
    files: list[StagedFile] = [("L1", f) for f in l1_prefix]
    files += [("L2", f) for f in dict.fromkeys((*l2_old, *l2_new))]
    return GcRecord(
        "intent",
        repo,
        branch,
        int(now * 1000),
        tuple(files),
        base=base,
        l1_prefix=tuple(l1_prefix),
        l2_old=tuple(l2_old),
        l2_new=tuple(l2_new),
    )


def garbage_record(
    repo: str, branch: str, files: Iterable[StagedFile], *, now: float, due: float, reason: str
) -> GcRecord:
    return GcRecord(
        "garbage",
        repo,
        branch,
        int(now * 1000),
        tuple(dict.fromkeys(files)),
        due_ms=int(due * 1000),
        reason=reason,
    )


async def record_garbage(
    objects: ObjectStore,
    repo: str,
    branch: str,
    files: Iterable[StagedFile],
    *,
    grace_s: float,
    reason: str,
    clock: Callable[[], float] = time.time,
) -> str | None:
    """Record ``files`` (which just left the branch's ref) as garbage due ``grace_s``
    from now.  For any process that removes staging files from a ref (the committer
    after ``swap_committed``).  Returns the record's key (None: nothing to record)."""
    files = list(files)
    if not files:
        return None
    now = clock()
    rec = garbage_record(repo, branch, files, now=now, due=now + grace_s, reason=reason)
    return await write_record(objects, rec, clock)


def staged_keys(branch: str, f: StagedFile) -> list[str]:
    level, fid = f
    return [layout.staging_key(branch, level, fid, s) for s in (SST_SUFFIX, SIDECAR_SUFFIX)]


async def delete_files(objects: ObjectStore, branch: str, files: Iterable[StagedFile]) -> int:
    """Delete each file's SST, then its sidecar (missing ones are fine); how many keys."""
    sem = asyncio.Semaphore(DELETE_CONCURRENCY)

    async def one(f: StagedFile) -> int:
        async with sem:
            n = 0
            for key in staged_keys(branch, f):
                await objects.delete(key, missing_ok=True)
                n += 1
            return n

    return sum(await asyncio.gather(*(one(f) for f in files)))


# --- the sweep ---------------------------------------------------------------------


@dataclass(slots=True)
class SweepResult:
    repo: str
    branches: int = 0
    records: int = 0  # GC records read
    intents_resolved: int = 0
    marked: int = 0  # files newly recorded as garbage (expired intents and orphans)
    orphans: int = 0  # of which orphans
    deleted_files: int = 0
    deleted_bytes: int = 0
    deleted_records: int = 0
    corrupt_records: int = 0
    errors: list[str] = field(default_factory=list)

    def to_log(self) -> dict[str, Any]:
        return {
            "event": "sweep",
            "repo": self.repo,
            "branches": self.branches,
            "records": self.records,
            "intents_resolved": self.intents_resolved,
            "marked": self.marked,
            "orphans": self.orphans,
            "deleted_files": self.deleted_files,
            "deleted_bytes": self.deleted_bytes,
            "deleted_records": self.deleted_records,
            "corrupt_records": self.corrupt_records,
            "errors": self.errors,
        }


def _parse_gc_key(key: str) -> tuple[str, str, RecordKind] | None:
    """``(branch, record id, kind)`` of ``_lsm/gc/<branch>/<id>.<kind>``, else None."""
    rest = key[len(GC_PREFIX) :]
    branch, _, name = rest.partition("/")
    rid, _, kind = name.rpartition(".")
    if not branch or "/" in name or kind not in KINDS:
        return None
    try:
        check_ref_name(branch)
        check_file_id(rid)
    except InvalidNameError:
        return None
    return branch, rid, kind


def _parse_staging_key(key: str) -> tuple[str, StagedFile] | None:
    """``(branch, (level, id))`` of ``_lsm/staging/<branch>/<level>/<id>.<sst|meta>``."""
    parts = key[len(layout.STAGING) :].split("/")
    if len(parts) != 3 or parts[1] not in ("L1", "L2"):
        return None
    branch, level, name = parts
    for suffix in (SST_SUFFIX, SIDECAR_SUFFIX):
        if name.endswith(suffix):
            fid = name[: -len(suffix)]
            try:
                check_ref_name(branch)
                check_file_id(fid)
            except InvalidNameError:
                return None
            return branch, (level, fid)  # type: ignore[return-value]
    return None


def _hold(
    held: dict[str, set[StagedFile]], branch: str, level: Level, entries: Iterable[str]
) -> None:
    for e in entries:
        b, lv, fid = locate_entry(branch, level, e)
        held[b].add((lv, fid))  # type: ignore[arg-type]


async def referenced_files(refstore: RefStore, repo: str) -> dict[str, set[StagedFile]] | None:
    """Every staging file a ref or a workspace of ``repo`` names, by the branch whose
    directory holds it (qualified entries resolved: docs/refstore.md, "Workspaces").

    Stashes and pops move files between holders; they are the only operations that do,
    and they bump :meth:`RefStore.move_count`.  The listing is taken between two reads
    of the count and repeated if it moved; ``None`` after :data:`REFERENCE_ATTEMPTS`
    tries (the caller must then treat nothing of the repository as unreferenced).
    """
    for _ in range(REFERENCE_ATTEMPTS):
        before = await refstore.move_count(repo)
        held: dict[str, set[StagedFile]] = defaultdict(set)

        after: str | None = None
        while page := await refstore.list_refs(repo, after=after, limit=REFS_PER_CALL):
            for name, ref in page:
                _hold(held, name, "L1", ref.l1)
                _hold(held, name, "L2", ref.l2)
            after = page[-1][0]
        after = None
        while wss := await refstore.list_workspaces(repo, after=after, limit=REFS_PER_CALL):
            for ws in wss:
                _hold(held, ws.branch, "L1", ws.l1)
                _hold(held, ws.branch, "L2", ws.l2)
            after = wss[-1].name
        if await refstore.move_count(repo) == before:
            return held
    return None


class Sweeper:
    """Sweeps the staging files of repositories (see the module docstring).

    Keeps decoded GC records by key (they are immutable), so a sweep fetches only new
    records.  ``clock`` is seconds since the epoch (tests inject one).
    """

    def __init__(self, grace_s: float, *, clock: Callable[[], float] = time.time) -> None:
        if not grace_s > 0:
            raise ValueError("grace period must be > 0")
        self.grace_s = grace_s
        self.clock = clock
        self._records: dict[tuple[str, str], GcRecord | None] = {}

    async def _record(self, objects: ObjectStore, key: str) -> GcRecord | None:
        ck = (objects.url, key)
        if ck in self._records:
            return self._records[ck]
        try:
            rec: GcRecord | None = decode_record(await objects.get(key), key)
        except CorruptFileError as e:
            log.warning("sweep: %s", e)
            rec = None
        self._records[ck] = rec
        return rec

    async def sweep(
        self, refstore: RefStore, repo: str, objects: ObjectStore, *, branch: str | None = None
    ) -> SweepResult:
        """One sweep of ``repo`` (whose storage namespace ``objects`` is), or of one branch.
        NotOwnerError (nothing deleted) unless the namespace's marker names ``repo``."""
        await verify_owner(objects, await refstore.get_repository(repo))
        result = SweepResult(repo)
        gc_pfx = GC_PREFIX if branch is None else gc_prefix(branch)
        st_pfx = layout.STAGING if branch is None else layout.staging_prefix(branch)

        # 1. list records and staging files, then read the refs (order matters: a file
        #    listed and then appended is seen as referenced).  Only keys of exactly the
        #    shapes parsed below count; a namespace nested inside this one has none
        #    (its keys are ``<sub>/_lsm/...``, longer), so its files are never touched.
        records: dict[str, list[tuple[str, GcRecord]]] = defaultdict(list)
        listed: set[tuple[str, str]] = set()
        async for meta in objects.list(gc_pfx):
            parsed = _parse_gc_key(meta.key)
            if parsed is None:
                continue
            listed.add((objects.url, meta.key))
            try:
                rec = await self._record(objects, meta.key)
            except ObjectNotFoundError:  # handled meanwhile (its job finished)
                continue
            result.records += 1
            if rec is None or rec.branch != parsed[0] or rec.kind != parsed[2]:
                result.corrupt_records += 1
                continue
            records[parsed[0]].append((meta.key, rec))
        for ck in [k for k in self._records if k[0] == objects.url and k[1].startswith(gc_pfx)]:
            if ck not in listed:
                del self._records[ck]  # deleted by us or another sweeper
        files: dict[str, dict[StagedFile, int]] = defaultdict(dict)  # -> bytes
        async for meta in objects.list(st_pfx):
            parsed_f = _parse_staging_key(meta.key)
            if parsed_f is None:
                continue
            b, f = parsed_f
            files[b][f] = files[b].get(f, 0) + meta.size
        branches = sorted(set(records) | set(files))
        result.branches = len(branches)
        held = await referenced_files(refstore, repo)
        if held is None:
            log.warning("sweep of %s skipped: workspaces kept moving files", repo)
            result.errors.append("workspaces kept moving files; skipped until the next sweep")
            return result

        for b in branches:
            try:
                await self._sweep_branch(
                    objects, repo, b, held.get(b, set()), records[b], files[b], result
                )
            except Exception as e:  # one branch's trouble must not stop the others
                log.warning("sweep of %s/%s failed: %s", repo, b, e)
                result.errors.append(f"{b}: {e}")
        return result

    async def _sweep_branch(
        self,
        objects: ObjectStore,
        repo: str,
        branch: str,
        referenced: set[StagedFile],
        records: list[tuple[str, GcRecord]],
        existing: dict[StagedFile, int],
        result: SweepResult,
    ) -> None:
        now = self.clock()
        now_ms = int(now * 1000)
        grace_ms = int(self.grace_s * 1000)

        def old(f: StagedFile) -> bool:
            t = file_time(f[1])
            return t is None or now - t > self.grace_s

        named: set[StagedFile] = set()
        marks: dict[str, list[StagedFile]] = defaultdict(list)  # reason -> files
        expired_intents: list[str] = []
        delete: set[StagedFile] = set()
        done_records: list[str] = []
        for key, rec in records:
            named.update(rec.files)
            if rec.kind == "intent":
                if now_ms - rec.created_ms < grace_ms:
                    continue
                pending = [f for f in rec.files if f in existing and f not in referenced]
                marks["intent"].extend(pending)
                expired_intents.append(key)
                result.intents_resolved += 1
                continue
            if now_ms < rec.due_ms:
                continue
            waiting = False
            for f in rec.files:
                if f in referenced or f not in existing:
                    continue
                if old(f):
                    delete.add(f)
                else:  # cannot happen unless clocks disagree; wait for it
                    waiting = True
            if not waiting:
                done_records.append(key)
        for f in existing:
            if f not in referenced and f not in named and old(f):
                marks["orphan"].append(f)
                result.orphans += 1

        # 2. write new garbage records before deleting the intents they replace
        for reason, fs in marks.items():
            if fs:
                rec = garbage_record(
                    repo, branch, fs, now=now, due=now + self.grace_s, reason=reason
                )
                await write_record(objects, rec, self.clock)
                result.marked += len(fs)
        for key in expired_intents:
            await objects.delete(key)
            result.deleted_records += 1
        # 3. delete due files, then the records naming them
        if delete:
            await delete_files(objects, branch, delete)
            result.deleted_files += len(delete)
            result.deleted_bytes += sum(existing[f] for f in delete)
        for key in done_records:
            await objects.delete(key)
            result.deleted_records += 1
