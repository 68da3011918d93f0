"""Object entries decoded a batch at a time: ``catalog.Entry`` bytes -> Arrow columns.

:func:`decode_entries` reads the entries of one batch with numpy, a field at a time over
all of them, instead of one protobuf message per entry (the parse and the reading of
its seven fields were ~2 us of an export's ~5 us of Python a record).  It reads only
the layout lsmstore and lakeFS write (:mod:`lsmstore.objects.entry`): fields in number
order, each at most once, no user metadata, short lengths.  For anything else -- a
field out of order or repeated, an unknown field, metadata, a length or number outside
the bounds below, an entry the checks of :func:`~lsmstore.objects.entry.parse_entry`
refuse, text that is not UTF-8 -- it returns None and the caller takes the per-entry
path (the protobuf library), which gives the same rows or names the fault
(``tests/test_spark_rows.py`` compares both on random entries).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmstore.objects.entry import (
    DEFAULT_CONTENT_TYPE,
    TAG_ADDRESS,
    TAG_ADDRESS_TYPE,
    TAG_CONTENT_TYPE,
    TAG_ETAG,
    TAG_LAST_MODIFIED,
    TAG_METADATA,
    TAG_NANOS,
    TAG_SECONDS,
    TAG_SIZE,
    AddressType,
)

#: Wire tags of ``catalog.Entry`` (:mod:`lsmstore.objects.entry` states them).
_ADDRESS, _MODIFIED, _SIZE, _ETAG, _METADATA, _ADDRESS_TYPE, _CONTENT_TYPE = (
    TAG_ADDRESS,
    TAG_LAST_MODIFIED,
    TAG_SIZE,
    TAG_ETAG,
    TAG_METADATA,
    TAG_ADDRESS_TYPE,
    TAG_CONTENT_TYPE,
)
_SECONDS, _NANOS = TAG_SECONDS, TAG_NANOS
#: Longest varint read (63 bits: every value fits an int64 and is >= 0).
_MAX_VARINT = 9


class _Cursor:
    """Read positions in the entries of one batch: ``pos[i]`` in entry ``i``, which ends
    at ``end[i]``; ``ok[i]`` turns False at the first thing the decoder does not read."""

    def __init__(self, buf: np.ndarray[Any, Any], pos: Any, end: Any) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end
        self.ok = np.ones(len(pos), np.bool_)
        self._last = len(buf) - 1

    def peek(self) -> Any:
        """The byte at each position (-1 at an entry's end)."""
        inside = self.pos < self.end
        return np.where(inside, self.buf[np.minimum(self.pos, self._last)], -1)

    def tag(self, tag: int) -> Any:
        """Where the next byte is ``tag``: those positions step over it."""
        here = self.peek() == tag
        self.pos = self.pos + here
        return here

    def varint(self, where: Any) -> Any:
        """A varint at the positions ``where`` (0 elsewhere), as uint64; a varint that
        runs past its entry or is longer than :data:`_MAX_VARINT` ends that entry's fast
        path."""
        value = np.zeros(len(self.pos), np.uint64)
        more = where.copy()
        for k in range(_MAX_VARINT):
            if not more.any():
                break
            b = self.peek()
            past = more & (b < 0)
            self.ok &= ~past
            more &= ~past
            byte = np.where(more, b, 0).astype(np.uint64)
            value |= (byte & np.uint64(0x7F)) << np.uint64(7 * k)
            self.pos = self.pos + more
            more &= (byte & np.uint64(0x80)) != 0
        self.ok &= ~more
        return value

    def string(self, where: Any) -> tuple[Any, Any]:
        """``(start, length)`` of a length-delimited field at ``where`` (length 0
        elsewhere); one past its entry ends that entry's fast path."""
        length = self.varint(where).astype(np.int64)
        start = self.pos.copy()
        over = where & (length > self.end - start)  # start + length may overflow
        self.ok &= ~over
        length = np.where(where & ~over, length, 0)
        self.pos = self.pos + length
        return start, length


def _strings(buf: np.ndarray[Any, Any], start: Any, length: Any) -> pa.Array:
    """A string array of the byte slices ``buf[start:start + length]`` (checked UTF-8:
    ValueError otherwise)."""
    offsets = np.zeros(len(start) + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    index = np.arange(total, dtype=np.int64) + np.repeat(start - offsets[:-1], length)
    data = buf[index].tobytes()
    out = pa.StringArray.from_buffers(
        len(start), pa.py_buffer(offsets.astype(np.int32).tobytes()), pa.py_buffer(data)
    )
    try:
        out.validate(full=True)
    except pa.ArrowInvalid as e:
        raise ValueError(str(e)) from None
    return out


def decode_entries(
    datas: Sequence[bytes], namespace_base: str
) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array] | None:
    """``(physical_address, size, checksum, mtime, content_type)`` of the entries
    ``datas`` (their ``catalog.Entry`` bytes), the address a full URI (relative ones
    joined to ``namespace_base``), the content type lakeFS's default when empty; None
    when an entry is outside the layout read here (module docstring)."""
    n = len(datas)
    if not n:
        return None
    lengths = np.fromiter(map(len, datas), np.int64, n)
    if not lengths.all() or int(lengths.sum()) >= 1 << 31:
        return None  # an empty value has no address (and the cursor needs a byte)
    end = np.cumsum(lengths)
    c = _Cursor(np.frombuffer(b"".join(datas), np.uint8), end - lengths, end)

    address = c.string(c.tag(_ADDRESS))
    ts_len = c.string(c.tag(_MODIFIED))[1]
    ts_end = c.pos
    inner = _Cursor(c.buf, ts_end - ts_len, ts_end)
    seconds = inner.varint(inner.tag(_SECONDS))
    inner.varint(inner.tag(_NANOS))  # not a column (as the per-entry path)
    c.ok &= inner.ok & (inner.pos == ts_end)
    size = c.varint(c.tag(_SIZE))
    etag = c.string(c.tag(_ETAG))
    c.ok &= c.peek() != _METADATA
    atype = c.varint(c.tag(_ADDRESS_TYPE))
    ctype = c.string(c.tag(_CONTENT_TYPE))
    c.ok &= c.pos == c.end
    # parse_entry's checks: an address and a known type (sizes are < 2**63: 9 bytes)
    c.ok &= (address[1] > 0) & (atype <= 2)
    if not c.ok.all():
        return None
    try:
        addresses = _strings(c.buf, *address)
        etags = _strings(c.buf, *etag)
        ctypes = _strings(c.buf, *ctype)
    except ValueError:
        return None
    relative = (atype == int(AddressType.RELATIVE)) | (
        (atype == int(AddressType.BY_PREFIX_DEPRECATED))
        & ~np.asarray(pc.match_substring(addresses, "://"), np.bool_)
    )
    full = pc.if_else(
        pa.array(relative), pc.binary_join_element_wise(namespace_base, addresses, ""), addresses
    )
    ctypes = pc.if_else(pc.equal(pc.binary_length(ctypes), 0), DEFAULT_CONTENT_TYPE, ctypes)
    return (
        full,
        pa.array(size.astype(np.int64)),
        etags,
        pa.array(seconds.astype(np.int64)),
        ctypes,
    )
