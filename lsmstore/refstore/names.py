"""Name rules, checked before any name reaches a backend or an object path."""

from __future__ import annotations

import re

from lsmstore.errors import InvalidNameError

REPOSITORY_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
FILE_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
MAX_REF_NAME_BYTES = 255


def check_repository_name(name: str) -> str:
    if not isinstance(name, str) or not REPOSITORY_NAME.match(name):
        raise InvalidNameError(
            f"invalid repository name {name!r}: must match {REPOSITORY_NAME.pattern}"
        )
    return name


def check_ref_name(name: str, what: str = "branch") -> str:
    """Branch and tag names: no '/', '..', whitespace or control characters, <= 255 bytes."""
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"invalid {what} name {name!r}: empty")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_REF_NAME_BYTES:
        raise InvalidNameError(f"invalid {what} name: longer than {MAX_REF_NAME_BYTES} bytes")
    if "/" in name or ".." in name:
        raise InvalidNameError(f"invalid {what} name {name!r}: contains '/' or '..'")
    if any(c.isspace() or ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        raise InvalidNameError(f"invalid {what} name {name!r}: whitespace or control character")
    if name.startswith(("-", ".")) or name.endswith(".") or any(c in name for c in "~^:?*[\\@"):
        raise InvalidNameError(
            f"invalid {what} name {name!r}: starts with '-'/'.', ends with '.', "
            "or contains one of ~ ^ : ? * [ \\ @ (reserved for ref expressions)"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidNameError(f"invalid {what} name {name!r}: not valid Unicode") from e
    return name


def check_file_id(file_id: str) -> str:
    if not isinstance(file_id, str) or not FILE_ID.match(file_id):
        raise InvalidNameError(f"invalid staging file id {file_id!r}: must match {FILE_ID.pattern}")
    return file_id
