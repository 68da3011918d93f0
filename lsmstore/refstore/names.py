"""Name rules, checked before any name reaches a backend or an object path."""

from __future__ import annotations

import re

from lsmstore.errors import InvalidNameError

REPOSITORY_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
FILE_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
#: A commit id as a ref's base: empty ("no commit yet") or a digest-like token.
COMMIT_ID = re.compile(r"^[0-9A-Za-z_.:-]{0,128}$")
MAX_REF_NAME_BYTES = 255
MAX_LEASE_NAME_BYTES = 512


def check_repository_name(name: str) -> str:
    if not isinstance(name, str) or not REPOSITORY_NAME.fullmatch(name):
        raise InvalidNameError(
            f"invalid repository name {name!r}: must match {REPOSITORY_NAME.pattern}"
        )
    return name


def _check_text(name: str, what: str, max_bytes: int) -> None:
    """A non-empty string of valid Unicode, at most ``max_bytes`` in UTF-8."""
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"invalid {what} {name!r}: empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidNameError(f"invalid {what} {name!r}: not valid Unicode") from e
    if size > max_bytes:
        raise InvalidNameError(f"invalid {what}: longer than {max_bytes} bytes")


def check_ref_name(name: str, what: str = "branch") -> str:
    """Branch and tag names: no '/', '..', whitespace or control characters, <= 255 bytes."""
    _check_text(name, f"{what} name", MAX_REF_NAME_BYTES)
    if "/" in name or ".." in name:
        raise InvalidNameError(f"invalid {what} name {name!r}: contains '/' or '..'")
    if any(c.isspace() or ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        raise InvalidNameError(f"invalid {what} name {name!r}: whitespace or control character")
    if name.startswith(("-", ".")) or name.endswith(".") or any(c in name for c in "~^:?*[\\@"):
        raise InvalidNameError(
            f"invalid {what} name {name!r}: starts with '-'/'.', ends with '.', "
            "or contains one of ~ ^ : ? * [ \\ @ (reserved for ref expressions)"
        )
    return name


def check_file_id(file_id: str) -> str:
    if not isinstance(file_id, str) or not FILE_ID.fullmatch(file_id):
        raise InvalidNameError(f"invalid staging file id {file_id!r}: must match {FILE_ID.pattern}")
    return file_id


def check_commit_id(commit_id: str, what: str = "base commit") -> str:
    """A ref's base: ``""`` (no commit yet) or up to 128 of ``[0-9A-Za-z_.:-]``."""
    if not isinstance(commit_id, str) or not COMMIT_ID.fullmatch(commit_id):
        raise InvalidNameError(f"invalid {what} {commit_id!r}: must match {COMMIT_ID.pattern}")
    return commit_id


def check_lease_name(name: str, what: str = "lease key") -> str:
    """Lease keys and owners: non-empty, <= 512 bytes, no control characters."""
    _check_text(name, what, MAX_LEASE_NAME_BYTES)
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        raise InvalidNameError(f"invalid {what} {name!r}: control character")
    return name
