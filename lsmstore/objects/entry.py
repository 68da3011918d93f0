"""An object entry as lakeFS stores it: ``catalog.Entry`` protobuf plus its identity.

The value of an object's graveler record is ``(identity, data)`` where (lakeFS
``pkg/catalog/entry.go``, ``EntryToValue``):

* ``data`` is the ``catalog.Entry`` message (``proto/catalog.proto``) in protobuf's
  wire format -- fields in number order, proto3 defaults left out, metadata map entries
  in key (UTF-8 byte) order, each with its key and value (Go's ``proto.Marshal`` leaves
  map order unspecified; every order decodes the same).  The protobuf library's
  deterministic serialisation writes exactly that, except that it puts a key after
  the keys it is a prefix of (``"00"`` before ``"0"``): such entries, and batches
  (:class:`BatchEncoder`), are encoded here;
* ``identity`` is SHA-256 over lakeFS's typed identity encoding (``pkg/ident``) of
  ``Int64(size) String(e_tag) StringMap(metadata) [String(content_type)]``, the content
  type only when non-empty.  Address and modification time are not part of it: diff and
  merge call two entries equal exactly when lakeFS would (same size, ETag, metadata and
  content type).

Typed identity encoding: every field starts with one type byte (Bytes 0, String 1,
Int64 2, StringSlice 3, StringMap 4, Embedded 5).  ``Int64(v)`` is ``02 08`` and ``v``
as 8 bytes big-endian (two's complement); ``String(s)`` is ``01``, ``Int64(len(utf8))``,
the UTF-8 bytes; ``StringMap(m)`` is ``04``, ``Int64(len(m))``, then ``String(k)
String(v)`` per key in byte order.  docs/format.md, "Object entries", has a worked
example that ``tests/test_object_entry.py`` pins.
"""

from __future__ import annotations

import enum
import hashlib
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import methodcaller

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from lsmstore.errors import CorruptFileError
from lsmstore.graveler.value import encode_values
from lsmstore.graveler.varint import encode_uvarint
from lsmstore.objects.proto.catalog_pb2 import Entry as EntryMessage

#: lakeFS's ``catalog.DefaultContentType``: stored when an object is written without one.
DEFAULT_CONTENT_TYPE = "application/octet-stream"

#: The wire tags, ``(field number << 3) | wire type``, of ``catalog.Entry``'s fields,
#: of its ``last_modified`` Timestamp's and of a metadata map entry's: the one statement
#: of the layout that every encoder and decoder of entries uses -- the protobuf library
#: aside, the encoders here, the block encoder (:mod:`lsmstore.objects.entry_block`) and
#: the column decoder (:mod:`lsmstore.spark.entry_columns`).
TAG_ADDRESS = 0x0A  # 1, bytes
TAG_LAST_MODIFIED = 0x12  # 2, message
TAG_SIZE = 0x18  # 3, varint
TAG_ETAG = 0x22  # 4, bytes
TAG_METADATA = 0x2A  # 5, map entry (message)
TAG_ADDRESS_TYPE = 0x30  # 6, varint
TAG_CONTENT_TYPE = 0x3A  # 7, bytes
TAG_SECONDS = 0x08  # Timestamp 1, varint
TAG_NANOS = 0x10  # Timestamp 2, varint
TAG_MAP_KEY = 0x0A  # map entry 1, bytes
TAG_MAP_VALUE = 0x12  # map entry 2, bytes
(_ADDRESS, _LAST_MODIFIED, _SIZE, _ETAG, _METADATA, _ADDRESS_TYPE, _CONTENT_TYPE) = (
    bytes((TAG_ADDRESS,)),
    bytes((TAG_LAST_MODIFIED,)),
    bytes((TAG_SIZE,)),
    bytes((TAG_ETAG,)),
    bytes((TAG_METADATA,)),
    bytes((TAG_ADDRESS_TYPE,)),
    bytes((TAG_CONTENT_TYPE,)),
)
_SECONDS, _NANOS, _MAP_KEY, _MAP_VALUE = (
    bytes((TAG_SECONDS,)),
    bytes((TAG_NANOS,)),
    bytes((TAG_MAP_KEY,)),
    bytes((TAG_MAP_VALUE,)),
)

