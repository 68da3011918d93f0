"""How the embedded and Redis backends store a list of file ids: one comma-joined string.

File ids match ``[0-9A-Za-z_-]{1,64}`` (:data:`lsmstore.refstore.names.FILE_ID`), so a
comma never occurs inside one.  ``""`` is the empty list.  Redis Lua scripts work on
the same form with plain string operations: "starts with prefix" is a string prefix
test ending at a comma, and dropping a prefix is one ``string.sub``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lsmstore.errors import CorruptFileError

if TYPE_CHECKING:
    from lsmstore.refstore.base import RefKind

SEPARATOR = ","


def decode_kind(text: str, where: str) -> RefKind:
    if text == "branch":
        return "branch"
    if text == "tag":
        return "tag"
    raise CorruptFileError(where, f"stored ref kind {text!r} is neither 'branch' nor 'tag'")


def encode_ids(ids: Sequence[str]) -> str:
    return SEPARATOR.join(ids)


def decode_ids(text: str) -> tuple[str, ...]:
    return tuple(text.split(SEPARATOR)) if text else ()


def prefix_end(prefix: str) -> str | None:
    """The least string greater than every string that starts with ``prefix``.

    ``None`` when there is none (empty prefix, or only U+10FFFF characters).  Code-point
    order equals UTF-8 byte order, the order every backend lists in.
    """
    chars = list(prefix)
    while chars:
        c = ord(chars.pop())
        if c < 0x10FFFF:
            c += 1
            if 0xD800 <= c < 0xE000:  # skip surrogates: not valid in UTF-8
                c = 0xE000
            return "".join(chars) + chr(c)
    return None
