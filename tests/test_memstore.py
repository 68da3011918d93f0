"""Memstore, staging-file encoding (SST + sidecar + bloom), key checks and the k-way merge."""

from __future__ import annotations

import random

import pytest
from pybloom_live import BloomFilter

from lsmstore.errors import (
    CorruptFileError,
    EntryTooLargeError,
    InvalidInputError,
    InvalidKeyError,
)
from lsmstore.graveler.record import Record, default_identity, tombstone
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import write_sst
from lsmstore.refstore.names import FILE_ID
from lsmstore.staging import files
from lsmstore.staging.keys import check_key, check_value, encode_key
from lsmstore.staging.memstore import RECORD_OVERHEAD, Memstore, prepare_rows, staged_bytes
from lsmstore.staging.merge import amerge_newest, live, merge_newest


def rec(key: bytes, value: bytes | None) -> Record:
    if value is None:
        return tombstone(key)
    return Record(key, default_identity(value), value)


def test_memstore_latest_wins_and_sorts() -> None:
    m = Memstore()
    assert m.add(rec(b"b", b"1")) == 1 + 1 + RECORD_OVERHEAD
    m.add(rec(b"a", b"22"))
    delta = m.add(rec(b"b", b"333"))  # replaces: only the growth is charged
    assert delta == 2
    m.add(rec(b"c", None))
    assert len(m) == 3
    assert [r.key for r in m.sorted_records()] == [b"a", b"b", b"c"]
    assert m.get(b"b") == rec(b"b", b"333") and m.get(b"b").value == b"333"  # type: ignore[union-attr]
    assert m.get(b"c").is_tombstone  # type: ignore[union-attr]
    assert m.nbytes == sum(
        len(r.key) + len(r.value or b"") + RECORD_OVERHEAD for r in m.sorted_records()
    )


def test_prepared_rows_enter_a_memstore_as_add_staged_would() -> None:
    held = [rec(b"a", b"1"), rec(b"b", b"22"), rec(b"c", None)]
    call = [rec(b"b", b"333"), rec(b"d", b"4"), rec(b"d", b"55"), rec(b"e", None)]
    by_loop, by_rows = Memstore(), Memstore()
    for m in (by_loop, by_rows):
        m.add_many(held)
    rows = prepare_rows(call)  # may run in a thread: touches nothing but the call
    assert len(rows) == 3 and rows.charge == sum(map(staged_bytes, call))
    assert by_rows.add_rows(rows) == by_loop.add_staged(call)
    assert by_rows.nbytes == by_loop.nbytes
    assert by_rows.sorted_records() == by_loop.sorted_records()
    assert by_rows.get(b"d") == rec(b"d", b"55") and by_rows.get(b"b") == rec(b"b", b"333")


def test_file_ids_unique_time_sortable_and_valid() -> None:
    t = [1_700_000_000.0]
    ids = []
    for _ in range(50):
        ids.append(files.new_file_id(lambda: t[0]))
        t[0] += 0.01
    assert ids == sorted(ids) and len(set(ids)) == 50
    assert all(FILE_ID.match(i) and len(i) == 29 for i in ids)
    fixed = files.new_file_id(lambda: 1.0, lambda n: 0xABC)
    assert fixed == f"{1000:013x}{0xABC:016x}"


def test_staging_file_round_trip_and_bloom() -> None:
    rng = random.Random(7)
    keys = sorted({rng.randbytes(rng.randint(1, 20)) for _ in range(3000)})
    records = [rec(k, None if i % 10 == 0 else k * 2) for i, k in enumerate(keys)]
    sst, meta, _ = files.encode_staging_file(records, 0.01)
    got = files.decode_sidecar(meta, "x.meta")
    assert (got.entries, got.tombstones, got.sst_size) == (
        len(records),
        len(records[::10]),
        len(sst),
    )
    assert (got.first_key, got.last_key) == (keys[0], keys[-1])
    assert got.data_bytes == sum(len(r.key) + len(r.value or b"") for r in records)
    # every key is found; tombstones are entries too
    assert all(got.may_contain(k) for k in keys)
    # the filter is a plain pybloom-live BloomFilter over bloom_item(key)
    assert isinstance(got.bloom, BloomFilter)
    assert all(files.bloom_item(k) in got.bloom for k in keys[:100])
    # false positives near the configured rate, for keys inside the key range
    others = [k + b"\x00" for k in keys]
    fp = sum(got.may_contain(k) for k in others if k not in set(keys))
    assert fp < 0.03 * len(others)
    # the SST holds the records, tombstones as deletions
    reader = SSTReader(sst, "x.sst")
    assert list(reader) == records
    assert reader.get(keys[0]) == tombstone(keys[0])