_T_STRING = b"\x01"
_T_INT64 = b"\x02\x08"
_T_STRING_MAP = b"\x04"
_pack_q = struct.Struct(">q").pack
_sha256 = hashlib.sha256


class AddressType(enum.IntEnum):
    """How ``address`` is read (``catalog.Entry.AddressType``)."""

    BY_PREFIX_DEPRECATED = 0  # old lakeFS entries: a full URI if it has a scheme
    RELATIVE = 1  # relative to the repository's storage namespace ("data/...")
    FULL = 2  # a full URI


@dataclass(frozen=True, slots=True)
class ObjectEntry:
    """The fields of one ``catalog.Entry``."""

    address: str
    address_type: AddressType
    size: int
    etag: str
    mtime: int  # seconds since the epoch (Timestamp.seconds)
    mtime_nanos: int = 0  # Timestamp.nanos
    content_type: str = DEFAULT_CONTENT_TYPE
    metadata: Mapping[str, str] = field(default_factory=dict)

    def is_relative(self) -> bool:
        return is_relative(self.address, self.address_type)


def is_relative(address: str, address_type: int) -> bool:
    """Whether an entry's ``address`` is relative to the storage namespace: its type
    says so, or it is an old lakeFS entry (by prefix) whose address has no scheme."""
    return address_type == AddressType.RELATIVE or (
        address_type == AddressType.BY_PREFIX_DEPRECATED and "://" not in address
    )


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return b"".join((_T_STRING, _T_INT64, _pack_q(len(b)), b))


def identity_bytes(size: int, etag: str, metadata: Mapping[str, str], content_type: str) -> bytes:
    """The typed encoding the identity hashes (see the module docstring)."""
    parts = [
        _T_INT64,
        _pack_q(size),
        _string(etag),
        _T_STRING_MAP,
        _T_INT64,
        _pack_q(len(metadata)),
    ]
    for k in sorted(metadata):  # code-point order == UTF-8 byte order (Go's sort.Strings)
        parts.append(_string(k))
        parts.append(_string(metadata[k]))
    if content_type:
        parts.append(_string(content_type))
    return b"".join(parts)


def entry_identity(size: int, etag: str, metadata: Mapping[str, str], content_type: str) -> bytes:
    """lakeFS's identity of an entry: SHA-256 (32 bytes) of :func:`identity_bytes`."""
    if not metadata:  # the common case, without the sort and the loop
        b = etag.encode("utf-8")
        parts = [_T_INT64, _pack_q(size), _T_STRING, _T_INT64, _pack_q(len(b)), b, _EMPTY_MAP]
        if content_type:
            parts.append(_string(content_type))
        return _sha256(b"".join(parts)).digest()
    return _sha256(identity_bytes(size, etag, metadata, content_type)).digest()


_EMPTY_MAP = _T_STRING_MAP + _T_INT64 + _pack_q(0)


def encode_entry(entry: ObjectEntry) -> bytes:
    """The ``catalog.Entry`` bytes of ``entry`` (see the module docstring)."""
    md = entry.metadata
    if md and _prefix_keys(md):
        enc = BatchEncoder(entry.mtime, entry.mtime_nanos, entry.address_type, entry.content_type)
        return enc.encode_with_metadata(entry.address, entry.size, entry.etag, md)[1]
    msg = EntryMessage()
    msg.address = entry.address
    ts = msg.last_modified
    ts.seconds = entry.mtime
    ts.nanos = entry.mtime_nanos
    msg.size = entry.size
    msg.e_tag = entry.etag
    if md:
        msg.metadata.update(md)
    msg.address_type = int(entry.address_type)  # type: ignore[assignment]
    msg.content_type = entry.content_type
    return msg.SerializeToString(deterministic=True)


def _prefix_keys(metadata: Mapping[str, str]) -> bool:
    """Whether a key is a proper prefix of another (then it is a prefix of the key that
    follows it in sorted order): the library would not write key order."""
    if len(metadata) < 2:
        return False
    keys = sorted(metadata)
    return any(map(str.startswith, keys[1:], keys))


