"""Staging-file encoding in the worker process and in threads: the same files, and a
worker that dies costs nothing but time."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
import uvloop

from lsmstore.errors import EntryTooLargeError, InvalidInputError
from lsmstore.graveler.record import Record, default_identity, tombstone
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import MAX_ENTRY_BYTES, write_sst, write_sst_columns
from lsmstore.graveler.value import encode_value as graveler_value
from lsmstore.objects.entry import (
    DEFAULT_CONTENT_TYPE,
    AddressType,
    BatchEncoder,
    ObjectEntry,
    encode_value,
)
from lsmstore.staging import files
from lsmstore.staging.encoder import INLINE_RECORDS, PICKLE_SLICE, THREAD_COLUMNS, Encoder
from lsmstore.staging.keys import make_record
from lsmstore.staging.memstore import Memstore, record_bytes, staged_bytes
from lsmstore.staging.pending import Pending, PendingCall, Staged


def _records(n: int, seed: int = 1) -> list[Record]:
    rng = random.Random(seed)
    keys = list({rng.randbytes(rng.randint(1, 40)) for _ in range(n)})  # unsorted
    out = []
    for i, k in enumerate(keys):
        if i % 7 == 0:
            out.append(tombstone(k))
        else:
            v = rng.randbytes(rng.randint(0, 200))
            out.append(Record(k, default_identity(v), v))
    return out


def _contents(sst: bytes, meta: bytes) -> tuple[list[Record], tuple[object, ...], bytes]:
    sc = files.decode_sidecar(meta, "t.meta")
    head = (sc.entries, sc.tombstones, sc.sst_size, sc.data_bytes, sc.first_key, sc.last_key)
    return list(SSTReader(sst, "t.sst")), head, sc.bloom.bitarray.tobytes()


async def _worker_ready(enc: Encoder, records: list[Record]) -> None:
    """Encode until a batch went to the worker (it starts on first use)."""
    for _ in range(400):
        before = enc.batches_in_process
        await enc.encode(records, 0.01)
        if enc.batches_in_process > before:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the worker never took a batch")


async def test_worker_and_thread_write_the_same_file() -> None:
    records = _records(3000)
    enc = Encoder(use_process=True, min_records=10)
    try:
        await _worker_ready(enc, records)
        in_worker = await enc.encode(records, 0.01)
        assert enc.batches_in_process >= 2
    finally:
        await enc.aclose()
    in_thread = await Encoder(use_process=False).encode(records, 0.01)
    got = _contents(*in_worker)
    assert got == _contents(*in_thread)
    assert got[0] == sorted(records)
    assert got[1][:2] == (len(records), len(records[::7]))


async def test_a_large_batch_goes_to_the_worker_in_slices_and_writes_the_same_file() -> None:
    # past THREAD_COLUMNS the request is built in a thread, each column pickled in
    # slices of PICKLE_SLICE rows (the last one short)
    records = _records(THREAD_COLUMNS + 2 * PICKLE_SLICE + 5, seed=3)
    enc = Encoder(use_process=True, min_records=10)
    try:
        await _worker_ready(enc, records[:100])
        before = enc.batches_in_process
        in_worker = await enc.encode(records, 0.01)
        assert enc.batches_in_process == before + 1
    finally:
        await enc.aclose()
    in_thread = await Encoder(use_process=False).encode(records, 0.01)
    assert _contents(*in_worker) == _contents(*in_thread)
    assert _contents(*in_worker)[0] == sorted(records)


async def test_a_large_batch_waits_for_a_worker_that_is_starting() -> None:
    records = _records(THREAD_COLUMNS + 500, seed=5)
    assert len(records) >= THREAD_COLUMNS  # keys drawn at random, duplicates dropped
    enc = Encoder(use_process=True, min_records=10)
    try:
        enc.start()  # not waited for: its task has not even run yet
        assert enc._starting is not None
        await enc.encode(records[:100], 0.01)  # small: a thread meanwhile
        assert (enc.batches_in_process, enc.batches_in_thread) == (0, 1)
        sst, meta = await enc.encode(records, 0.01)
        assert (enc.batches_in_process, enc.batches_in_thread) == (1, 1)
        assert enc.restarts == 1
        enc.start()  # running: nothing more
        assert enc._starting is None and enc.restarts == 1
        assert _contents(sst, meta)[0] == sorted(records)
    finally:
        await enc.aclose()


async def test_small_batches_stay_in_threads_and_tiny_ones_on_the_loop() -> None:
    enc = Encoder(use_process=True, min_records=100)
    try:
        for _ in range(3):
            await enc.encode(_records(50), 0.01)
        tiny = _records(INLINE_RECORDS)
        sst, meta = await enc.encode(tiny, 0.01)
        assert (enc.batches_in_process, enc.batches_in_thread, enc.batches_inline) == (0, 3, 1)
        assert enc._proc is None and enc._starting is None  # never started
        assert _contents(sst, meta)[0] == sorted(tiny)
    finally:
        await enc.aclose()


async def test_a_dead_worker_costs_no_batch_and_is_restarted() -> None:
    records = _records(500)
    enc = Encoder(use_process=True, min_records=10)
    try:
        await _worker_ready(enc, records)
        proc = enc._proc
        assert proc is not None
        proc.kill()
        await proc.wait()
        # batches right after the death are encoded in threads, correctly
        for _ in range(3):
            sst, meta = await enc.encode(records, 0.01)
            assert _contents(sst, meta)[0] == sorted(records)
        await _worker_ready(enc, records)  # a later batch restarted it
        assert enc.restarts == 2
        assert enc._proc is not proc
    finally:
        await enc.aclose()


async def test_aclose_stops_the_worker_and_later_batches_use_threads() -> None:
    records = _records(200)
    enc = Encoder(use_process=True, min_records=10)
    await _worker_ready(enc, records)
    proc = enc._proc
    assert proc is not None
    await enc.aclose()
    assert proc.returncode is not None
    before = enc.batches_in_thread
    sst, meta = await enc.encode(records, 0.01)
    assert enc.batches_in_thread == before + 1
    assert _contents(sst, meta)[0] == sorted(records)


@pytest.mark.parametrize("use_process", [True, False])
async def test_duplicate_keys_are_refused_in_either_place(use_process: bool) -> None:
    # a writer never sends duplicates; if it did, the error is the SST writer's own
    records = _records(100)
    records.append(records[3])
    enc = Encoder(use_process=use_process, min_records=10)
    try:
        if use_process:
            await _worker_ready(enc, _records(100, seed=2))
        with pytest.raises(InvalidInputError, match="strictly increasing"):
            await enc.encode(records, 0.01)
    finally:
        await enc.aclose()


@pytest.mark.parametrize("use_process", [True, False])
async def test_deferred_identities_become_sha256_of_the_value(use_process: bool) -> None:
    from lsmstore.staging.keys import DEFERRED_IDENTITY, make_record

    puts = [
        make_record(b"p%04d" % i, b"v%d" % i, None, 1024, 1024, defer_identity=True)
        for i in range(300)
    ]
    assert all(r[1] == DEFERRED_IDENTITY for r in puts)
    given = Record(b"given", b"mine", b"v")
    records = [*puts, given, tombstone(b"gone")]
    enc = Encoder(use_process=use_process, min_records=10)
    try:
        if use_process:
            await _worker_ready(enc, _records(100, seed=4))
        got = _contents(*await enc.encode(records, 0.01))[0]
    finally:
        await enc.aclose()
    expected = [Record(k, default_identity(v), v) for k, _, v in puts if v is not None]
    assert got == sorted([*expected, given, tombstone(b"gone")])


@pytest.mark.parametrize(("use_process", "n"), [(True, 300), (False, 300),
                                               (True, THREAD_COLUMNS + PICKLE_SLICE)])  # fmt: skip
async def test_pending_records_are_made_beside_the_others(use_process: bool, n: int) -> None:
    """Pending records (link_many's) are made while the file is encoded -- in the
    worker, or in the thread -- into the entry encode_value gives, beside made records,
    deferred identities and tombstones in one file; past THREAD_COLUMNS their columns go
    to the worker in slices too."""
    maker = BatchEncoder(1700000000, 5, int(AddressType.RELATIVE), DEFAULT_CONTENT_TYPE)
    links = [(b"l%04d" % i, maker.spec, f"data/x{i}", i, f"etag{i}") for i in range(n)]
    other = BatchEncoder(1600000000, 0, int(AddressType.FULL), "text/csv")
    links.append((b"full", other.spec, "s3://b/elsewhere", 7, "e"))
    put = make_record(b"p", b"value", None, 1024, 1024, defer_identity=True)
    records: list[Staged] = [*links, put, tombstone(b"gone")]
    enc = Encoder(use_process=use_process, min_records=10)
    try:
        if use_process:
            await _worker_ready(enc, _records(100, seed=5))
        before = enc.batches_in_process
        made = _contents(*await enc.encode(records, 0.01, pending=True))
        got = made[0]
        assert enc.batches_in_process == before + use_process
    finally:
        await enc.aclose()
    expected = [
        Record(b"l%04d" % i, *encode_value(ObjectEntry(f"data/x{i}", AddressType.RELATIVE, i,
               f"etag{i}", 1700000000, 5)))
        for i in range(n)
    ]  # fmt: skip
    full = ObjectEntry("s3://b/elsewhere", AddressType.FULL, 7, "e", 1600000000, 0, "text/csv")
    expected.append(Record(b"full", *encode_value(full)))
    expected += [Record(b"p", default_identity(b"value"), b"value"), tombstone(b"gone")]
    assert got == sorted(expected)
    # the columns' file and sidecar (counts, data bytes, bloom) are the record-at-a-time
    # encoding's, byte for byte
    sst, meta, _ = files.encode_staging_file(sorted(expected), 0.01)
    assert made == _contents(sst, meta)


@pytest.mark.parametrize(
    ("keys", "encoded", "error", "match"),
    [
        ([], [], InvalidInputError, "no records"),
        ([b"a"], [], InvalidInputError, "columns of 1 keys and 0 values"),
        ([b"", b"a"], [b"\x00\x00", b"\x00\x00"], InvalidInputError, "non-empty"),
        ([b"b", b"a"], [b"\x00\x00", None], InvalidInputError, "b'a' follows b'b'"),
        ([b"a", b"a"], [None, None], InvalidInputError, "strictly increasing"),
        ([b"a", b"b"], [None, b"\x00" * MAX_ENTRY_BYTES], EntryTooLargeError, "b'b' of"),
    ],
)
def test_staging_columns_are_checked_as_records_are(
    keys: list[bytes], encoded: list[bytes | None], error: type[Exception], match: str
) -> None:
    """write_sst_columns refuses what write_sst refuses, naming the key at fault."""
    with pytest.raises(error, match=match):
        write_sst_columns(keys, encoded)


def test_staging_columns_hold_tombstones_and_values() -> None:
    records = sorted(_records(500, seed=9))
    encoded = [None if r.value is None else graveler_value(r.identity, r.value) for r in records]
    sst = write_sst_columns([r.key for r in records], encoded)
    assert list(SSTReader(sst, "t.sst")) == records
    assert len(sst) == len(write_sst(records))  # the same entries and blocks


def test_a_memstore_charges_pending_records_and_their_replacements() -> None:
    maker = BatchEncoder(1, 0, 1, "")
    mem = Memstore()
    rec = Record(b"k", b"i", b"v" * 10)
    link = (b"k", maker.spec, "data/a", 1, "etag")
    assert mem.add_many([rec]) == record_bytes(rec)
    assert mem.add_staged([link]) == staged_bytes(link) - record_bytes(rec)
    assert mem.add_many([rec]) == record_bytes(rec) - staged_bytes(link)  # after a pending one
    assert mem.nbytes == record_bytes(rec) and mem.records() == [rec]
    assert staged_bytes(link) >= len(b"k") + len(maker.encode("data/a", 1, "etag")[1])


def _call(records: list[Pending]) -> PendingCall:
    """The PendingCall of pending records sharing one maker spec."""
    keys, specs, addresses, sizes, checksums = (list(c) for c in zip(*records, strict=True))
    assert len(set(specs)) == 1
    return PendingCall(keys, specs[0], addresses, sizes, checksums, sum(map(staged_bytes, records)))


def _state(mem: Memstore) -> tuple[object, ...]:
    """Everything a memstore tells: charge, records, lookups, the encoder's split
    (made records and pending rows, as sets: their order does not matter)."""
    made, pending = mem.split()
    rows = set(zip(*pending, strict=True)) if pending is not None else set()
    keys = [r[0] for r in mem.records()]
    return (
        mem.nbytes,
        len(mem),
        mem.records(),
        mem.sorted_records(),
        [mem.get(k) for k in keys],
        set(made),
        rows,
    )


def test_a_memstore_holds_calls_as_the_record_loop_does() -> None:
    """A call's pending records held as columns (link_many's column path) leave the
    memstore as the record-by-record path does -- charge, records, lookups and what
    the encoder is given -- through every mix of calls, puts and links: all keys new,
    a key given twice in a call, a key already held, a call's key written again
    later by a put, a link or another call."""
    rng = random.Random(11)
    specs = [BatchEncoder(1, 0, 1, "").spec, BatchEncoder(2, 0, 1, "t").spec]
    for _ in range(300):
        fast, slow = Memstore(), Memstore()
        for _ in range(rng.randrange(1, 6)):
            keys = [b"k%d" % rng.randrange(12) for _ in range(rng.randrange(1, 8))]
            kind = rng.randrange(3)
            if kind == 0:  # a call
                spec = rng.choice(specs)
                recs: list[Pending] = [
                    (k, spec, f"data/{rng.randrange(99)}", rng.randrange(9), "e" * (1 + k[-1] % 3))
                    for k in keys
                ]
                assert fast.add_call(_call(recs)) == slow.add_staged(recs)
            elif kind == 1:  # puts and tombstones
                made = [
                    (k, b"i", None if rng.random() < 0.2 else b"v" * rng.randrange(5)) for k in keys
                ]
                assert fast.add_many(made) == slow.add_many(made)  # type: ignore[arg-type]
            else:  # single links and puts by the record loop
                mixed: list[Staged] = [
                    (k, specs[0], "data/x", 1, "e") if rng.random() < 0.5 else (k, b"i", b"w")
                    for k in keys
                ]
                assert fast.add_staged(mixed) == slow.add_staged(mixed)
            assert _state(fast) == _state(slow)


def test_closing_on_the_standard_event_loop_leaves_no_unknown_child(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker exits as soon as its stdin closes; nothing may reap it behind the
    child watcher's back (which then logs "Unknown child process pid ..., will report
    returncode 255" at exit).  The standard loop, not uvloop: the watcher is its."""
    records = _records(300)

    async def lifecycle() -> None:
        enc = Encoder(use_process=True)
        await _worker_ready(enc, records)
        assert enc.batches_in_process >= 1
        await enc.aclose()

    caplog.set_level(logging.WARNING, logger="asyncio")
    with asyncio.Runner() as runner:  # the standard event loop
        assert not isinstance(runner.get_loop(), type(uvloop.new_event_loop()))
        for _ in range(12):
            runner.run(lifecycle())
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
