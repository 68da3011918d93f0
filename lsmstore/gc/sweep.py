"""The sweep: delete what two marks, at least a grace period apart, found unreachable.

**The rule that keeps live objects.**  An object is deleted only when it was a
candidate of two marks of its namespace -- listed and not live -- and the earlier mark
started at least ``grace_s`` before the later one.  Each mark lists before it reads
references (:mod:`lsmstore.gc.mark`).  Every operation that makes an object live does
so within the grace period of writing it or of reading a live reference to it: a writer
appends the staging file it uploaded, a compaction or a Spark job swaps or stages its
outputs (both refuse outputs older than half the grace period), a committer or a merge
moves a branch onto the commit it wrote, reusing ranges of a tree it read from a ref, a
copy or a new branch refers to what it read a moment earlier.  So an object that is
live at any time between the two marks -- or becomes live from a reference that was --
is live at one of them, or was written after the earlier one listed.  A reader holding
an old ref value keeps reading its files for the grace period as well: a staging file a
compaction replaced is unreferenced at both marks only if it left its ref at least a
grace period before the later one.

A run of :func:`collect` marks the namespace, deletes the candidates the newest earlier
mark at least ``grace_s`` old shares with this one (data, its candidate records, then
staging files, ranges and metaranges, then commits), stores its own candidates for a
later run, and writes a report.  ``dry_run`` stores the mark and writes the report of
what would go, deleting nothing.  A crash anywhere leaves objects that the next runs
delete (deletes are idempotent) -- never a live one deleted.

Marks: ``_lsm/gc/marks/<mark id>.json.gz``; reports: ``_lsm/gc/reports/<mark id>.json``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from lsmstore import layout
from lsmstore.errors import CorruptFileError, ObjectNotFoundError
from lsmstore.gc.mark import Mark
from lsmstore.storage.base import ObjectStore, PutMode

log = logging.getLogger(__name__)

MARKS = f"{layout.PREFIX}/gc/marks/"
REPORTS = f"{layout.PREFIX}/gc/reports/"
FORMAT = "lsmstore-gc-mark"
DELETE_CONCURRENCY = 16
#: Earlier marks kept besides the one a run used (for operators reading them).
KEEP_MARKS = 2


@dataclass
class Report:
    repo: str
    namespace: str
    mark_id: str
    started: float
    dry_run: bool
    previous_mark: str | None
    listed: int
    live: int
    kept_commits: int
    candidates: int
    deleted: dict[str, int] = field(default_factory=dict)  # area -> objects
    deleted_keys: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)


def _area(key: str) -> str:
    for name, prefix in (
        ("data", layout.DATA),
        ("data-records", layout.DATA_GC),
        ("staging", layout.STAGING),
        ("ranges", layout.RANGES),
        ("commits", layout.COMMITS),
    ):
        if key.startswith(prefix):
            return name
    return "other"


def encode_mark(mark: Mark) -> bytes:
    doc = {
        "format": FORMAT,
        "version": 1,
        "mark_id": mark.mark_id,
        "repo": mark.repo,
        "namespace": mark.namespace,
        "started": mark.started,
        "candidates": sorted(mark.candidates),
    }
    return gzip.compress(json.dumps(doc).encode("utf-8"), 6)


def decode_mark(data: bytes, name: str) -> Mark:
    try:
        doc = json.loads(gzip.decompress(data))
        if doc.get("format") != FORMAT or doc.get("version") != 1:
            raise ValueError("not a mark")
        return Mark(
            str(doc["mark_id"]),
            str(doc["repo"]),
            str(doc["namespace"]),
            float(doc["started"]),
            candidates={str(k) for k in doc["candidates"]},
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CorruptFileError(name, f"malformed GC mark: {e}") from None


async def _marks(objects: ObjectStore) -> list[str]:
    return sorted([m.key async for m in objects.list(MARKS)])


async def previous_mark(objects: ObjectStore, *, before: float) -> Mark | None:
    """The newest stored mark that started at or before ``before`` (corrupt ones are
    skipped)."""
    for key in reversed(await _marks(objects)):
        try:
            mark = decode_mark(await objects.get(key), key)
        except (CorruptFileError, ObjectNotFoundError) as e:
            log.warning("gc: skipping mark %s: %s", key, e)
            continue
        if mark.started <= before:
            return mark
    return None


async def _delete(objects: ObjectStore, keys: Iterable[str]) -> None:
    limit = asyncio.Semaphore(DELETE_CONCURRENCY)

    async def one(k: str) -> None:
        async with limit:
            await objects.delete(k)

    await asyncio.gather(*(one(k) for k in keys))


async def collect(
    objects: ObjectStore,
    mark: Mark,
    *,
    grace_s: float,
    dry_run: bool = False,
    clock: Callable[[], float] = time.time,
) -> Report:
    """Sweep with ``mark`` (just made) and the newest earlier mark ``grace_s`` older."""
    if not grace_s > 0:
        raise ValueError("grace period must be > 0")
    prev = await previous_mark(objects, before=mark.started - grace_s)
    doomed = sorted(prev.candidates & mark.candidates) if prev is not None else []
    await objects.put(f"{MARKS}{mark.mark_id}.json.gz", encode_mark(mark), PutMode.CREATE)
    report = Report(
        mark.repo,
        mark.namespace,
        mark.mark_id,
        mark.started,
        dry_run,
        prev.mark_id if prev is not None else None,
        mark.listed,
        mark.live,
        mark.kept_commits,
        len(mark.candidates),
    )
    by_area: dict[str, list[str]] = {}
    for k in doomed:
        by_area.setdefault(_area(k), []).append(k)
    report.deleted = {a: len(ks) for a, ks in by_area.items()}
    report.deleted_keys = doomed
    if not dry_run:
        # Data before the entries that point at it; commits last, so a crash leaves
        # commits whose trees are partly gone only among unreachable ones.
        for area in ("data", "data-records", "staging", "ranges", "commits", "other"):
            await _delete(objects, by_area.get(area, ()))
    await objects.put(
        f"{REPORTS}{mark.mark_id}.json", report.to_json().encode("utf-8"), PutMode.OVERWRITE
    )
    if prev is not None and not dry_run:
        older = [k for k in await _marks(objects) if k < f"{MARKS}{prev.mark_id}"]
        await _delete(objects, older[: max(0, len(older) - KEEP_MARKS)])
    return report
