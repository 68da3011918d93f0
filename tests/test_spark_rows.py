"""The Spark data source's batch -> record conversion: the column-wise path
(``ObjectRecords.fast_rows`` / ``column_records``) gives exactly the records of the
per-row checks and encoding (``row_records``), and a row it does not take still gets the
per-row error."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsmstore.errors import InvalidInputError
from lsmstore.graveler.record import Record
from lsmstore.graveler.varint import encode_uvarint
from lsmstore.objects.addresses import ALLOWED_EXTERNAL_PREFIXES_KEY
from lsmstore.objects.entry import AddressType, ObjectEntry, encode_value, parse_entry
from lsmstore.objects.rules import MAX_PATH_BYTES
from lsmstore.spark import rows
from lsmstore.spark.entry_columns import decode_entries

NS = "file:///bench/ns"
T0 = 1_767_225_600


def _namespace(allowed: str | None = None) -> Any:
    meta = {} if allowed is None else {ALLOWED_EXTERNAL_PREFIXES_KEY: allowed}
    return rows.namespace_of(NS, NS, meta)


def _pick(rng: random.Random, *choices: Any) -> Any:
    return choices[rng.randrange(len(choices))]


def _pick_str(rng: random.Random, *choices: str) -> str:
    return choices[rng.randrange(len(choices))]


def _path(rng: random.Random, i: int) -> str:
    return _pick_str(
        rng,
        f"logs/{i:06d}.json",
        f"ünï/cødé/{i}",
        f"{i}/" + "k" * rng.randrange(900, 1100),  # around MAX_KEY_BYTES
        f"é{i}" * rng.randrange(300, 360),  # multi-byte, around the limit
        f"a b/{i}",
        f"{i}",
    )


def _address(rng: random.Random, i: int) -> str:
    return _pick_str(
        rng,
        f"{NS}/data/x/{i}",
        f"{NS}/data/x/{i}",
        f"{NS}/data/ünï/{i}",  # not a plain key: the row path
        f"{NS}/data/a%20b/{i}",
        f"{NS}/data/./x{i}",
        f"{NS}/data/_lsm/x{i}",
        f"{NS}/other/{i}",
        f"{NS}/_lsm/x{i}",
        f"{NS}/data/" + "y" * 5000,
        "s3://elsewhere/x",
        "file:///outside/x",
        f"{NS}data/x{i}",
    )


def _checksum(rng: random.Random, i: int) -> str:
    return _pick_str(
        rng,
        f"{i:032x}",
        f'"{i:032x}"',
        f" {i:x} ",
        "é" * rng.randrange(1, 600),
        "e",
        '"',
        "tab\there",
        "x" * 1025,
        f"{i:x}\x7f",
    )


def _rows(seed: int, n: int, *, valid: bool) -> dict[str, list[Any]]:
    rng = random.Random(seed)
    out: dict[str, list[Any]] = {
        k: []
        for k in (
            "path",
            "physical_address",
            "size",
            "checksum",
            "mtime",
            "content_type",
            "metadata",
        )
    }
    for i in range(n):
        out["path"].append(_path(rng, i) if not valid else f"p/{seed}/{i}/" + _path(rng, i)[:500])
        out["physical_address"].append(
            _address(rng, i) if not valid else _pick(rng, f"{NS}/data/x/{i}", f"{NS}/o/ü{i}")
        )
        out["size"].append(_pick(rng, 0, 1, i, 2**40, 2**62) if valid else _pick(rng, 0, i, -1))
        out["checksum"].append(
            _checksum(rng, i) if not valid else _pick(rng, f"{i:x}", f'"{i:x}"', "é", " z ")
        )
        out["mtime"].append(_pick(rng, None, T0, T0 + i % 3, 0, 253402300799))
        out["content_type"].append(_pick(rng, None, "text/plain", "application/x; ü", ""))
        out["metadata"].append(_pick(rng, None, [], [("k", "v")], [("ü", "")]))
    if valid:
        out["content_type"] = [c or None for c in out["content_type"]]
    return out


SCHEMA = rows.OBJECT_ARROW  # the write side takes the columns the read side gives


def _both(batch: pa.RecordBatch, ns: Any) -> tuple[list[Record], list[Record]]:
    conv = rows.ObjectRecords(ns, T0)
    fast = sorted(conv(batch))
    slow = sorted(rows.ObjectRecords(ns, T0).row_records(batch))
    return fast, slow


@pytest.mark.parametrize("seed", range(12))
def test_column_path_equals_row_path_on_valid_rows(seed: int) -> None:
    batch = pa.RecordBatch.from_pydict(_rows(seed, 400, valid=True), schema=SCHEMA)
    conv = rows.ObjectRecords(_namespace(), T0)
    mask = conv.fast_rows(batch)
    assert mask is not None
    taken = sum(mask.to_pylist())
    assert 0 < taken < batch.num_rows  # both paths ran
    fast, slow = _both(batch, _namespace())
    assert fast == slow
    assert [type(r) for r in fast] == [Record] * len(fast)


def test_column_path_takes_a_plain_batch_whole_and_encodes_like_one_entry() -> None:
    n = 300
    batch = pa.RecordBatch.from_pydict(
        {
            "path": [f"logs/{i:05d}" for i in range(n)],
            "physical_address": [f"{NS}/data/logs/{i:05d}" for i in range(n)],
            "size": pa.array([i * 7 for i in range(n)], pa.int64()),
            "checksum": [f"{i:032x}" for i in range(n)],
        }
    )
    conv = rows.ObjectRecords(_namespace(), T0)
    assert conv.fast_rows(batch).to_pylist() == [True] * n  # type: ignore[union-attr]
    got = list(conv(batch))
    for i, rec in enumerate(got):
        entry = ObjectEntry(f"data/logs/{i:05d}", AddressType.RELATIVE, i * 7, f"{i:032x}", T0)
        assert rec == Record(f"logs/{i:05d}".encode(), *encode_value(entry))
        assert parse_entry(rec.value or b"", "x").size == i * 7


@pytest.mark.parametrize("seed", range(40))
def test_rows_the_column_path_refuses_fail_or_pass_as_per_row(seed: int) -> None:
    """Random rows, many invalid: the converter fails exactly when the per-row path
    does, with the same error, and otherwise gives the same records."""
    ns = _namespace("file:///outside/") if seed % 2 else _namespace()
    data = _rows(seed, 3, valid=False)
    batch = pa.RecordBatch.from_pydict(data, schema=SCHEMA)
    try:
        slow = sorted(rows.ObjectRecords(ns, T0).row_records(batch))
    except InvalidInputError as e:
        with pytest.raises(type(e)) as got:
            list(rows.ObjectRecords(ns, T0)(batch))
        # the row at fault may differ in a batch of several bad rows; alone it is the same
        bad = [
            i
            for i in range(batch.num_rows)
            if _fails(rows.ObjectRecords(ns, T0).row_records, batch.slice(i, 1))
        ]
        if len(bad) == 1:
            assert str(got.value) == str(e)
        return
    assert sorted(rows.ObjectRecords(ns, T0)(batch)) == slow


def _fails(fn: Any, batch: pa.RecordBatch) -> bool:
    try:
        list(fn(batch))
    except InvalidInputError:
        return True
    return False


def test_column_types_the_column_path_does_not_take_go_by_row() -> None:
    base = {
        "path": ["a", "b"],
        "physical_address": [f"{NS}/data/a", f"{NS}/data/b"],
        "checksum": ["e", "f"],
    }
    cases = [
        {**base, "size": pa.array([1.0, 2.0])},  # a float size: refused per row
        {**base, "size": pa.array([1, 2], pa.uint64())},
        {**base, "size": pa.array([1, 2]), "path": pa.array([b"a", b"b"])},  # binary path
    ]
    conv = rows.ObjectRecords(_namespace(), T0)
    assert conv.fast_rows(pa.RecordBatch.from_pydict(cases[0])) is None
    with pytest.raises(InvalidInputError):
        list(conv(pa.RecordBatch.from_pydict(cases[0])))
    assert sorted(conv(pa.RecordBatch.from_pydict(cases[1]))) == sorted(
        conv.row_records(pa.RecordBatch.from_pydict(cases[1]))
    )
    with pytest.raises(InvalidInputError):
        list(conv(pa.RecordBatch.from_pydict(cases[2])))


def test_huge_unsigned_size_and_nulls_go_by_row() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "path": ["a", None],
            "physical_address": [f"{NS}/data/a", f"{NS}/data/b"],
            "size": pa.array([2**63, 1], pa.uint64()),
            "checksum": ["e", "f"],
        }
    )
    conv = rows.ObjectRecords(_namespace(), T0)
    assert conv.fast_rows(batch) is None  # unsigned: Spark's longs are signed
    with pytest.raises(InvalidInputError):
        list(conv(batch))
    signed = batch.set_column(2, "size", pa.array([3, 1], pa.int64()))
    assert conv.fast_rows(signed).to_pylist() == [True, False]  # type: ignore[union-attr]
    with pytest.raises(InvalidInputError):
        list(conv(signed))


def test_timestamp_mtimes_and_empty_batches() -> None:
    import datetime

    t = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    batch = pa.RecordBatch.from_pydict(
        {
            "path": ["a"],
            "physical_address": [f"{NS}/data/a"],
            "size": [3],
            "checksum": ["e"],
            "mtime": pa.array([t], pa.timestamp("us", "UTC")),
        }
    )
    conv = rows.ObjectRecords(_namespace(), T0)
    (rec,) = conv(batch)
    assert parse_entry(rec.value or b"", "a").last_modified.seconds == int(t.timestamp())
    empty = pa.RecordBatch.from_pydict({k: [] for k in SCHEMA.names}, schema=SCHEMA)
    assert list(conv(empty)) == []


# --- reads: entries decoded a column at a time ----------------------------------------------


def _entry(rng: random.Random, i: int) -> ObjectEntry:
    return ObjectEntry(
        address=_pick_str(
            rng, f"data/x/{i}", f"data/ü/{i}", "data/" + "a" * rng.randrange(100, 400), "s3://b/k"
        ),
        address_type=_pick(rng, AddressType.RELATIVE, AddressType.FULL, *[AddressType(0)] * 1),
        size=_pick(rng, 0, 1, 127, 128, i, 2**35, 2**63 - 1),
        etag=_pick_str(rng, "", "e", f"{i:032x}", "é" * rng.randrange(1, 200)),
        mtime=_pick(rng, 0, 1, T0, 2**33, 253402300799),
        mtime_nanos=_pick(rng, 0, 0, 1, 999_999_999),
        content_type=_pick_str(rng, "application/octet-stream", "text/plain", "", "ü" * 70),
        metadata=_pick(rng, {}, {}, {}, {"k": "v"}),
    )


def _batch_records(rng: random.Random, n: int, odd: float) -> list[Record]:
    out = []
    for i in range(n):
        key = f"k/{i:05d}/{rng.random()}".encode()
        if rng.random() < odd:
            raw = _pick(
                rng,
                b"\xff raw value",  # an inline object: not an entry
                b"\x0a\x01a\x0a\x01b",  # the address twice (the last wins)
                b"\x18\x05\x0a\x01a",  # fields out of order
                b"\x0a\x01a\x50\x01",  # an unknown field
                b"\x0a\x02\xc3\x28",  # an address that is not UTF-8
                b"\x0a\x01a\x30\x07",  # an unknown address type
                b"\x0a\x00",  # an empty address
                b"\x0a\x01a\x18" + b"\xff" * 9 + b"\x01",  # a negative size
            )
            out.append(Record(key, b"ident", raw))
            continue
        out.append(Record(key, *encode_value(_entry(rng, i))))
    return out


@pytest.mark.parametrize("seed", range(30))
def test_entries_decoded_a_column_at_a_time_equal_the_protobuf_library(seed: int) -> None:
    rng = random.Random(seed)
    ns = _namespace()
    odd = _pick(rng, 0.0, 0.0, 0.01, 0.3)
    records = _batch_records(rng, rng.randrange(1, 300), odd)
    want = rows.parsed_batch(records, ns)
    assert rows.object_batch(records, ns).equals(want)
    plain = [r for r in records if not parse_entry_or_none(r)]
    if plain:
        assert rows.object_batch(plain, ns).equals(rows.parsed_batch(plain, ns))
        if not odd:  # the column path read them
            assert decode_entries([r.value or b"" for r in plain], ns.base) is not None


@pytest.mark.parametrize("bad_key", [b"\xff\xfe/x", b"p/" + b"k" * MAX_PATH_BYTES])
def test_a_raw_key_no_path_names_is_left_out_as_list_objects_leaves_it(bad_key: bytes) -> None:
    """Not UTF-8, or over MAX_PATH_BYTES (a key of exactly that length stays)."""
    rng = random.Random(1)
    good = [Record(f"p/{i}".encode(), *encode_value(_entry(rng, i))) for i in range(3)]
    good.append(Record(b"q/" + b"k" * (MAX_PATH_BYTES - 2), *encode_value(_entry(rng, 3))))
    bad = Record(bad_key, *encode_value(_entry(rng, 9)))
    ns = _namespace()
    want = rows.object_batch(good, ns)
    assert want.num_rows == 4
    assert rows.object_batch([good[0], bad, *good[1:]], ns).equals(want)
    assert rows.object_batch([bad], ns).num_rows == 0


def parse_entry_or_none(rec: Record) -> bool:
    """True when the record has metadata or is no entry (the per-record path's cases)."""
    try:
        return bool(parse_entry(rec.value or b"", "x").metadata)
    except Exception:
        return True


def test_a_plain_batch_is_decoded_a_column_at_a_time() -> None:
    rng = random.Random(7)
    entries = [_entry(rng, i) for i in range(500)]
    entries = [e for e in entries if not e.metadata]
    datas = [encode_value(e)[1] for e in entries]
    assert decode_entries(datas, NS + "/") is not None
    assert decode_entries([*datas, b"\x0a\x01a\x50\x01"], NS + "/") is None


@pytest.mark.parametrize(
    "raw",
    [
        b"",  # an empty inline object
        b"\x0a" + encode_uvarint(2**63 - 1) + b"\x18\x05",  # a length past any entry, a field after
        b"\x0a" + encode_uvarint(2**63 - 8) + b"abc\x18\x01",
        b"\x0a\x01a\x12" + encode_uvarint(2**62) + b"\x08\x01\x18\x01",  # the timestamp's
        b"\x0a\x01a\x22" + b"\xff" * 8 + b"\x7f\x30\x01",  # the ETag's, 9 bytes
    ],
)
def test_raw_values_and_claimed_lengths_read_as_by_the_library(raw: bytes) -> None:
    """Raw values (inline objects: any bytes) beside entries read as the per-record path
    reads them; a claimed length is bounded by its entry before it moves a position."""
    ns = _namespace()
    entry = Record(b"k/0", *encode_value(_entry(random.Random(3), 0)))
    for records in ([Record(b"k/1", b"ident", raw)], [entry, Record(b"k/1", b"ident", raw)]):
        assert rows.object_batch(records, ns).equals(rows.parsed_batch(records, ns))
    assert decode_entries([raw], ns.base) is None


_PIECES = st.sampled_from(
    [b"\x0a", b"\x12", b"\x18", b"\x22", b"\x2a", b"\x30", b"\x3a", b"\x08", b"\x10",
     b"\xff" * 9 + b"\x7f", b"\xff" * 10 + b"\x01", b"\x80", b"\x00", b"\x05", b"a", b"\xc3"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    cut=st.integers(0, 400),
    inserted=st.lists(st.tuples(st.integers(0, 400), st.lists(_PIECES, max_size=4)), max_size=3),
    seed=st.integers(0, 50),
)
def test_crafted_values_read_as_by_the_library(
    cut: int, inserted: list[tuple[int, list[bytes]]], seed: int
) -> None:
    """An entry cut short or with tags, varints of any length and bytes put in reads as
    the per-record path reads it (an entry, an inline object), never an error of its own."""
    ns = _namespace()
    entry = _entry(random.Random(seed), seed)
    data = bytearray(encode_value(dataclasses.replace(entry, metadata={}))[1])
    del data[cut:]
    for at, pieces in inserted:
        data[at:at] = b"".join(pieces)
    records = [Record(b"k/0", *encode_value(_entry(random.Random(1), 1))),
               Record(b"k/1", b"ident", bytes(data))]  # fmt: skip
    assert rows.object_batch(records, ns).equals(rows.parsed_batch(records, ns))


# --- reads: a partition's records in chunks ---------------------------------------------


@pytest.mark.parametrize("seed", range(6))
async def test_partition_chunks_equal_the_record_scan(seed: int) -> None:
    """Read a block at a time (no staged files), a partition gives the records of the
    record-at-a-time scan, for bounds inside blocks, between them and outside the keys."""
    from lsmstore.graveler.ranges import RangePolicy
    from lsmstore.spark import direct, scan
    from lsmstore.storage.memory import MemoryStore

    rng = random.Random(seed)
    store = MemoryStore()
    keys = sorted({f"k{rng.randrange(10**6):07d}".encode() for _ in range(3000)})
    records = [Record(k, b"i" * 32, b"v" * rng.randrange(0, 300)) for k in keys]
    policy = RangePolicy(min_bytes=20_000, max_bytes=60_000, raggedness=7)
    ranges = await direct.write_ranges(store, records, policy)
    assert len(ranges) > 3
    ids = tuple(r.id for r in ranges)
    bounds = [None, b"", b"a", b"k0", b"z", *(rng.choice(keys) for _ in range(4))]
    bounds += [rng.choice(keys) + b"\0" for _ in range(2)]
    for _ in range(8):
        lo, hi = rng.choice(bounds), rng.choice(bounds)
        part = scan.ScanPartition(0, "mem://x", ids, (), lo or None, hi or None)
        want = [tuple(r) async for r in scan.scan_partition(store, part)]
        rows_ = rng.choice([1, 7, 100, 8192])
        chunks = [c async for c in scan.scan_partition_chunks(store, part, rows_)]
        assert [r for c in chunks for r in c] == want
        assert all(len(c) == rows_ for c in chunks[:-1]) and all(chunks)
