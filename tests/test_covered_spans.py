"""Covered spans: compaction marks runs of staged deletes that remove every base key they
span, and a listing over that base seeks past them instead of walking each tombstone."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import xxhash

from lsmstore import layout
from lsmstore.compaction.coverage import (
    MIN_SPAN_TOMBSTONES,
    Run,
    _BaseKeys,
    covered_spans,
    tombstone_runs,
)
from lsmstore.compaction.job import CompactionJob
from lsmstore.compaction.merge_worker import MergeWorker
from lsmstore.errors import CorruptFileError
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.sst_writer import write_sst
from lsmstore.refstore.base import Ref, RefStore
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.files import (
    SIDECAR_MAGIC,
    SIDECAR_MAGIC_COVERED,
    SIDECAR_SUFFIX,
    decode_sidecar,
    encode_sidecar,
    encode_staging_file,
)
from lsmstore.staging.reader import Files, SidecarCache, Snapshot
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.compaction import (
    BRANCH,
    REPO,
    PlainCache,
    append_l1_file,
    make_commit,
    make_config,
    rec,
    setup_branch,
)
from lsmstore.testing.faulty_store import FaultyStore


@pytest.fixture
async def refstore(tmp_path: Path) -> AsyncIterator[RefStore]:
    async with EmbeddedRefStore(tmp_path / "refs") as rs:
        yield await setup_branch(rs)


@pytest.fixture
def objects() -> FaultyStore:
    return FaultyStore(MemoryStore())


def key(i: int) -> bytes:
    return f"a/{i:05d}".encode()


# --- the sidecar format -----------------------------------------------------------------


def test_sidecar_without_spans_stays_version_1() -> None:
    _, meta, _ = encode_staging_file([rec("a", "1"), rec("b", None)], 0.01)
    assert meta.startswith(SIDECAR_MAGIC)
    back = decode_sidecar(meta)
    assert back.covered == () and back.base == "" and back.tombstones == 1


def test_sidecar_spans_round_trip() -> None:
    records = [rec(key(i), None) for i in range(10)]
    _, _, sc = encode_staging_file(records, 0.01)
    spans = ((key(0), key(3)), (key(5), key(8) + b"x"), (key(9), b""))
    meta = encode_sidecar(dataclasses.replace(sc, base="c" * 64, covered=spans))
    assert meta.startswith(SIDECAR_MAGIC_COVERED)
    back = decode_sidecar(meta)
    assert back.covered == spans and back.base == "c" * 64
    assert (back.first_key, back.last_key, back.entries) == (key(0), key(9), 10)


@pytest.mark.parametrize(
    "spans",
    [
        ((b"a/00005", b"a/00003"),),  # end before lo
        ((b"a/00005", b"a/00005"),),  # empty
        ((b"a/00000", b"a/00005"), (b"a/00004", b"a/00006")),  # overlapping
        ((b"a/00000", b""), (b"a/00005", b"a/00006")),  # after an unbounded span
        ((b"z", b""),),  # starting past the file's last key
        ((b"a", b"a/00003"),),  # starting before the file's first key
    ],
)
def test_sidecar_with_bad_spans_is_corrupt(spans: tuple[tuple[bytes, bytes], ...]) -> None:
    _, _, sc = encode_staging_file([rec(key(i), None) for i in range(10)] + [rec("b", None)], 0.01)
    meta = encode_sidecar(dataclasses.replace(sc, base="c" * 64, covered=spans))
    with pytest.raises(CorruptFileError):
        decode_sidecar(meta, "x.meta")


def test_sidecar_claiming_too_many_spans_is_corrupt() -> None:
    _, _, sc = encode_staging_file([rec(key(i), None) for i in range(10)], 0.01)
    meta = encode_sidecar(dataclasses.replace(sc, base="c", covered=((key(0), key(1)),)))
    body = bytearray(meta[:-8])
    # the span count follows the base commit id ("c", 4 + 1 bytes) at the end of the
    # bloom filter: find it as the u32 1 written before the first span
    at = body.rfind((1).to_bytes(4, "little") + (7).to_bytes(4, "little"))
    body[at : at + 4] = (0xFFFFFFFF).to_bytes(4, "little")
    forged = bytes(body) + xxhash.xxh64_intdigest(bytes(body)).to_bytes(8, "little")
    with pytest.raises(CorruptFileError, match="covered spans"):
        decode_sidecar(forged, "x.meta")


# --- finding spans ----------------------------------------------------------------------


def _base(keys: list[bytes]) -> _BaseKeys:
    sst = write_sst([rec(k, "v") for k in sorted(keys)])
    return _BaseKeys([SSTReader(sst, "base")])


def test_spans_stop_at_a_base_key_the_run_keeps() -> None:
    base = [key(i) for i in range(0, 400)]
    # the run deletes 0..399 except 150, and also keys the base does not hold
    run = sorted([key(i) for i in range(400) if i != 150] + [b"a/00200x", b"a/99999"])
    spans = covered_spans(Run(run, b""), _base(base), min_len=10)
    # each span ends at the next key the file or the base holds
    assert spans == [(key(0), key(150)), (key(151), b"")]
    assert covered_spans(Run(run, b"b"), _base(base), min_len=10)[-1] == (key(151), b"b")
    after = _BaseKeys(_base(base).readers, b"a/zzz")
    assert covered_spans(Run(run, b"b"), after, min_len=10)[-1] == (key(151), b"a/zzz")


def test_short_runs_give_no_span() -> None:
    base = [key(i) for i in range(0, 100, 2)]
    run = [key(i) for i in range(0, 100, 2)]
    assert covered_spans(Run(run, b""), _base(base), min_len=51) == []
    assert covered_spans(Run(run, b""), _base(base), min_len=50) == [(key(0), b"")]
    # every other base key kept: no span reaches the minimum
    assert covered_spans(Run(run, b""), _base([key(i) for i in range(100)]), min_len=2) == []


def test_tombstone_runs_are_cut_by_live_records() -> None:
    records = [rec(key(i), "v" if i in (3, 80) else None) for i in range(200)]
    runs = tombstone_runs(SSTReader(write_sst(records), "f"), min_len=10)
    assert [(r.keys[0], r.keys[-1], len(r.keys), r.next_key) for r in runs] == [
        (key(4), key(79), 76, key(80)),
        (key(81), key(199), 119, b""),
    ]


# --- compaction and listing -------------------------------------------------------------


async def _deleted_branch(
    refstore: RefStore,
    objects: ObjectStore,
    n: int,
    keep: set[int],
    merger: MergeWorker | None = None,
) -> tuple[dict[bytes, bytes], str]:
    """A base of ``n`` keys, every key not in ``keep`` deleted (and some absent keys too),
    compacted into L2; the model of the branch and the base commit."""
    base_state = {key(i): f"v{i}".encode() for i in range(n)}
    base = await make_commit(objects, base_state)
    await refstore.set_base(REPO, BRANCH, expected_base="", new_base=base)
    model = {k: v for k, v in base_state.items() if int(k[2:]) in keep}
    deletes = [k for k in base_state if k not in model] + [
        key(i) + b"-gone" for i in range(0, n, 7)
    ]
    deletes.sort()
    for lo in range(0, len(deletes), 500):
        await append_l1_file(
            refstore, objects, REPO, BRANCH, [rec(k, None) for k in deletes[lo : lo + 500]]
        )
    config = make_config(compaction_l2_file_bytes=8192, compaction_job_files=1000)
    result = await CompactionJob(refstore, objects, REPO, BRANCH, config, merger=merger).run()
    assert result.outcome == "compacted", result
    return model, base


async def _snapshot(refstore: RefStore, objects: ObjectStore, ref: Ref | None = None) -> Snapshot:
    ref = ref or await refstore.get_ref(REPO, BRANCH)
    files = Files(objects, PlainCache(), DirectSource(objects), SidecarCache(10_000))
    return await Snapshot.load(ref, files, BRANCH)


@pytest.mark.parametrize("where", ["loop", "process"])
async def test_compaction_marks_spans_and_listing_skips_them(
    refstore: RefStore, objects: FaultyStore, where: str
) -> None:
    """Both ways of merging (on the event loop, in the merge process) give the spans."""
    n = 3000
    keep = {1200, 2990, 2991, 2995}
    merger = MergeWorker() if where == "process" else None
    try:
        model, base = await _deleted_branch(refstore, objects, n, keep, merger)
        if merger is not None:
            assert merger.jobs == 1
    finally:
        if merger is not None:
            await merger.aclose()
    ref = await refstore.get_ref(REPO, BRANCH)
    assert not ref.l1 and len(ref.l2) > 3
    sidecars = [
        decode_sidecar(await objects.get(layout.staging_key(BRANCH, "L2", f, SIDECAR_SUFFIX)))
        for f in ref.l2
    ]
    spans = [s for sc in sidecars for s in sc.covered]
    assert all(sc.base == base for sc in sidecars if sc.covered)
    assert spans and sum(1 for sc in sidecars if sc.covered) >= len(ref.l2) - 1
    for lo, end in spans:  # no span holds a kept key
        assert not any(lo <= k and (not end or k < end) for k in model)

    snap = await _snapshot(refstore, objects)
    objects.log.clear()
    page = [e.key async for e in snap.list(b"a/", limit=1)]
    assert page == [key(1200)]
    l2_reads = [k for op, k in objects.log if op == "get" and "/L2/" in k]
    # the files wholly inside spans before a/01200 are not read at all, and of the
    # base only the metarange and the range holding a/01200
    assert len(l2_reads) < len(ref.l2) // 2, (len(l2_reads), len(ref.l2))
    base_reads = [k for op, k in objects.log if op == "get" and k.startswith(layout.RANGES)]
    assert len(base_reads) <= 2, base_reads

    rng = random.Random(3)
    live = sorted(model)
    for _ in range(40):
        prefix = rng.choice([b"", b"a/", b"a/0", b"a/01", b"a/02", b"a/029", b"a/0120"])
        after = rng.choice([None, key(rng.randrange(n)), key(1200)])
        limit = rng.choice([None, 1, 2, 10])
        want = [k for k in live if k.startswith(prefix) and (after is None or k > after)]
        want = want if limit is None else want[:limit]
        got = [e.key async for e in snap.list(prefix, after=after, limit=limit)]
        assert got == want, (prefix, after, limit)
    assert [e.key async for e in snap.list(b"a/", delimiter=b"/")] == [
        k for k in live if k.startswith(b"a/")
    ]


async def test_newer_l1_writes_inside_a_span_are_listed(
    refstore: RefStore, objects: FaultyStore
) -> None:
    await _deleted_branch(refstore, objects, 2000, {1999})
    inside = [key(10), key(500) + b"-new", key(1500)]
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec(k, "new") for k in inside])
    snap = await _snapshot(refstore, objects)
    assert snap.covered(b"a/", None)
    assert [e.key async for e in snap.list(b"a/")] == sorted([*inside, key(1999)])
    assert [e.key async for e in snap.list(b"a/", limit=1)] == [key(10)]


async def test_spans_over_another_base_are_ignored(
    refstore: RefStore, objects: FaultyStore
) -> None:
    await _deleted_branch(refstore, objects, 2000, {1999})
    ref = await refstore.get_ref(REPO, BRANCH)
    # a tree that holds a key inside the spans the L2 files name (over ``base``)
    other = await make_commit(objects, {key(i): b"v" for i in range(2000)} | {key(7) + b"x": b"o"})
    snap = await _snapshot(refstore, objects, dataclasses.replace(ref, base=other))
    assert snap.covered(b"", None) == []
    assert [e.key async for e in snap.list(b"a/", limit=1)] == [key(7) + b"x"]


async def test_sparse_deletes_over_a_large_base_get_no_span(
    refstore: RefStore, objects: FaultyStore
) -> None:
    """Deletes far apart in a large tree: the ranges between them are not fetched."""
    base_state = {key(i): b"v" for i in range(20_000)}
    base = await make_commit(objects, base_state)
    await refstore.set_base(REPO, BRANCH, expected_base="", new_base=base)
    deletes = [key(i) for i in range(0, 20_000, 100)]
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec(k, None) for k in deletes])
    objects.log.clear()
    config = make_config(compaction_l2_file_bytes=1 << 20)
    assert (await CompactionJob(refstore, objects, REPO, BRANCH, config).run()).outcome == (
        "compacted"
    )
    ranges_read = [k for op, k in objects.log if op == "get" and k.startswith(layout.RANGES)]
    assert len(ranges_read) <= 1  # the metarange at most
    ref = await refstore.get_ref(REPO, BRANCH)
    sc = decode_sidecar(await objects.get(layout.staging_key(BRANCH, "L2", ref.l2[0], ".meta")))
    assert sc.covered == () and sc.tombstones == len(deletes) >= MIN_SPAN_TOMBSTONES


@pytest.mark.parametrize("seed", range(4))
async def test_listings_match_the_model_over_random_delete_runs(
    refstore: RefStore, objects: FaultyStore, seed: int
) -> None:
    """Random runs of deletes (some of absent keys), puts among them, then newer L1 writes
    on top of the compacted L2: every listing equals the dict model."""
    rng = random.Random(seed)
    n = 2500
    base_state = {key(i): b"b" for i in range(n) if rng.random() < 0.9}
    base = await make_commit(objects, base_state)
    await refstore.set_base(REPO, BRANCH, expected_base="", new_base=base)
    model = dict(base_state)
    staged: dict[bytes, bytes | None] = {}
    i = 0
    while i < n:
        length = rng.choice([1, 5, 80, 200, 400])
        for j in range(i, min(n, i + length)):
            if rng.random() < 0.97:
                staged[key(j)] = None
            else:
                staged[key(j) + b"p"] = b"put"
        i += length + rng.choice([0, 0, 1, 3])
    for lo in range(0, len(staged), 700):
        part = sorted(staged)[lo : lo + 700]
        await append_l1_file(refstore, objects, REPO, BRANCH, [rec(k, staged[k]) for k in part])
    for k, v in staged.items():
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v
    config = make_config(compaction_l2_file_bytes=rng.choice([4096, 16384]))
    assert (await CompactionJob(refstore, objects, REPO, BRANCH, config).run()).outcome == (
        "compacted"
    )
    newer = {key(rng.randrange(n)) + rng.choice([b"", b"n"]): b"new" for _ in range(15)}
    newer |= {key(rng.randrange(n)): None for _ in range(15)}
    await append_l1_file(refstore, objects, REPO, BRANCH, [rec(k, v) for k, v in newer.items()])
    for k, v in newer.items():
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v
    snap = await _snapshot(refstore, objects)
    assert snap.covered(b"", None), "no span to test"
    live = sorted(model)
    assert [e.key async for e in snap.list()] == live
    for _ in range(60):
        prefix = key(rng.randrange(n))[: rng.choice([2, 4, 5, 6])]
        after = rng.choice([None, key(rng.randrange(n)), key(rng.randrange(n)) + b"p"])
        limit = rng.choice([None, 1, 3, 50])
        delimiter = rng.choice([None, None, b"3", b"p"])
        want = _folded(live, prefix, after, delimiter)
        want = want if limit is None else want[:limit]
        got = [
            e.key async for e in snap.list(prefix, after=after, limit=limit, delimiter=delimiter)
        ]
        assert got == want, (prefix, after, limit, delimiter)


def _folded(
    live: list[bytes], prefix: bytes, after: bytes | None, delimiter: bytes | None
) -> list[bytes]:
    """What a listing of the sorted keys ``live`` returns (common prefixes folded)."""
    out: list[bytes] = []
    for k in live:
        if not k.startswith(prefix) or (after is not None and k <= after):
            continue
        i = k.find(delimiter, len(prefix)) if delimiter else -1
        if i >= 0:
            cp = k[: i + len(delimiter or b"")]
            if (out and out[-1] == cp) or (after is not None and cp <= after):
                continue
            out.append(cp)
        else:
            out.append(k)
    return out
