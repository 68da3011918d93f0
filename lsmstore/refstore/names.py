"""Name rules, checked before any name reaches a backend or an object path."""

from __future__ import annotations

import base64
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


# --- lakeFS's rules, for names being created -----------------------------------------
#
# A repository, branch or tag is *created* only under a name lakeFS accepts
# (``pkg/graveler``'s validation), so that every lakeFS tool can name it.  Names that
# exist already are read and written under the older, wider rules above
# (:func:`check_repository_name`, :func:`check_ref_name`): docs/decisions.md, "Names
# follow lakeFS's rules".

#: lakeFS's repository ids: 3-63 of lower-case letters, digits and '-', not starting
#: with '-'.
NEW_REPOSITORY_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
#: lakeFS's branch ids: ASCII letters, digits, '_' and '-', not starting with '-'.
NEW_BRANCH_NAME = re.compile(r"^[0-9A-Za-z_][-0-9A-Za-z_]*$")


def check_new_repository_name(name: str) -> str:
    """A name a repository may be created under (lakeFS's rule)."""
    check_repository_name(name)
    if not NEW_REPOSITORY_NAME.fullmatch(name):
        raise InvalidNameError(
            f"invalid repository name {name!r}: a new repository's name must match "
            f"{NEW_REPOSITORY_NAME.pattern} (3-63 lower-case letters, digits and '-', "
            "as lakeFS requires)"
        )
    return name


def check_new_branch_name(name: str) -> str:
    """A name a branch may be created under (lakeFS's rule, at most 255 bytes)."""
    check_ref_name(name, "branch")
    if not NEW_BRANCH_NAME.fullmatch(name):
        raise InvalidNameError(
            f"invalid branch name {name!r}: a new branch's name must match "
            f"{NEW_BRANCH_NAME.pattern} (ASCII letters, digits, '_' and '-', as lakeFS "
            "requires)"
        )
    return name


def check_new_tag_name(name: str) -> str:
    """A name a tag may be created under: :func:`check_ref_name`'s rules (which
    reserve more characters than lakeFS, for ref expressions) and lakeFS's own (no
    ``.lock`` suffix, no ``@{``, no space or control character)."""
    check_ref_name(name, "tag")
    if name.endswith(".lock"):
        raise InvalidNameError(f"invalid tag name {name!r}: ends with '.lock'")
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


#: Names that passed :func:`check_ref_name` (the check is pure; hot paths repeat it for
#: the same few names).  Bounded: cleared when full.
_VALID_REF_NAMES: set[str] = set()
_VALID_REF_NAMES_MAX = 4096


def check_ref_name(name: str, what: str = "branch") -> str:
    """Branch and tag names: no '/', '..', whitespace or control characters, <= 255 bytes."""
    if type(name) is str and name in _VALID_REF_NAMES:
        return name
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
    if len(_VALID_REF_NAMES) >= _VALID_REF_NAMES_MAX:
        _VALID_REF_NAMES.clear()
    _VALID_REF_NAMES.add(name)
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


# --- staged entries: where a file in a ref's L1 list lives ----------------------------

#: An entry of a ref's L1 list, or of a workspace's lists: a plain file id, or a file
#: id *qualified* with the place it lives, ``<id>.<L1|L2>.<base64url of a branch>``.
#: A plain id in a branch's L1 (L2) is the file ``staging/<that branch>/L1 (L2)/<id>``;
#: a qualified one is ``staging/<branch>/<level>/<id>`` whatever list holds it.  Only
#: popping a workspace (docs/refstore.md, "Workspaces") writes qualified entries: files
#: are never copied, so a file stashed on one branch and popped onto another keeps
#: living where it was written.  A branch name is at most 255 bytes, 340 characters
#: in base64url.
STAGED_ENTRY = re.compile(r"^([0-9A-Za-z_-]{1,64})(?:\.(L1|L2)\.([0-9A-Za-z_-]{2,340}))?$")


def check_staged_entry(entry: str) -> str:
    """A plain file id or a qualified entry (:data:`STAGED_ENTRY`) naming a valid branch."""
    m = STAGED_ENTRY.fullmatch(entry) if isinstance(entry, str) else None
    if m is None:
        raise InvalidNameError(
            f"invalid staging file id {entry!r}: must match {FILE_ID.pattern} "
            "or <id>.<L1|L2>.<base64url branch>"
        )
    if m.group(3) is not None:
        _decode_branch(m.group(3), entry)
    return entry


def _decode_branch(token: str, entry: str) -> str:
    try:
        name = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("utf-8")
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidNameError(f"invalid staging file id {entry!r}: bad branch token") from e
    if encode_branch(name) != token:  # one spelling per branch
        raise InvalidNameError(f"invalid staging file id {entry!r}: bad branch token")
    return check_ref_name(name)


def encode_branch(branch: str) -> str:
    return base64.urlsafe_b64encode(branch.encode("utf-8")).decode("ascii").rstrip("=")


def is_qualified(entry: str) -> bool:
    return "." in entry


def locate_entry(branch: str, level: str, entry: str) -> tuple[str, str, str]:
    """``(branch, level, file id)`` of the file an entry of ``branch``'s ``level`` list
    names: the entry's own place if it is qualified, else ``(branch, level, entry)``."""
    m = STAGED_ENTRY.fullmatch(entry) if isinstance(entry, str) else None
    if m is None:
        check_staged_entry(entry)  # raises
        raise AssertionError("unreachable")
    if m.group(3) is None:
        return branch, level, entry
    return _decode_branch(m.group(3), entry), m.group(2), m.group(1)


def qualify_entry(branch: str, level: str, entry: str) -> str:
    """The entry, valid in any list, for an entry of ``branch``'s ``level`` list."""
    if is_qualified(entry):
        return entry
    return f"{entry}.{level}.{encode_branch(check_ref_name(branch))}"


def entry_for(branch: str, level: str, entry: str) -> str:
    """How ``branch``'s ``level`` list names the file ``entry`` names: plain when the
    file lives there, qualified otherwise."""
    b, lv, fid = locate_entry(branch, level, entry)
    return fid if (b, lv) == (branch, level) else qualify_entry(b, lv, fid)
