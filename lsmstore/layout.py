"""Where things live inside a storage namespace (docs/design.md, "Layout on the object store").

Everything under ``_lsm/`` is immutable once written; nothing is overwritten.
Objects' data (docs/objects.md) lives under ``data/<id>`` (unique, never reused; the
Parquet files of a partitioned table under ``data/<col>=<value>/.../<id>``);
records of uncommitted data that may be garbage under ``_lsm/gc-data/`` (docs/format.md).
"""

from __future__ import annotations

import re
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


#: The longest directory part of a table file's data key (:func:`table_data_key`): a
#: file system holds each segment as a directory name of at most 255 bytes.
MAX_TABLE_DIRS_BYTES = 200
#: Partition directories a data key may carry: lower-case ASCII letters, digits, ``_``,
#: ``-`` and ``.`` only, each segment starting with a letter or digit, no empty value.
TABLE_DIRS = re.compile(r"(?:[a-z0-9][a-z0-9_.-]*=[a-z0-9_.-]+/)+")


def table_data_key(directory: str, object_id: str) -> str:
    """The data of a Parquet file of a table written by Spark (docs/spark.md):
    ``data/<directory><id>``, where ``directory`` is the file's Hive-style partition
    directories in the table (``day=2026-11-28/``), so that Spark's own Parquet reader
    finds the partition values in the physical path; ``data/<id>`` unless ``directory``
    matches :data:`TABLE_DIRS` within :data:`MAX_TABLE_DIRS_BYTES`.

    The directories are kept to what every store holds as written: no escapes (a
    ``file://`` namespace reads ``%XX`` in an address as an escape), no capitals (a
    case-insensitive file system would file ``p=a/`` under an existing ``p=A/``, and
    the GC job would then list the data under a key no entry names), no non-ASCII (a
    normalising one would rename it), no segment starting with ``.`` or ``_`` (the local
    store's temporary names; names Spark hides), no empty value (Spark refuses
    ``p=/``)."""
    if len(directory) > MAX_TABLE_DIRS_BYTES or not TABLE_DIRS.fullmatch(directory):
        directory = ""
    return DATA + directory + check_file_id(object_id)


#: Uncommitted object data that was overwritten or deleted (lsmstore.gc.data).
DATA_GC = f"{PREFIX}/gc-data/"
