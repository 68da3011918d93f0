"""What the object API hands out and takes in: :class:`ObjectStats`, :class:`ObjectLink`
(or its tuple form, :data:`LinkTuple`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lsmstore.errors import InvalidInputError
from lsmstore.objects.entry import DEFAULT_CONTENT_TYPE
from lsmstore.types import ObjectLink, ObjectStats


def inline_stats(path: str, value: bytes, identity: bytes) -> ObjectStats:
    """How a raw value (a record that is not an object entry, e.g. written with ``put``)
    appears as an object: an *inline object* whose contents are the value, checksum the
    record's identity in hex, no physical address, mtime 0 (docs/objects.md)."""
    return ObjectStats(path, "object", "", identity.hex(), len(value), 0, DEFAULT_CONTENT_TYPE, {})


#: The tuple form of a link, ``(path, physical_address, size, checksum)`` optionally
#: followed by ``content_type``, ``metadata`` and ``mtime`` -- :class:`ObjectLink`'s
#: fields in order.  ``link_many`` takes it beside :class:`ObjectLink` (as ``put_many``
#: takes ``(key, value)``): building a tuple costs a caller less than a dataclass.
LinkTuple = (
    tuple[str, str, int, str]
    | tuple[str, str, int, str, str | None]
    | tuple[str, str, int, str, str | None, Mapping[str, str] | None]
    | tuple[str, str, int, str, str | None, Mapping[str, str] | None, int | None]
)
#: What ``link_many`` takes per link.
LinkItem = ObjectLink | LinkTuple


def as_link(item: Any) -> ObjectLink:
    """The :class:`ObjectLink` of a ``link_many`` item (an ObjectLink or a
    :data:`LinkTuple`); InvalidInputError for anything else or a tuple of another
    length.  The fields are checked where the link is staged."""
    if type(item) is ObjectLink:
        return item
    if type(item) is not tuple:
        raise InvalidInputError(
            f"link_many takes ObjectLinks or tuples (path, physical_address, size, "
            f"checksum[, content_type[, metadata[, mtime]]]), not {type(item).__name__}"
        )
    if not 4 <= len(item) <= 7:
        raise InvalidInputError(
            f"a link tuple is (path, physical_address, size, checksum[, content_type"
            f"[, metadata[, mtime]]]): 4 to 7 items, not {len(item)}"
        )
    return ObjectLink(*item)
