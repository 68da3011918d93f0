"""What the object API hands out and takes in: :class:`ObjectStats`, :class:`ObjectLink`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

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
