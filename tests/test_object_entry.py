"""Object entries byte for byte: catalog.Entry protobuf bytes and lakeFS's identity,
each rebuilt here by hand from the documented rules (docs/format.md, "Object entries"),
plus the worked example the docs pin."""

from __future__ import annotations

import hashlib
import pickle
import struct

import pytest
from helpers.crafted_sst import varint
from hypothesis import given
from hypothesis import strategies as st

from lsmstore.errors import CorruptFileError
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.value import decode_value
from lsmstore.graveler.value import encode_value as graveler_value
from lsmstore.objects import entry_block
from lsmstore.objects.addresses import MAX_ADDRESS_BYTES
from lsmstore.objects.entry import (
    DEFAULT_CONTENT_TYPE,
    MIN_BLOCK,
    AddressType,
    BatchEncoder,
    ObjectEntry,
    decode_entry,
    encode_entry,
    encode_value,
    entry_identity,
)
from lsmstore.objects.linking import MAX_ENTRY_WITHOUT_METADATA
from lsmstore.objects.proto.catalog_pb2 import Entry as EntryMessage
from lsmstore.objects.rules import MAX_FIELD_BYTES
from lsmstore.staging import pending
from lsmstore.staging.encoder import columns, encode_columns
from lsmstore.staging.pending import Pending, maker_of

ETAG = "5eb63bbbe01eeed093cb22bb8f5acdc3"  # MD5 of b"hello world"
EXAMPLE = ObjectEntry(
    address="data/abc",
    address_type=AddressType.RELATIVE,
    size=11,
    etag=ETAG,
    mtime=1700000000,
    mtime_nanos=5,
    content_type="text/plain",
    metadata={"b": "2", "a": "1"},
)


# --- the rules, written out independently of lsmstore/objects/entry.py ---------------


def field(number: int, wire_type: int, payload: bytes) -> bytes:
    key = varint(number << 3 | wire_type)
    if wire_type == 2:  # length-delimited
        return key + varint(len(payload)) + payload
    return key + payload


def proto_string(number: int, s: str) -> bytes:
    return field(number, 2, s.encode()) if s else b""


def hand_entry(e: ObjectEntry) -> bytes:
    """Protobuf wire format of catalog.Entry: fields in number order, proto3 defaults
    omitted (the set Timestamp is always present), map entries as nested messages
    {1: key, 2: value} in key order with both fields always written (as Go's
    protobuf-go and upb do, even when empty)."""
    ts = (field(1, 0, varint(e.mtime)) if e.mtime else b"") + (
        field(2, 0, varint(e.mtime_nanos)) if e.mtime_nanos else b""
    )
    out = proto_string(1, e.address)
    out += field(2, 2, ts)
    out += field(3, 0, varint(e.size)) if e.size else b""
    out += proto_string(4, e.etag)
    for k in sorted(e.metadata):
        out += field(5, 2, field(1, 2, k.encode()) + field(2, 2, e.metadata[k].encode()))
    out += field(6, 0, varint(int(e.address_type))) if e.address_type else b""
    out += proto_string(7, e.content_type)
    return out


def library_entry(e: ObjectEntry) -> bytes:
    """The protobuf library's deterministic serialisation of ``e``."""
    msg = EntryMessage(
        address=e.address,
        size=e.size,
        e_tag=e.etag,
        metadata=dict(e.metadata),
        address_type=int(e.address_type),  # type: ignore[arg-type]
        content_type=e.content_type,
    )
    msg.last_modified.seconds = e.mtime
    msg.last_modified.nanos = e.mtime_nanos
    return msg.SerializeToString(deterministic=True)


def prefix_keys(metadata: dict[str, str]) -> bool:
    """Whether a metadata key is a proper prefix of another (the library orders those
    apart from key order: "00" before "0")."""
    return any(a != b and b.startswith(a) for a in metadata for b in metadata)


def i64(v: int) -> bytes:  # ident.MarshalInt64: type 2, length byte 8, big-endian
    return b"\x02\x08" + struct.pack(">q", v)


