"""Object entries a block at a time: the identities and graveler values of many links.

A ``link_many`` batch reaches the encoder's worker as pending records (address, size
and checksum each) sharing modification time, address type and content type.  What
each becomes in the L1 file is ``encode_value(identity, data)``
(:func:`lsmstore.graveler.value.encode_value`), ``data`` being its ``catalog.Entry``
bytes (:class:`~lsmstore.objects.entry.BatchEncoder`).  Records of one *layout* -- the
same address length, checksum length and size varint length -- have values of one
length, each field at the same offset.  So a layout's records are a 2-D array of
bytes filled a column at a time with numpy: the shared fields once, the addresses and
checksums as the rows of their joined bytes, the sizes' varints and big-endian forms
by array arithmetic.  Only the SHA-256 of each identity is a call per record; the
rows are cut into ``bytes`` by one ``struct`` unpack.  It makes exactly the bytes
``BatchEncoder.encode_many`` and ``encode_values`` make (``tests/test_object_entry.py``),
in half the time.

A batch of many layouts (varied address or checksum lengths and sizes in many
combinations) would pay numpy's per-call cost per layout: past :data:`MAX_LAYOUTS`,
:func:`encode_block` declines (None) and the caller encodes entry by entry.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from operator import methodcaller
from typing import Any

import numpy as np

from lsmstore.graveler.value import length_header
from lsmstore.graveler.varint import encode_uvarint
from lsmstore.objects.entry import _STRING_HEAD, _T_INT64, TAG_ADDRESS, TAG_ETAG, TAG_SIZE, _pack_q

#: Layouts a block is encoded in at most (see the module docstring).
MAX_LAYOUTS = 8
#: Address and checksum lengths at most (the checks bound them far lower).
_MAX_LENGTH = 1 << 24
#: ``n >= _BOUNDS[k]`` for k < the length of n's varint (0 for n == 0, a field left out).
_BOUNDS = np.array([1 << (7 * k) for k in range(10)], dtype=np.uint64)
#: An identity (SHA-256) is 32 bytes: its length's header in a graveler value.
_IDENTITY_HEAD = length_header(32)
_sha256 = hashlib.sha256
_digest = methodcaller("digest")
_U8 = np.uint8

Made = tuple[list[bytes], list[bytes], int]


def encode_block(
    addresses: Sequence[str],
    sizes: Sequence[int],
    checksums: Sequence[str],
    *,
    timestamp: bytes,
    tail: bytes,
    identity_tail: bytes,
) -> Made | None:
    """``(identities, values, data_bytes)`` of the entries: each value
    ``encode_value(identity, data)``, ``data_bytes`` the sum of the data's lengths;
    None when there are more than :data:`MAX_LAYOUTS` layouts.  ``timestamp`` is the
    encoded field 2, ``tail`` the fields after the checksum, ``identity_tail`` what
    the identity's pre-image holds after the checksum (the encoder's shared fields).
    Sizes must be in ``0 .. 2**63 - 1``, strings valid UTF-8 (both checked before)."""
    n = len(addresses)
    if not n:
        return [], [], 0
    a_buf, a_len = _joined(addresses)
    t_buf, t_len = _joined(checksums)
    if int(a_len.max()) >= _MAX_LENGTH or int(t_len.max()) >= _MAX_LENGTH:
        return None
    s = np.array(sizes, dtype=np.uint64)
    v_len = np.searchsorted(_BOUNDS, s, side="right").astype(np.int64)
    layout = (a_len << 29) | (t_len << 4) | v_len
    shared = (timestamp, tail, identity_tail)
    if layout.min() == layout.max():  # the common case: one layout, rows in order
        la, lt, vl = int(a_len[0]), int(t_len[0]), int(v_len[0])
        return _block(a_buf.reshape(n, la), t_buf.reshape(n, lt), s, vl, *shared)
    kinds, which = np.unique(layout, return_inverse=True)
    if len(kinds) > MAX_LAYOUTS:
        return None
    a_rows = _rows_of(a_buf, a_len)
    t_rows = _rows_of(t_buf, t_len)
    identities: list[Any] = [None] * n
    values: list[Any] = [None] * n
    data_bytes = 0
    for k in range(len(kinds)):
        rows = np.flatnonzero(which == k)
        first = rows[0]
        la, lt, vl = int(a_len[first]), int(t_len[first]), int(v_len[first])
        a = a_rows(rows, la)
        t = t_rows(rows, lt)
        ids, vals, nbytes = _block(a, t, s[rows], vl, *shared)
        at = rows.tolist()
        list(map(identities.__setitem__, at, ids))
        list(map(values.__setitem__, at, vals))
        data_bytes += nbytes
    return identities, values, data_bytes


def _joined(strings: Sequence[str]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The UTF-8 of ``strings`` back to back, and each one's length in bytes."""
    joined = "".join(strings)
    if joined.isascii():  # a byte a character: the lengths are the strings'
        raw = joined.encode("ascii")
        lengths = np.fromiter(map(len, strings), np.int64, len(strings))
    else:
        parts = list(map(str.encode, strings))
        raw = b"".join(parts)
        lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    return np.frombuffer(raw, _U8), lengths