def _metadata_field(metadata: Mapping[str, str]) -> bytes:
    """Field 5 of an entry: a map entry (key 1, value 2, both always written) per key,
    in code-point order (== UTF-8 byte order)."""
    parts = []
    for k in sorted(metadata):
        key = k.encode("utf-8")
        value = metadata[k].encode("utf-8")
        body = _MAP_KEY + _uvarint(len(key)) + key + _MAP_VALUE + _uvarint(len(value)) + value
        parts.append(_METADATA + _uvarint(len(body)) + body)
    return b"".join(parts)


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _BYTE[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if n < 0x200000:
        return bytes(((n & 0x7F) | 0x80, (n >> 7 & 0x7F) | 0x80, n >> 14))
    if n < 0x10000000:
        return bytes(((n & 0x7F) | 0x80, (n >> 7 & 0x7F) | 0x80, (n >> 14 & 0x7F) | 0x80, n >> 21))
    if n < 0x800000000:  # every mtime in seconds until the year 3058, every nanos
        return bytes(
            (
                (n & 0x7F) | 0x80,
                (n >> 7 & 0x7F) | 0x80,
                (n >> 14 & 0x7F) | 0x80,
                (n >> 21 & 0x7F) | 0x80,
                n >> 28,
            )
        )
    return encode_uvarint(n)


_BYTE = [bytes((i,)) for i in range(0x80)]
#: Field key and length of an address (field 1) or ETag (field 4) of under 128 bytes.
_ADDRESS_HEAD = [_ADDRESS + b for b in _BYTE]
_ETAG_HEAD = [_ETAG + b for b in _BYTE]


def _size_field(n: int) -> bytes:
    """Field 3 (size > 0): key and varint."""
    return _SIZE + (_BYTE[n] if n < 0x80 else _uvarint(n))


class BatchEncoder:
    """Encodes entries that share modification time, address type and content type --
    a ``link_many`` batch -- about three times faster than the protobuf library builds a
    message per entry: the shared fields are encoded once, per entry only address, size
    and ETag (and metadata, on the slower path).  Produces the library's bytes (protobuf
    wire format, fields in number order, proto3 defaults omitted) but for the order of
    metadata keys that are prefixes of others (see the module docstring);
    ``tests/test_object_entry.py`` checks it against the library and the written rules.
    Sizes must be non-negative (they are checked first).

    It is the :class:`~lsmstore.staging.pending.EntryMaker` of pending records (the
    writer's encoder makes their values, in its worker process): a pending record holds
    its :attr:`spec`, and it pickles as its four arguments.  The Spark data source and
    any other bulk writer of entries can use it the same way -- one per group of entries
    sharing those four fields."""

    __slots__ = ("_args", "_id_tail", "_tail", "_ts", "spec")

    def __init__(self, mtime: int, nanos: int, address_type: int, content_type: str) -> None:
        self._timed(mtime, nanos, int(address_type), content_type)
        ct = content_type.encode("utf-8")
        self._tail = (_ADDRESS_TYPE + _uvarint(address_type) if address_type else b"") + (
            _CONTENT_TYPE + _uvarint(len(ct)) + ct if ct else b""
        )
        self._id_tail = _EMPTY_MAP + (_string(content_type) if content_type else b"")

    def _timed(self, mtime: int, nanos: int, address_type: int, content_type: str) -> None:
        self._args = (mtime, nanos, address_type, content_type)
        #: The :data:`~lsmstore.staging.pending.MakerSpec` naming this encoder.
        self.spec = (_SPEC_NAME, *self._args)
        ts = (_SECONDS + _uvarint(mtime) if mtime else b"") + (
            _NANOS + _uvarint(nanos) if nanos else b""
        )
        self._ts = _LAST_MODIFIED + _uvarint(len(ts)) + ts

    def at(self, mtime: int, nanos: int) -> BatchEncoder:
        """An encoder of the same address type and content type for another time
        (their encoded fields are reused: one is made per one-link request)."""
        new = object.__new__(BatchEncoder)
        new._tail = self._tail
        new._id_tail = self._id_tail
        new._timed(mtime, nanos, self._args[2], self._args[3])
        return new

    def encode_with_metadata(
        self, address: str, size: int, etag: str, metadata: Mapping[str, str]
    ) -> tuple[bytes, bytes]:
        """:meth:`encode` of an entry with user metadata (a slower path)."""
        _, data = self.encode(address, size, etag)
        cut = len(data) - len(self._tail)  # the metadata goes between ETag and the tail
        identity = entry_identity(size, etag, metadata, self._args[3])
        return identity, data[:cut] + _metadata_field(metadata) + data[cut:]

    def __reduce__(self) -> tuple[type[BatchEncoder], tuple[int, int, int, str]]:
        return BatchEncoder, self._args

    def encode(self, address: str, size: int, etag: str) -> tuple[bytes, bytes]:
        """``(identity, data)`` of the entry."""
        a = address.encode()
        t = etag.encode()
        la = len(a)
        lt = len(t)
        data = b"".join(
            (
                _ADDRESS_HEAD[la] if 0 < la < 0x80 else (_ADDRESS + _uvarint(la) if la else b""),
                a,
                self._ts,
                _size_field(size) if size else b"",
                _ETAG_HEAD[lt] if 0 < lt < 0x80 else (_ETAG + _uvarint(lt) if lt else b""),
                t,
                self._tail,
            )
        )
        head = _ID_HEAD(_INT64_TYPE, size, _STRING_HEAD, lt)
        identity = _sha256(head + t + self._id_tail).digest()
        return identity, data

    def encode_many(
        self, addresses: Sequence[str], sizes: Sequence[int], etags: Sequence[str]
    ) -> tuple[list[bytes], list[bytes]]:
        """:meth:`encode` of many entries: their identities and their data, the same
        bytes made a column at a time -- every per-entry step a ``map`` in C, the
        sizes' varints written by the protobuf runtime in one packed field (or each
        distinct size once, when there are few), the field heads shared and each
        identity's pre-image one ``struct`` pack when all ETags have one length (MD5
        hex) -- ~30 % faster than :meth:`encode` per entry.  Entries of an empty or a long
        (128 bytes or more) address or ETag, or of size 0, take :meth:`encode`."""
        if not addresses:
            return [], []
        a = list(map(str.encode, addresses))
        t = list(map(str.encode, etags))
        la = list(map(len, a))
        lt = list(map(len, t))
        a_min, a_max, t_min, t_max = min(la), max(la), min(lt), max(lt)
        if not (0 < a_min and a_max < 0x80 and 0 < t_min and t_max < 0x80) or not all(sizes):
            made = list(map(self.encode, addresses, sizes, etags))
            return [m[0] for m in made], [m[1] for m in made]
        distinct = set(sizes)
        if len(distinct) * 8 <= len(sizes):  # few sizes (e.g. all one): each encoded once
            varints: Iterable[bytes] = map({n: _uvarint(n) for n in distinct}.__getitem__, sizes)
        else:
            varints = _varints(sizes)
        # a field head of one length for the lot (e.g. all ETags MD5 hex) is one object
        a_heads = (
            repeat(_ADDRESS_HEAD[a_min]) if a_min == a_max else map(_ADDRESS_HEAD.__getitem__, la)
        )
        t_heads = repeat(_ETAG_HEAD[t_min]) if t_min == t_max else map(_ETAG_HEAD.__getitem__, lt)
        data = list(
            map(
                b"".join,
                zip(
                    a_heads,
                    a,
                    repeat(self._ts + _SIZE),
                    varints,
                    t_heads,
                    t,
                    repeat(self._tail),
                    strict=False,  # the repeats are endless
                ),
            )
        )
        id_tail = self._id_tail
        typed: Iterable[bytes]
        if t_min == t_max:  # one struct packs each identity's whole pre-image
            pack = struct.Struct(f">2sq11s{t_min}s{len(id_tail)}s").pack
            mid = _STRING_HEAD + _pack_q(t_min)
            typed = map(pack, repeat(_T_INT64), sizes, repeat(mid), t, repeat(id_tail))
        else:
            heads = map(_ID_HEAD, repeat(_INT64_TYPE), sizes, repeat(_STRING_HEAD), lt)
            typed = map(b"".join, zip(heads, t, repeat(id_tail), strict=False))
        return list(map(_digest, map(_sha256, typed))), data

    def encode_values_many(
        self, addresses: Sequence[str], sizes: Sequence[int], etags: Sequence[str]
    ) -> tuple[list[bytes], list[bytes], int]:
        """The identities of many entries, their graveler values
        (:func:`~lsmstore.graveler.value.encode_value` of identity and data: what an
        L1 file holds) and the total length of their data: a block at a time with
        numpy where it pays (:meth:`encode_block`), else from :meth:`encode_many`."""
        if len(addresses) >= MIN_BLOCK:
            made = self.encode_block(addresses, sizes, etags)
            if made is not None:
                return made
        identities, data = self.encode_many(addresses, sizes, etags)
        return identities, encode_values(identities, data), sum(map(len, data))

    def encode_block(
        self, addresses: Sequence[str], sizes: Sequence[int], etags: Sequence[str]
    ) -> tuple[list[bytes], list[bytes], int] | None:
        """:meth:`encode_values_many` a block at a time
        (:func:`lsmstore.objects.entry_block.encode_block`); None when the entries have
        too many layouts for it."""
        # numpy is imported where blocks are made (the encoder's worker), not by every
        # process that reads or writes an entry
        from lsmstore.objects.entry_block import encode_block

        return encode_block(
            addresses,
            sizes,
            etags,
            timestamp=self._ts,
            tail=self._tail,
            identity_tail=self._id_tail,
        )


_SPEC_NAME = f"{__name__}:{BatchEncoder.__name__}"
#: Fewer entries than this are made by :meth:`BatchEncoder.encode_many`: a block's
#: numpy calls cost more than they save.
MIN_BLOCK = 64
#: ``Int64(size) String-type Int64-type`` then ``len(etag)``: the identity's first bytes.
_ID_HEAD = struct.Struct(">Hq3sq").pack
#: The type bytes of an Int64 as one big-endian number (``_ID_HEAD``'s first field).
_INT64_TYPE = int.from_bytes(_T_INT64, "big")
#: A String's type byte and its length's Int64 type bytes.
_STRING_HEAD = _T_STRING + _T_INT64
_digest = methodcaller("digest")


def _varint_message() -> type[Message]:
    """A message of one packed ``repeated uint64`` field: its bytes after tag and
    length are the varints of the values, back to back."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="lsmstore_varints.proto", package="lsmstore", syntax="proto3"
    )
    message = proto.message_type.add(name="Varints")
    message.field.add(
        name="v",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("lsmstore.Varints"))


_Varints = _varint_message()
#: One varint: continuation bytes (high bit set), then the last byte.
_VARINT = re.compile(rb"[\x80-\xff]*[\x00-\x7f]")


def _varints(values: Sequence[int]) -> list[bytes]:
    """The protobuf varint of each of ``values`` (non-negative, below 2**64)."""
    msg = _Varints()
    msg.v.extend(values)  # type: ignore[attr-defined]
    packed = msg.SerializeToString()
    start = 1  # after the field's tag (one byte) and its length (a varint)
    while packed[start] & 0x80:
        start += 1
    return _VARINT.findall(packed, start + 1)


def encode_value(entry: ObjectEntry) -> tuple[bytes, bytes]:
    """``(identity, data)`` of the graveler value of ``entry``."""
    return (
        entry_identity(entry.size, entry.etag, entry.metadata, entry.content_type),
        encode_entry(entry),
    )


def parse_entry(data: bytes, name: str) -> EntryMessage:
    """The ``catalog.Entry`` message of ``data``, checked: CorruptFileError naming
    ``name`` (the path) when it is not an object entry (e.g. a raw value written with
    ``put``): unparseable, no address, a negative size or an unknown address type."""
    msg = EntryMessage()
    try:
        msg.ParseFromString(data)
    except DecodeError as e:
        raise CorruptFileError(name, f"not an object entry: {e}") from None
    if not msg.address or msg.size < 0:
        raise CorruptFileError(name, "not an object entry: no address or a negative size")
    if not 0 <= msg.address_type <= 2:
        raise CorruptFileError(
            name, f"not an object entry: unknown address type {msg.address_type}"
        )
    return msg


_ADDRESS_TYPES = tuple(AddressType)


def decode_entry(data: bytes, name: str) -> ObjectEntry:
    """The entry of ``data`` (see :func:`parse_entry` for the errors)."""
    msg = parse_entry(data, name)
    ts = msg.last_modified
    md = msg.metadata
    return ObjectEntry(
        address=msg.address,
        address_type=_ADDRESS_TYPES[msg.address_type],
        size=msg.size,
        etag=msg.e_tag,
        mtime=ts.seconds,
        mtime_nanos=ts.nanos,
        content_type=msg.content_type,
        metadata=dict(md) if md else {},
    )