def s(v: str) -> bytes:  # ident.MarshalString: type 1, Int64(len), bytes
    b = v.encode()
    return b"\x01" + i64(len(b)) + b


def hand_identity(e: ObjectEntry) -> bytes:
    m = b"\x04" + i64(len(e.metadata))
    for k in sorted(e.metadata, key=lambda k: k.encode()):
        m += s(k) + s(e.metadata[k])
    opt = s(e.content_type) if e.content_type else b""
    return hashlib.sha256(i64(e.size) + s(e.etag) + m + opt).digest()


# --- tests ----------------------------------------------------------------------------


def test_worked_example_is_pinned() -> None:
    """The example of docs/format.md, "Object entries": exact bytes and identity."""
    data = encode_entry(EXAMPLE)
    assert data == hand_entry(EXAMPLE)
    assert (
        data.hex()
        == (
            "0a08646174612f616263"  # 1: address "data/abc"
            "12080880e2cfaa061005"  # 2: last_modified {seconds 1700000000, nanos 5}
            "180b"  # 3: size 11
            "2220"
            + ETAG.encode().hex()  # 4: e_tag
            + "2a060a0161120131"  # 5: metadata a=1
            "2a060a0162120132"  # 5: metadata b=2
            "3001"  # 6: address_type RELATIVE
            "3a0a746578742f706c61696e"  # 7: content_type "text/plain"
        )
    )
    identity, _ = encode_value(EXAMPLE)
    assert identity == hand_identity(EXAMPLE)
    assert identity.hex() == "029a34cf71fb855e46696a4d662a933a794744442f5b548764858d30a1f613d2"


def test_graveler_value_wraps_identity_and_entry() -> None:
    identity, data = encode_value(EXAMPLE)
    assert decode_value(graveler_value(identity, data)) == (identity, data)
    assert decode_entry(data, "p") == EXAMPLE


def test_identity_ignores_address_and_mtime_only() -> None:
    base = entry_identity(11, ETAG, {"a": "1"}, "text/plain")
    moved = ObjectEntry("s3://b/x", AddressType.FULL, 11, ETAG, 1, 0, "text/plain", {"a": "1"})
    assert encode_value(moved)[0] == base
    assert entry_identity(12, ETAG, {"a": "1"}, "text/plain") != base
    assert entry_identity(11, ETAG + "0", {"a": "1"}, "text/plain") != base
    assert entry_identity(11, ETAG, {"a": "2"}, "text/plain") != base
    assert entry_identity(11, ETAG, {"a": "1"}, "text/csv") != base


def test_empty_content_type_is_left_out_of_the_identity() -> None:
    """lakeFS hashes the content type only when set (entries older than the field)."""
    expected = hashlib.sha256(i64(3) + s("e") + b"\x04" + i64(0)).digest()
    assert entry_identity(3, "e", {}, "") == expected
    assert entry_identity(3, "e", {}, DEFAULT_CONTENT_TYPE) != expected


def test_metadata_order_is_utf8_byte_order() -> None:
    md = {"z": "1", "é": "2", "Z": "3", "a": "4", "\U0001f600": "5", "\uffff": "6"}
    e = ObjectEntry("data/x", AddressType.RELATIVE, 1, "e", 1, 0, "t", md)
    assert encode_value(e)[0] == hand_identity(e)
    assert encode_entry(e) == hand_entry(e)


