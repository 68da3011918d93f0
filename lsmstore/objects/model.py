"""What the object API hands out and takes in: :class:`ObjectStats`, :class:`ObjectLink`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from lsmstore.objects.entry import DEFAULT_CONTENT_TYPE

PathType = Literal["object", "common_prefix"]


@dataclass(frozen=True, slots=True)
class ObjectStats:
    """One object (lakeFS's ``ObjectStats``), or a common prefix of a delimited listing
    (``path_type="common_prefix"``: only ``path`` is set)."""

    path: str
    path_type: PathType = "object"
    physical_address: str = ""  # full URI: s3://bucket/ns/data/..., file:///..., mem://...
    checksum: str = ""  # the ETag: MD5 hex of the contents for uploads
    size: int = 0
    mtime: int = 0  # seconds since the epoch
    content_type: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


def inline_stats(path: str, value: bytes, identity: bytes) -> ObjectStats:
    """How a raw value (a record that is not an object entry, e.g. written with ``put``)
    appears as an object: an *inline object* whose contents are the value, checksum the
    record's identity in hex, no physical address, mtime 0 (docs/objects.md)."""
    return ObjectStats(path, "object", "", identity.hex(), len(value), 0, DEFAULT_CONTENT_TYPE, {})


@dataclass(slots=True)
class ObjectLink:
    """An object whose data is already on the store, for :meth:`Branch.link_many`."""

    path: str
    physical_address: str
    size: int
    checksum: str
    content_type: str | None = None
    metadata: Mapping[str, str] | None = None
    mtime: int | None = None