def test_bloom_probe_agrees_with_pybloom_across_shapes() -> None:
    blooms = [files.build_bloom([b"k%d" % i for i in range(n)], n, 0.01) for n in (10, 300, 5000)]
    assert blooms[0].bits_per_slice == files.build_bloom([], 0, 0.01).bits_per_slice  # min size
    for key in [b"k1", b"k250", b"k4999", b"nope", b"\xff\x00"]:
        probe = files.BloomProbe(key)
        for b in blooms:
            assert probe.test(b) == (files.bloom_item(key) in b)


def test_sidecar_corruption_is_detected() -> None:
    _, meta, _ = files.encode_staging_file([rec(b"a", b"1")], 0.01)
    with pytest.raises(CorruptFileError, match="checksum"):
        files.decode_sidecar(meta[:-9] + bytes([meta[-9] ^ 1]) + meta[-8:], "f.meta")
    with pytest.raises(CorruptFileError, match=r"f\.meta"):
        files.decode_sidecar(meta[:20], "f.meta")
    with pytest.raises(CorruptFileError):
        files.decode_sidecar(b"garbage" * 10, "f.meta")


def test_encode_needs_records() -> None:
    with pytest.raises(InvalidInputError):
        files.encode_staging_file([], 0.01)


def test_prepared_sst_validation() -> None:
    good = write_sst([rec(b"a", b"1"), rec(b"b", None), rec(b"c", b"x" * 100)])
    sc = files.sidecar_of_prepared_sst(good, "p.sst", 1024, 1000, 0.01, 1 << 30)
    assert (sc.entries, sc.tombstones, sc.first_key, sc.last_key) == (3, 1, b"a", b"c")
    with pytest.raises(EntryTooLargeError, match="value"):
        files.sidecar_of_prepared_sst(good, "p.sst", 1024, 99, 0.01, 1 << 30)
    with pytest.raises(EntryTooLargeError, match="key"):
        long_key = write_sst([rec(b"k" * 30, b"1")])
        files.sidecar_of_prepared_sst(long_key, "p.sst", 16, 1000, 0.01, 1 << 30)
    with pytest.raises(CorruptFileError, match=r"p\.sst"):
        files.sidecar_of_prepared_sst(good[: len(good) // 2], "p.sst", 1024, 1000, 0.01, 1 << 30)
    with pytest.raises(CorruptFileError):
        files.sidecar_of_prepared_sst(b"\x00" * 4096, "p.sst", 1024, 1000, 0.01, 1 << 30)


def test_key_and_value_checks() -> None:
    assert encode_key("a/é") == "a/é".encode()
    assert encode_key(b"\xff") == b"\xff"
    with pytest.raises(InvalidInputError, match="Unicode"):
        encode_key("bad\udc80")
    with pytest.raises(InvalidKeyError, match="empty"):
        encode_key("")
    with pytest.raises(InvalidInputError):
        encode_key(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError, match="1025 bytes"):
        check_key("k" * 1025, 1024)
    assert check_key("k" * 1024, 1024) == b"k" * 1024
    with pytest.raises(EntryTooLargeError, match="over the 10-byte"):
        check_value(b"k", b"x" * 11, 10)
    with pytest.raises(InvalidInputError, match="must be bytes"):
        check_value(b"k", "text", 10)


def test_merge_newest_first_wins_and_keeps_tombstones() -> None:
    newest = [rec(b"a", b"new"), rec(b"c", None)]
    middle = [rec(b"a", b"mid"), rec(b"b", b"mid"), rec(b"c", b"mid")]
    oldest = [rec(b"b", b"old"), rec(b"d", b"old")]
    merged = list(merge_newest([newest, middle, oldest]))
    assert [(r.key, r.value) for r in merged] == [
        (b"a", b"new"),
        (b"b", b"mid"),
        (b"c", None),
        (b"d", b"old"),
    ]
    assert [r.key for r in live(merged)] == [b"a", b"b", b"d"]


async def test_async_merge_matches_sync_merge() -> None:
    rng = random.Random(3)
    sources = []
    for _ in range(5):
        keys = sorted({bytes([rng.randrange(40)]) for _ in range(25)})
        sources.append([rec(k, None if rng.random() < 0.2 else rng.randbytes(3)) for k in keys])

    async def agen(items: list[Record]):  # type: ignore[no-untyped-def]
        for r in items:
            yield r

    expected = list(merge_newest(sources))
    mixed = [agen(s) if i % 2 else s for i, s in enumerate(sources)]
    assert [r async for r in amerge_newest(mixed)] == expected
    assert [r async for r in amerge_newest(sources)] == expected
    # "equal" records are equal by key and identity; check values too
    got = [r async for r in amerge_newest([agen(s) for s in sources])]
    assert [r.value for r in got] == [r.value for r in expected]


def test_make_record_fast_path_matches_the_checks() -> None:
    from lsmstore.staging.keys import make_record

    assert make_record("a/b", b"v", None, 1024, 10) == Record(b"a/b", default_identity(b"v"), b"v")
    assert make_record("é", b"v", b"id", 1024, 10) == Record("é".encode(), b"id", b"v")
    assert make_record(b"\xff", bytearray(b"v"), None, 1024, 10)[2] == b"v"
    for key, value, error in [
        ("", b"v", InvalidKeyError),
        ("k" * 11, b"v", InvalidKeyError),
        ("é" * 6, b"v", InvalidKeyError),  # 12 UTF-8 bytes
        ("bad\udc80", b"v", InvalidInputError),
        (1, b"v", InvalidInputError),
        ("k", b"x" * 11, EntryTooLargeError),
        ("k", "str", InvalidInputError),
    ]:
        with pytest.raises(error):
            make_record(key, value, None, 10, 10)
    with pytest.raises(InvalidInputError):
        make_record("k", b"v", b"", 10, 10)


def test_put_many_fast_path_matches_the_checks() -> None:
    from lsmstore.staging.keys import make_put_records, make_record

    def one_by_one(items: list[tuple[object, ...]]) -> list[tuple[bytes, bytes, bytes | None]]:
        out = []
        for item in items:
            k, v, ident = (*item, None)[:3]
            out.append(make_record(k, v, ident, 10, 10, defer_identity=True))
        return out

    good: list[tuple[object, ...]] = [(b"k%d" % i, b"v%d" % i) for i in range(5)]
    mixed = [*good, ("s", b"v"), (b"i", b"v", b"id"), (b"b", bytearray(b"v"))]
    assert make_put_records(good, 10, 10) == one_by_one(good)
    assert make_put_records(mixed, 10, 10) == one_by_one(mixed)
    assert make_put_records(iter(mixed), 10, 10) == one_by_one(mixed)
    assert make_put_records([], 10, 10) == []
    for bad, error in [
        ([*good, (b"x" * 11, b"v")], InvalidKeyError),
        ([*good, (b"", b"v")], InvalidKeyError),
        ([*good, (b"k", b"x" * 11)], EntryTooLargeError),
        ([*good, (b"k",)], InvalidInputError),
        ([*good, b"kv"], InvalidInputError),
        (b"not items", InvalidInputError),
    ]:
        with pytest.raises(error):
            make_put_records(bad, 10, 10)


def test_memstore_records_are_left_to_the_collector_untracked() -> None:
    """The memstore keeps plain tuples (a Record given is copied into one), which
    CPython's cyclic collector stops tracking, so full collections do not walk the
    records of batches in flight; reads still hand out Records."""
    import gc

    from lsmstore.staging.keys import make_record

    m = Memstore()
    m.add(rec(b"a", b"1"))  # a Record
    m.add_many([rec(b"b", None), make_record(b"c", b"3", None, 10, 10, defer_identity=True)])
    assert all(type(t) is tuple for t in m.records())
    gc.collect()
    assert not any(gc.is_tracked(t) for t in m.records())
    assert type(m.get(b"a")) is Record and m.get(b"a") == rec(b"a", b"1")
    assert all(type(r) is Record for r in m.sorted_records())


def test_add_many_matches_add() -> None:
    recs = [rec(b"a", b"1"), rec(b"b", None), rec(b"a", b"22"), rec(b"b", b"333"), rec(b"c", b"")]
    one, many = Memstore(), Memstore()
    deltas = [one.add(r) for r in recs]
    assert many.add_many(recs) == sum(deltas)
    assert many.nbytes == one.nbytes and many.sorted_records() == one.sorted_records()
    assert [r.value for r in many.sorted_records()] == [b"22", b"333", b""]