@given(
    size=st.integers(0, 2**63 - 1),
    etag=st.text(min_size=1, max_size=40),
    metadata=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=5),
    content_type=st.text(max_size=20),
    mtime=st.integers(0, 253402300799),
    nanos=st.integers(0, 999_999_999),
    address_type=st.sampled_from(list(AddressType)),
)
def test_any_entry_matches_the_rules(
    size: int,
    etag: str,
    metadata: dict[str, str],
    content_type: str,
    mtime: int,
    nanos: int,
    address_type: AddressType,
) -> None:
    metadata = {
        k: v for k, v in metadata.items() if not any(0xD800 <= ord(c) < 0xE000 for c in k + v)
    }
    etag = "".join(c for c in etag if not 0xD800 <= ord(c) < 0xE000) or "e"
    content_type = "".join(c for c in content_type if not 0xD800 <= ord(c) < 0xE000)
    e = ObjectEntry("data/a", address_type, size, etag, mtime, nanos, content_type, metadata)
    identity, data = encode_value(e)
    assert data == hand_entry(e)
    assert identity == hand_identity(e)
    assert decode_entry(data, "p") == e
    assert EntryMessage.FromString(data) == EntryMessage.FromString(library_entry(e))
    if not prefix_keys(metadata):
        assert data == library_entry(e)
    enc = BatchEncoder(mtime, nanos, int(address_type), content_type)
    assert enc.encode_with_metadata("data/a", size, etag, metadata) == (identity, data)


def test_metadata_keys_that_are_prefixes_come_in_key_order() -> None:
    """The written rule (key order), not the protobuf library's order for such keys."""
    e = ObjectEntry("data/a", AddressType.RELATIVE, 1, "e", 1, 0, "", {"00": "b", "0": "a"})
    assert encode_entry(e) == hand_entry(e)
    assert encode_entry(e).index(b"\x0a\x010") < encode_entry(e).index(b"\x0a\x0200")


@pytest.mark.parametrize(
    "junk",
    [
        b"\xff\xff\xff",  # not protobuf
        b"",  # no address
        hand_entry(ObjectEntry("", AddressType.RELATIVE, 1, "e", 1)),
        field(6, 0, varint(7)) + proto_string(1, "data/x"),  # unknown address type
        b"plain value written with put",
    ],
)
def test_values_that_are_not_entries(junk: bytes) -> None:
    with pytest.raises(CorruptFileError) as e:
        decode_entry(junk, "the/path")
    assert "the/path" in str(e.value)


def test_old_entries_resolve_by_prefix() -> None:
    rel = ObjectEntry("data/x", AddressType.BY_PREFIX_DEPRECATED, 1, "e", 1)
    full = ObjectEntry("s3://b/data/x", AddressType.BY_PREFIX_DEPRECATED, 1, "e", 1)
    assert rel.is_relative() and not full.is_relative()


_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)


@given(
    address=_text,
    size=st.integers(0, 2**63 - 1),
    etag=_text,
    content_type=_text,
    mtime=st.integers(0, 253402300799),
    nanos=st.integers(0, 999_999_999),
    address_type=st.sampled_from(list(AddressType)),
)
def test_batch_encoder_matches_the_library(
    address: str,
    size: int,
    etag: str,
    content_type: str,
    mtime: int,
    nanos: int,
    address_type: AddressType,
) -> None:
    """link_many's faster encoder gives the protobuf library's bytes and the identity."""
    e = ObjectEntry(address, address_type, size, etag, mtime, nanos, content_type, {})
    got = BatchEncoder(mtime, nanos, int(address_type), content_type).encode(address, size, etag)
    assert got == encode_value(e) == (hand_identity(e), library_entry(e))


