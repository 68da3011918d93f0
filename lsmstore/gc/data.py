"""Records of uncommitted object data that may have become garbage.

When an upload, link, copy or delete replaces a path whose newest entry is *staged*
(uncommitted) and that entry's data lives in the repository's ``data/`` area, the old
data object is referenced by no commit through that path any more.  It may still be
referenced elsewhere -- a ``copy_object`` shares addresses, a workspace or another
branch may hold a copy of the entry, a commit made from another process a moment
earlier may contain it -- so nothing is deleted here.  Instead a *candidate record* is
written, a small immutable JSON object::

    _lsm/gc-data/<branch>/<record id>.candidates

    {"format": "lsmstore-data-gc", "version": 1, "repo": ..., "branch": ...,
     "created_ms": ..., "reason": "overwritten" | "deleted" | "stage-unknown",
     "objects": [{"path": ..., "address": "data/..."}, ...]}

The garbage-collection job reads these records and deletes a candidate's data only
after checking that no commit, branch staging or workspace references its address
(mark and sweep); it then deletes the record.  Records are written after the write
that replaced the entry was acknowledged: a crash in between leaves the old data
unrecorded, which the same job finds as an orphan (a ``data/`` object no entry
references, older than its grace period).  Recording is best effort for the same
reason: a failure to write a record is logged, never raised to the writer.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from lsmstore import layout
from lsmstore.errors import CorruptFileError, ObjectExistsError
from lsmstore.refstore.names import check_ref_name
from lsmstore.staging.files import new_file_id
from lsmstore.storage.base import ObjectStore, PutMode

log = logging.getLogger(__name__)

FORMAT = "lsmstore-data-gc"
VERSION = 1
SUFFIX = ".candidates"
REASONS = ("overwritten", "deleted", "stage-unknown")


def candidates_prefix(branch: str | None = None) -> str:
    return layout.DATA_GC if branch is None else f"{layout.DATA_GC}{check_ref_name(branch)}/"


@dataclass(frozen=True, slots=True)
class Candidates:
    """One record: data objects (``(path, relative address)``) that may be garbage."""

    repo: str
    branch: str
    created_ms: int
    reason: str
    objects: tuple[tuple[str, str], ...]

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "repo": self.repo,
            "branch": self.branch,
            "created_ms": self.created_ms,
            "reason": self.reason,
            "objects": [{"path": p, "address": a} for p, a in self.objects],
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_candidates(data: bytes, name: str) -> Candidates:
    """Parse a record; CorruptFileError naming ``name`` when it is not one."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("not a data GC record")
        if doc.get("version") != VERSION:
            raise ValueError(f"unsupported version {doc.get('version')!r}")
        objects = tuple((str(o["path"]), str(o["address"])) for o in doc["objects"])
        created = doc["created_ms"]
        if not isinstance(created, int) or doc["reason"] not in REASONS:
            raise ValueError("bad created_ms or reason")
        return Candidates(
            str(doc["repo"]), check_ref_name(doc["branch"]), created, doc["reason"], objects
        )
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptFileError(name, f"malformed data GC record: {e}") from None


async def record_candidates(
    objects: ObjectStore,
    repo: str,
    branch: str,
    items: Iterable[tuple[str, str]],
    *,
    reason: str,
    clock: Callable[[], float] = time.time,
) -> str | None:
    """Write one record of ``(path, address)`` items; its key, or None when there was
    nothing to record or the write failed (logged: the GC job's orphan scan covers it)."""
    found = tuple(dict.fromkeys(items))
    if not found:
        return None
    rec = Candidates(repo, branch, int(clock() * 1000), reason, found)
    for _ in range(2):
        key = f"{candidates_prefix(branch)}{new_file_id(clock)}{SUFFIX}"
        try:
            await objects.put(key, rec.encode(), PutMode.CREATE)
            return key
        except ObjectExistsError:
            continue
        except Exception as e:
            log.warning(
                "could not record %d garbage candidates of %s/%s: %s", len(found), repo, branch, e
            )
            return None
    return None
