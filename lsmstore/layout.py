"""Where things live inside a storage namespace (docs/design.md, "Layout on the object store").

Everything under ``_lsm/`` is immutable once written; nothing is overwritten.
Objects' data (docs/objects.md) lives under ``data/<id>`` (unique, never reused);
records of uncommitted data that may be garbage under ``_lsm/gc-data/`` (docs/format.md).
"""

from __future__ import annotations

from typing import Literal

from lsmstore.refstore.names import check_file_id, check_ref_name, locate_entry

Level = Literal["L1", "L2"]

PREFIX = "_lsm"
RANGES = f"{PREFIX}/ranges/"
COMMITS = f"{PREFIX}/commits/"
STAGING = f"{PREFIX}/staging/"
DATA = "data/"


def range_key(range_id: str) -> str:
    """A committed range or metarange (content-addressed: hex SHA-256)."""
    return RANGES + range_id


def commit_key(commit_id: str) -> str:
    return COMMITS + commit_id


def staging_prefix(branch: str) -> str:
    return f"{STAGING}{check_ref_name(branch)}/"


def staging_key(branch: str, level: Level, file_id: str, suffix: str = ".sst") -> str:
    """An L1/L2 file (``.sst``) or its sidecar (another suffix, e.g. ``.meta``).

    File ids are unique (time-sortable + random), so a deleted and re-created branch
    never sees an old file: no per-branch token is needed.

    ``file_id`` may be a qualified entry (a file of a popped workspace, see
    docs/refstore.md, "Workspaces"): the key is then where that file lives.
    """
    b, lv, fid = locate_entry(branch, level, file_id)
    return f"{staging_prefix(b)}{lv}/{check_file_id(fid)}{suffix}"


def data_key(object_id: str) -> str:
    """An object's data written by an upload: ``data/<id>`` (unique, never reused)."""
    return DATA + check_file_id(object_id)


#: Uncommitted object data that was overwritten or deleted (lsmstore.gc.data).
DATA_GC = f"{PREFIX}/gc-data/"
