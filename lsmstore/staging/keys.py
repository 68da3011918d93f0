"""Keys and values at the API boundary: encoding and bounds, checked before staging.

Keys are bytes; ``str`` keys are encoded as UTF-8 (a lone surrogate cannot be, and is
rejected).  A key is 1..``max_key_bytes`` bytes (default 1024), a value at most
``max_value_bytes`` (default 16 MiB) -- see :class:`lsmstore.config.Config`.  A bad
key raises :class:`InvalidKeyError` (for reads and writes alike), a value over its
bound :class:`EntryTooLargeError`; messages show a bounded prefix of the key.
"""

from __future__ import annotations

import hashlib

from lsmstore.errors import EntryTooLargeError, InvalidInputError, InvalidKeyError
from lsmstore.graveler.record import RecordTuple
from lsmstore.validate import check_items, preview, put_items

#: What ``put_many``'s argument is called in error messages.
PUT_ITEMS = "put_many items"


def encode_key(key: str | bytes) -> bytes:
    """``key`` as bytes: UTF-8 for ``str``; InvalidKeyError for other types, lone
    surrogates and the empty key."""
    if isinstance(key, str):
        try:
            b = key.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidKeyError(f"key {preview(key)} is not valid Unicode: {e.reason}") from e
    elif isinstance(key, bytes):
        b = key
    elif isinstance(key, bytearray | memoryview):
        b = bytes(key)
    else:
        raise InvalidKeyError(f"key must be str or bytes, not {type(key).__name__}")
    if not b:
        raise InvalidKeyError("key is empty: keys are 1 or more bytes")
    return b


def check_key(key: str | bytes, max_key_bytes: int) -> bytes:
    """:func:`encode_key` plus the length bound (InvalidKeyError)."""
    b = encode_key(key)
    if len(b) > max_key_bytes:
        raise InvalidKeyError(
            f"key {preview(b, 32)} is {len(b)} bytes, over the {max_key_bytes}-byte limit"
        )
    return b


def encode_opt(value: str | bytes | None, what: str) -> bytes | None:
    """An optional listing argument (``prefix``, ``after``, ``delimiter``) as bytes:
    UTF-8 for ``str``; InvalidInputError naming ``what`` for anything else."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as e:
            shown = preview(value)
            raise InvalidInputError(f"list {what} {shown} is not valid Unicode") from e
    if isinstance(value, bytes):
        return value
    raise InvalidInputError(f"list {what} must be str or bytes, not {type(value).__name__}")


def check_value(key: bytes, value: object, max_value_bytes: int) -> bytes:
    """``value`` as bytes within the bound, else InvalidInputError/EntryTooLargeError."""
    if isinstance(value, bytes):
        v = value
    elif isinstance(value, bytearray | memoryview):
        v = bytes(value)
    else:
        raise InvalidInputError(
            f"value of key {preview(key)} must be bytes, not {type(value).__name__}"
        )
    if len(v) > max_value_bytes:
        raise EntryTooLargeError(
            f"value of key {preview(key)} is {len(v)} bytes, over the {max_value_bytes}-byte limit"
        )
    return v


def check_identity(key: bytes, identity: object) -> bytes:
    if isinstance(identity, bytes | bytearray | memoryview):
        ident = bytes(identity)
        if 0 < len(ident) <= 255:
            return ident
    raise InvalidInputError(f"identity of key {preview(key)} must be 1..255 bytes")


_sha256 = hashlib.sha256

#: The identity of a staged put whose identity is the default, SHA-256 of its value:
#: the encoder computes it (:func:`lsmstore.staging.encoder.encode_columns`).  A given
#: identity is 1..255 bytes, so an empty one is never ambiguous; a tombstone's is
#: empty too, and stays so.
DEFERRED_IDENTITY = b""


def make_record(
    key: object,
    value: object,
    identity: object,
    max_key_bytes: int,
    max_value_bytes: int,
    *,
    defer_identity: bool = False,
) -> RecordTuple:
    """A checked put record, as the plain tuple the writer's memstore keeps
    (:mod:`lsmstore.staging.memstore`); identity ``None`` means SHA-256 of the value -- with
    ``defer_identity``, left to the encoder (:data:`DEFERRED_IDENTITY`: the writer's
    encoder hashes off the event loop, in its worker process when there is one).

    The common case (``str``/``bytes`` key in bounds, ``bytes`` value in bounds) takes a
    fast path; anything else goes through the full checks, which raise the error.
    """
    k: bytes
    if type(key) is str and key.isascii():
        k = key.encode()
    elif type(key) is bytes:
        k = key
    else:
        k = check_key(key, max_key_bytes)  # type: ignore[arg-type]  # raises on bad input
    if not 0 < len(k) <= max_key_bytes:
        k = check_key(k, max_key_bytes)  # raises
    v: bytes
    if type(value) is bytes and len(value) <= max_value_bytes:
        v = value
    else:
        v = check_value(k, value, max_value_bytes)  # raises on bad input
    if identity is None:
        ident = DEFERRED_IDENTITY if defer_identity else _sha256(v).digest()
    else:
        ident = check_identity(k, identity)
    return (k, ident, v)


def make_put_records(items: object, max_key_bytes: int, max_value_bytes: int) -> list[RecordTuple]:
    """:func:`make_record` (identity deferred unless given) of each ``put_many`` item,
    ``(key, value)`` or ``(key, value, identity)`` (:func:`lsmstore.validate.put_items`).

    A list of ``(bytes, bytes)`` pairs in bounds -- what a bulk loader passes -- takes
    a fast path without a call per item; at the first other item everything goes
    through the full checks, which raise the error of the first bad item.
    """
    seq = items if type(items) is list else list(check_items(items, PUT_ITEMS))
    out: list[RecordTuple] = []
    add = out.append
    for item in seq:
        if type(item) is tuple and len(item) == 2:
            k, v = item
            if (
                type(k) is bytes
                and type(v) is bytes
                and 0 < len(k) <= max_key_bytes
                and len(v) <= max_value_bytes
            ):
                add((k, DEFERRED_IDENTITY, v))
                continue
        break
    else:
        return out
    return [
        make_record(k, v, ident, max_key_bytes, max_value_bytes, defer_identity=True)
        for k, v, ident in put_items(seq, PUT_ITEMS)
    ]