def _rows_of(
    buf: np.ndarray[Any, Any], lengths: np.ndarray[Any, Any]
) -> Callable[[np.ndarray[Any, Any], int], np.ndarray[Any, Any]]:
    """A function of row numbers and their common length giving those strings of
    ``buf`` (strings of ``lengths`` back to back) as a 2-D array: a gather of whole
    rows when every string has one length (sizes of several varint lengths), else of
    every byte."""
    if lengths.min() == lengths.max():
        table = buf.reshape(len(lengths), int(lengths[0]))
        return lambda rows, _: table[rows]
    starts = np.cumsum(lengths) - lengths
    return lambda rows, width: buf[starts[rows, None] + np.arange(width)]


def _block(
    a: np.ndarray[Any, Any],
    t: np.ndarray[Any, Any],
    s: np.ndarray[Any, Any],
    vl: int,
    timestamp: bytes,
    tail: bytes,
    identity_tail: bytes,
) -> Made:
    """:func:`encode_block` of rows of one layout: addresses ``a`` and checksums ``t``
    as 2-D arrays of bytes, sizes ``s`` (uint64) whose varints have ``vl`` bytes."""
    g, la = a.shape
    lt = t.shape[1]
    # the identity's pre-image: Int64(size) String(checksum) then the shared fields
    pre = _Rows(g)
    pre.const(_T_INT64)
    pre.put(s.astype(">u8").view(_U8).reshape(g, 8))
    pre.const(_STRING_HEAD + _pack_q(lt))
    pre.put(t)
    pre.const(identity_tail)
    identities = list(map(_digest, map(_sha256, pre.rows())))
    # the catalog.Entry: address (1), timestamp (2), size (3, if not 0), ETag (4), tail
    a_head = bytes((TAG_ADDRESS,)) + encode_uvarint(la) if la else b""
    t_head = bytes((TAG_ETAG,)) + encode_uvarint(lt) if lt else b""
    data_len = len(a_head) + la + len(timestamp) + (1 + vl if vl else 0) + len(t_head) + lt
    data_len += len(tail)
    data_head = length_header(data_len)
    out = _Rows(g)
    out.const(_IDENTITY_HEAD)
    out.put(np.frombuffer(b"".join(identities), _U8).reshape(g, 32))
    out.const(data_head + a_head)
    out.put(a)
    out.const(timestamp + (bytes((TAG_SIZE,)) if vl else b""))
    for k in range(vl):  # seven bits a byte, low first; all but the last have 0x80
        septet = (s >> np.uint64(7 * k)) & np.uint64(0x7F)
        out.put((septet | np.uint64(0x80 if k < vl - 1 else 0)).astype(_U8)[:, None])
    out.const(t_head)
    out.put(t)
    out.const(tail)
    return identities, out.rows(), g * data_len


class _Rows:
    """Rows of one width: constant bytes and, between them, columns filled from
    arrays -- laid down left to right, then made at once (:meth:`rows`)."""

    __slots__ = ("fills", "g", "template")

    def __init__(self, g: int) -> None:
        self.g = g
        self.template = bytearray()
        self.fills: list[tuple[int, np.ndarray[Any, Any]]] = []

    def const(self, b: bytes) -> None:
        """The same bytes in every row."""
        self.template += b

    def put(self, columns: np.ndarray[Any, Any]) -> None:
        """A row's next bytes from each row of ``columns`` (g x width)."""
        self.fills.append((len(self.template), columns))
        self.template += bytes(columns.shape[1])

    def rows(self) -> list[bytes]:
        """Each row as ``bytes``: the template repeated (a copy in C), the columns
        written into it (one numpy assignment each), one struct unpack."""
        g, width = self.g, len(self.template)
        if not g:
            return []
        buf = self.template * g
        array = np.frombuffer(buf, _U8).reshape(g, width)
        for at, columns in self.fills:
            array[:, at : at + columns.shape[1]] = columns
        del array  # the buffer's export
        return list(struct.Struct(f"{width}s" * g).unpack(buf))
