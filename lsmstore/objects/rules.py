"""Checks of object paths and fields at the API boundary, before anything is written.

The rules lakeFS applies (``pkg/catalog/validate.go``) plus bounds of our own:

* a **path** is a non-empty ``str`` of at most :data:`MAX_PATH_BYTES` UTF-8 bytes (and
  within the store's ``max_key_bytes``); a lone surrogate (not valid UTF-8) is refused;
* **user metadata** maps non-empty keys without control characters to values; at most
  :data:`MAX_METADATA_ENTRIES` entries and :data:`MAX_METADATA_BYTES` bytes of keys and
  values together (UTF-8);
* a **content type** is non-empty, at most :data:`MAX_FIELD_BYTES` bytes, no control
  characters; None means lakeFS's default (``application/octet-stream``);
* a **checksum** (ETag) has quotes and spaces around it stripped, as lakeFS does, and is
  then non-empty, at most :data:`MAX_FIELD_BYTES` bytes, no control characters;
* a **size** is an int in ``[0, 2**63)``; an **mtime** an int number of seconds in
  ``[0, 253402300799]`` (the year 9999, protobuf Timestamp's limit).

Bad paths raise :class:`InvalidNameError`, other bad fields :class:`InvalidInputError`
(both ``ValueError``s).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lsmstore.errors import EntryTooLargeError, InvalidInputError, InvalidNameError
from lsmstore.objects.entry import DEFAULT_CONTENT_TYPE

#: lakeFS's ``catalog.MaxPathLength``.
MAX_PATH_BYTES = 1024
MAX_FIELD_BYTES = 1024
MAX_METADATA_ENTRIES = 1000
MAX_METADATA_BYTES = 64 * 1024
MAX_SIZE = (1 << 63) - 1
MAX_MTIME = 253402300799


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _has_control(s: str) -> bool:
    return _CONTROL.search(s) is not None


def _utf8(s: str, what: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInputError(f"{what} {s[:64]!r} is not valid Unicode: {e.reason}") from None


def check_path(path: object, max_bytes: int = MAX_PATH_BYTES) -> bytes:
    """The path's UTF-8 bytes (the graveler key); InvalidNameError if it breaks a rule."""
    if not isinstance(path, str):
        raise InvalidNameError(f"object path must be a str, not {type(path).__name__}")
    if not path:
        raise InvalidNameError("object path is empty")
    if path.isascii():
        b = path.encode()
    else:
        try:
            b = path.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidNameError(
                f"object path {path[:64]!r} is not valid UTF-8: {e.reason}"
            ) from None
    limit = min(max_bytes, MAX_PATH_BYTES)
    if len(b) > limit:
        raise InvalidNameError(
            f"object path {path[:64]!r}... is {len(b)} bytes, over the {limit}-byte limit"
        )
    return b


def check_metadata(metadata: object) -> dict[str, str]:
    """A checked copy of user metadata (None -> empty)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(f"metadata must map str to str, not {type(metadata).__name__}")
    if len(metadata) > MAX_METADATA_ENTRIES:
        raise EntryTooLargeError(
            f"metadata has {len(metadata)} entries, over the limit of {MAX_METADATA_ENTRIES}"
        )
    out: dict[str, str] = {}
    total = 0
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidInputError(f"metadata must map str to str; got {k!r}: {v!r}")
        if not k or _has_control(k):
            raise InvalidInputError(f"metadata key {k!r} is empty or has a control character")
        total += len(_utf8(k, "metadata key")) + len(_utf8(v, "metadata value"))
        out[k] = v
    if total > MAX_METADATA_BYTES:
        raise EntryTooLargeError(
            f"metadata is {total} bytes, over the limit of {MAX_METADATA_BYTES} bytes"
        )
    return out


def _check_field(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a str, not {type(value).__name__}")
    if not value or _has_control(value) or len(_utf8(value, what)) > MAX_FIELD_BYTES:
        raise InvalidInputError(
            f"{what} {value[:64]!r} must be 1..{MAX_FIELD_BYTES} bytes without control characters"
        )
    return value


def check_content_type(content_type: object) -> str:
    """The content type to store (None -> lakeFS's default)."""
    if content_type is None:
        return DEFAULT_CONTENT_TYPE
    return _check_field(content_type, "content type")


def check_checksum(checksum: object) -> str:
    """The checksum with surrounding quotes and spaces stripped (lakeFS's
    ``httputil.StripQuotesAndSpaces``)."""
    if not isinstance(checksum, str):
        raise InvalidInputError(f"checksum must be a str, not {type(checksum).__name__}")
    return _check_field(checksum.strip(' "'), "checksum")


def check_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_SIZE:
        raise InvalidInputError(f"object size must be an int in [0, 2**63), not {size!r}")
    return size


def check_mtime(mtime: object) -> int:
    if isinstance(mtime, bool) or not isinstance(mtime, int) or not 0 <= mtime <= MAX_MTIME:
        raise InvalidInputError(
            f"mtime must be an int number of seconds in [0, {MAX_MTIME}], not {mtime!r}"
        )
    return mtime
