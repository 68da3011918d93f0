"""The committed value encoding of lakeFS graveler (``committed/value.go``).

    varint(len(identity)) identity varint(len(data)) data

Each length is a *signed* varint as Go's ``binary.PutVarint`` writes it: the zigzag
transform ``n -> 2n`` for non-negative ``n``, then an unsigned LEB128 varint.  So a
32-byte identity has the length byte ``0x40``, and lengths below 64 take one byte.
Being byte-compatible with lakeFS lets either side read the other's ranges.  A decoder
rejects odd (negative) lengths, short input and trailing bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from lsmstore.errors import CorruptFileError, InvalidInputError
from lsmstore.graveler.varint import encode_uvarint


def length_header(n: int) -> bytes:
    """The header of a length-``n`` field of a value (a zigzag varint)."""
    return encode_uvarint(n << 1)  # zigzag of a non-negative length


_LENGTHS = [length_header(n) for n in range(1024)]  # the common lengths, precomputed


def encode_value(identity: bytes, data: bytes) -> bytes:
    """``varint(len(identity)) identity varint(len(data)) data`` (zigzag lengths)."""
    n = len(identity)
    m = len(data)
    if n < 1024 and m < 1024:
        return b"".join((_LENGTHS[n], identity, _LENGTHS[m], data))
    return b"".join((length_header(n), identity, length_header(m), data))


def encode_values(identities: Sequence[bytes], data: Sequence[bytes]) -> list[bytes]:
    """:func:`encode_value` of each pair (columns of equal length), in C loops when every
    length has a precomputed header (a commit encodes every record it rewrites)."""
    if len(identities) != len(data):
        raise InvalidInputError(f"{len(identities)} identities for {len(data)} values")
    if not identities:
        return []
    if max(map(len, identities)) < len(_LENGTHS) and max(map(len, data)) < len(_LENGTHS):
        head = _LENGTHS.__getitem__
        lengths = map(head, map(len, identities))
        return list(
            map(b"".join, zip(lengths, identities, map(head, map(len, data)), data, strict=True))
        )
    return list(map(encode_value, identities, data))


def _get_length(buf: bytes, p: int, name: str) -> tuple[int, int]:
    u = 0
    shift = 0
    while True:
        if p >= len(buf):
            raise CorruptFileError(name or "value", "value encoding: truncated length")
        b = buf[p]
        p += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptFileError(name or "value", "value encoding: length varint too long")
    if u & 1:
        raise CorruptFileError(name or "value", "value encoding: negative length")
    return u >> 1, p


def decode_value(buf: bytes, name: str = "") -> tuple[bytes, bytes]:
    """``(identity, data)`` from an encoded value; :class:`CorruptFileError` naming ``name``
    (the file or object the value came from) when ``buf`` is malformed."""
    n = len(buf)
    if n and buf[0] < 0x80:
        ilen = buf[0] >> 1
        if buf[0] & 1:
            raise CorruptFileError(name or "value", "value encoding: negative length")
        p = 1
    else:
        ilen, p = _get_length(buf, 0, name)
    end = p + ilen
    if end >= n:
        raise CorruptFileError(name or "value", "value encoding: identity overruns the value")
    identity = buf[p:end]
    b = buf[end]
    if b < 0x80 and not b & 1:
        dlen = b >> 1
        p = end + 1
    else:
        dlen, p = _get_length(buf, end, name)
    if p + dlen != n:
        raise CorruptFileError(
            name or "value",
            f"value encoding: data length {dlen} does not match the {n - p} bytes left",
        )
    return identity, buf[p:]