@given(
    entries=st.lists(
        st.tuples(
            _text,
            st.integers(0, 2**63 - 1),
            _text,
            st.sampled_from(["", "text/csv", DEFAULT_CONTENT_TYPE]),
            st.sampled_from([0, 1700000000]),
            st.sampled_from([0, 5]),
            st.sampled_from(list(AddressType)),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_pending_entries_are_made_as_the_library_encodes(
    entries: list[tuple[str, int, str, str, int, int, AddressType]],
) -> None:
    """The worker's path: pending records (their maker pickled, as it travels to the
    encoder's worker process) are made into exactly encode_value's identity and bytes,
    and the L1 file encoded from them holds those records."""
    makers: dict[tuple[int, int, int, str], BatchEncoder] = {}
    records: list[Pending] = []
    expected: list[Record] = []
    for i, (address, size, etag, ct, mtime, nanos, atype) in enumerate(entries):
        shared = (mtime, nanos, int(atype), ct)
        maker = makers.setdefault(shared, BatchEncoder(*shared))
        key = f"k{i:03d}".encode()
        records.append((key, maker.spec, address, size, etag))
        e = ObjectEntry(address, atype, size, etag, mtime, nanos, ct, {})
        expected.append(Record(key, *encode_value(e)))
    cols = pickle.loads(pickle.dumps(pending.split(list(records))[1]))
    assert cols is not None
    keys, identities, encoded, total = pending.make_encoded(cols)
    assert list(zip(keys, identities, encoded, strict=True)) == [
        (r.key, r.identity, graveler_value(r.identity, r.value)) for r in expected
    ]
    assert total == sum(len(r.value) for r in expected)
    sst, _ = encode_columns(*columns(records, pending=True), 0.01)
    assert list(SSTReader(sst, "t.sst")) == expected


@given(
    entries=st.lists(
        st.tuples(
            st.one_of(_text, st.from_regex(r"data/[a-z0-9/]{1,150}", fullmatch=True)),
            st.one_of(st.sampled_from([1, 4096]), st.integers(0, 2**63 - 1)),
            st.one_of(_text, st.from_regex(r"[0-9a-f]{1,130}", fullmatch=True)),
        ),
        max_size=40,
    ),
    shared=st.sampled_from([(1700000000, 5, 1, DEFAULT_CONTENT_TYPE), (0, 0, 2, "")]),
)
def test_encode_many_equals_encode_of_each(
    entries: list[tuple[str, int, str]], shared: tuple[int, int, int, str]
) -> None:
    """A batch's entries made a column at a time are encode()'s bytes and identities:
    few sizes or many, long or empty fields (encode's path), size 0."""
    enc = BatchEncoder(*shared)
    addresses, sizes, etags = ([e[i] for e in entries] for i in range(3))
    one_by_one = [enc.encode(*e) for e in entries]
    assert enc.encode_many(addresses, sizes, etags) == (
        [m[0] for m in one_by_one],
        [m[1] for m in one_by_one],
    )


@given(
    sizes=st.lists(st.integers(1, 2**63 - 1), min_size=1, max_size=30),
    etag_len=st.integers(1, 127),
    address_len=st.integers(1, 127),
    shared=st.sampled_from(
        [(1700000000, 5, 1, DEFAULT_CONTENT_TYPE), (0, 0, 2, ""), (1, 0, 0, "t")]
    ),
)
def test_encode_many_of_uniform_lengths_is_the_library_s_bytes(
    sizes: list[int], etag_len: int, address_len: int, shared: tuple[int, int, int, str]
) -> None:
    """Columns whose addresses and ETags each have one length (MD5 ETags: shared field
    heads, each identity's pre-image one struct pack) are made into the protobuf
    library's bytes and lakeFS's identity, entry for entry."""
    n = len(sizes)
    addresses = [f"{i:0{address_len}d}"[-address_len:] for i in range(n)]
    etags = [hashlib.md5(b"%d" % i).hexdigest()[:etag_len].ljust(etag_len, "e") for i in range(n)]
    mtime, nanos, atype, ct = shared
    entries = [
        ObjectEntry(a, AddressType(atype), size, e, mtime, nanos, ct, {})
        for a, size, e in zip(addresses, sizes, etags, strict=True)
    ]
    identities, data = BatchEncoder(*shared).encode_many(addresses, sizes, etags)
    assert data == list(map(library_entry, entries))
    assert identities == list(map(hand_identity, entries))


@pytest.mark.parametrize("repeat", [1, 16])
def test_encode_many_at_varint_boundaries(repeat: int) -> None:
    """Sizes whose varints are 1 to 9 bytes, each distinct (the packed field's
    varints) or each repeated (one encoding per size)."""
    sizes = [1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28, 2**35, 2**56, 2**63 - 1] * repeat
    addresses = [f"data/{i}" for i in range(len(sizes))]
    etags = ["e" * (i % 127 + 1) for i in range(len(sizes))]
    enc = BatchEncoder(1700000000, 0, 1, DEFAULT_CONTENT_TYPE)
    identities, data = enc.encode_many(addresses, sizes, etags)
    assert list(zip(identities, data, strict=True)) == list(
        map(enc.encode, addresses, sizes, etags)
    )


@pytest.mark.parametrize(
    "runs",
    [[40], [40, 5, 20, 1, 33], [1, 1, 2, 16, 15, 17], [3, 50], [300], [100, 5, 80], [1, 70, 2]],
)
def test_pending_runs_of_makers_are_made_as_each_record(runs: list[int]) -> None:
    """Pending columns holding runs of different makers (batches that coalesced
    several calls), long (a block) and short, travel pickled and are made record for
    record: graveler values of each record's identity and entry, and their total."""
    records: list[Pending] = []
    for r, length in enumerate(runs):
        maker = BatchEncoder(1700000000 + r % 2, r, 1 + r % 2, "" if r % 3 else "text/csv")
        records += [
            (f"k{r}-{i:03d}".encode(), maker.spec, f"data/{r}/{i}", 1 + (i * 7919) % 300, "e")
            for i in range(length)
        ]
    cols = pickle.loads(pickle.dumps(pending.split(list(records))[1]))
    assert cols is not None
    made = [maker_of(spec).encode(address, size, etag) for _, spec, address, size, etag in records]
    assert pending.make_encoded(cols) == (
        [r[0] for r in records],
        [m[0] for m in made],
        [graveler_value(*m) for m in made],
        sum(len(m[1]) for m in made),
    )


def test_largest_entry_without_metadata_fits_the_bound() -> None:
    """Pending records skip the value bound check: it holds for every such entry."""
    e = ObjectEntry(
        "s3://" + "a" * (MAX_ADDRESS_BYTES - 5),
        AddressType.FULL,
        2**63 - 1,
        "é" * (MAX_FIELD_BYTES // 2),
        253402300799,
        999_999_999,
        "c" * MAX_FIELD_BYTES,
        {},
    )
    assert len(e.address.encode()) == MAX_ADDRESS_BYTES
    assert len(e.etag.encode()) == len(e.content_type.encode()) == MAX_FIELD_BYTES
    assert len(encode_entry(e)) <= MAX_ENTRY_WITHOUT_METADATA


@pytest.mark.parametrize("length", [1, 127, 128, 300, 16383, 16384, 20000])
@pytest.mark.parametrize(
    "size", [1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**63 - 1]
)
def test_field_lengths_and_sizes_at_varint_boundaries(length: int, size: int) -> None:
    e = ObjectEntry("a" * length, AddressType.FULL, size, "e" * length, 1, 0, "t", {})
    assert encode_value(e) == (hand_identity(e), library_entry(e))


@given(
    st.integers(0, 2**40), st.integers(0, 999_999_999), st.integers(0, 2**40),
    st.integers(0, 999_999_999), st.sampled_from([0, 1]), st.sampled_from(["", "text/csv"]),
)  # fmt: skip
def test_batch_encoder_at_another_time_is_a_fresh_encoder(
    secs: int, nanos: int, secs2: int, nanos2: int, atype: int, ctype: str
) -> None:
    moved = BatchEncoder(secs, nanos, atype, ctype).at(secs2, nanos2)
    fresh = BatchEncoder(secs2, nanos2, atype, ctype)
    assert moved.spec == fresh.spec
    assert moved.encode("data/x", 7, "etag") == fresh.encode("data/x", 7, "etag")
    assert pickle.loads(pickle.dumps(moved)).spec == fresh.spec


# --- entries a block at a time (lsmstore.objects.entry_block) --------------------------

_LAYOUT_ADDRESSES = [f"data/part-{i:05d}-c000.parquet" for i in range(3)] + ["a", "data/é/x"]


@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(_LAYOUT_ADDRESSES),
            st.sampled_from([0, 1, 127, 128, 4096, 2**21, 2**63 - 1]),
            st.sampled_from(["d41d8cd98f00b204e9800998ecf8427e", "", "é-2", "x" * 128]),
        ),
        min_size=MIN_BLOCK,
        max_size=MIN_BLOCK * 3,
    ),
    shared=st.sampled_from(
        [(1700000000, 5, 1, DEFAULT_CONTENT_TYPE), (0, 0, 2, ""), (1, 0, 0, "text/é")]
    ),
)
def test_entries_made_a_block_at_a_time_are_the_library_s(
    rows: list[tuple[str, int, str]], shared: tuple[int, int, int, str]
) -> None:
    """Blocks of one layout or several (address, ETag and size varint lengths, empty
    fields, size 0, non-ASCII): each value is the graveler encoding of lakeFS's
    identity and the protobuf library's entry bytes, in the rows' order."""
    addresses, sizes, etags = ([r[i] for r in rows] for i in range(3))
    mtime, nanos, atype, ct = shared
    entries = [
        ObjectEntry(a, AddressType(atype), size, e, mtime, nanos, ct, {}) for a, size, e in rows
    ]
    data = list(map(library_entry, entries))
    identities = list(map(hand_identity, entries))
    enc = BatchEncoder(*shared)
    made = enc.encode_block(addresses, sizes, etags)
    layouts = {(len(a.encode()), len(e.encode()), len(varint(s)) if s else 0) for a, s, e in rows}
    if len(layouts) > entry_block.MAX_LAYOUTS:
        assert made is None  # declined: encode_values_many takes encode_many's path
    else:
        assert made is not None
    expected = (identities, list(map(graveler_value, identities, data)), sum(map(len, data)))
    assert made is None or made == expected
    assert enc.encode_values_many(addresses, sizes, etags) == expected


@pytest.mark.parametrize("n", [MIN_BLOCK - 1, MIN_BLOCK, 1000])
def test_a_block_of_one_layout_at_varint_boundaries(n: int) -> None:
    """Every size varint length (1 to 9 bytes), each a block of one layout, and the
    smallest block and below it (encode_many's path): the same bytes either way."""
    enc = BatchEncoder(1700000000, 0, 1, DEFAULT_CONTENT_TYPE)
    for size in [1, 127, 128, 16383, 16384, 2**21, 2**28, 2**35, 2**42, 2**49, 2**56, 2**63 - 1]:
        addresses = [f"data/{i:06d}" for i in range(n)]
        etags = [hashlib.md5(b"%d" % i).hexdigest() for i in range(n)]
        sizes = [size] * n
        identities, data = enc.encode_many(addresses, sizes, etags)
        assert enc.encode_values_many(addresses, sizes, etags) == (
            identities,
            list(map(graveler_value, identities, data)),
            sum(map(len, data)),
        )


def test_an_empty_block_is_empty() -> None:
    assert BatchEncoder(1, 0, 1, "").encode_block([], [], []) == ([], [], 0)


def test_a_block_of_too_many_layouts_is_declined() -> None:
    """More layouts than MAX_LAYOUTS: encode_block declines, encode_values_many makes
    the same bytes entry by entry."""
    n = 200
    addresses = [f"data/{'x' * (i % (entry_block.MAX_LAYOUTS + 1))}" for i in range(n)]
    sizes = [1 + i for i in range(n)]
    etags = ["e"] * n
    enc = BatchEncoder(1700000000, 0, 1, DEFAULT_CONTENT_TYPE)
    assert enc.encode_block(addresses, sizes, etags) is None
    identities, data = enc.encode_many(addresses, sizes, etags)
    assert enc.encode_values_many(addresses, sizes, etags) == (
        identities,
        list(map(graveler_value, identities, data)),
        sum(map(len, data)),
    )
