"""Ranges named and encoded in a process pool are the ranges a thread makes: a commit
or merge gets the same range and metarange IDs however its ranges are encoded."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from lsmstore.graveler.apply import apply_changes
from lsmstore.graveler.ids import file_id
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.graveler.range_encoder import RangeEncoder, encode_range, range_id
from lsmstore.graveler.ranges import RangePolicy
from lsmstore.graveler.record import Record, default_identity
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.tree import TreeReader
from lsmstore.storage.local import LocalStore

#: Ranges of 32-128 KiB (a few hundred records each): many ranges, all sent to the pool.
POLICY = RangePolicy(min_bytes=32 << 10, max_bytes=128 << 10, raggedness=300)


def rec(i: int, salt: bytes = b"") -> Record:
    v = b"value-%d-" % i + salt + bytes(100)
    return Record(b"tables/t/part-%08d" % i, default_identity(v), v)


def changes(rng: random.Random, n: int, space: int) -> Iterator[Record]:
    for i in sorted(rng.sample(range(space), n)):
        r = rng.random()
        if r < 0.1:
            yield Record(rec(i).key, b"", None)
        else:
            yield rec(i, b"new")


@pytest.fixture(scope="module")
def pool() -> Iterator[RangeEncoder]:
    enc = RangeEncoder(2, pool_min_bytes=0)
    try:
        yield enc
    finally:
        enc.close()


def test_encode_range_names_records_like_file_id() -> None:
    records = [rec(i) for i in range(50)]
    cols = ([r.key for r in records], [r.identity for r in records], [r.value for r in records])
    assert range_id(cols[0], cols[1]) == file_id(records)
    rid, sst = encode_range(*cols)  # type: ignore[arg-type]
    assert rid == file_id(records) and sst is not None
    assert list(SSTReader(sst, "range")) == records
    assert encode_range(*cols, skip={rid}) == (rid, None)  # type: ignore[arg-type]


async def test_same_ids_in_a_pool_as_in_threads(tmp_path: Path, pool: RangeEncoder) -> None:
    store = LocalStore(tmp_path / "store")
    src = DirectSource(store)
    space = 20_000
    base = await apply_changes(
        src, store, EMPTY_METARANGE_ID, (rec(i) for i in range(0, space, 2)), POLICY
    )
    assert base.ranges_written > 20
    results = []
    for encoder in (None, pool):
        rng = random.Random(11)  # the same changes both times
        results.append(
            await apply_changes(
                src, store, base.metarange_id, changes(rng, 3000, space), POLICY, encoder=encoder
            )
        )
    threads, pooled = results
    assert pool.ranges_in_pool > 20  # the pool did the work
    assert pooled.metarange_id == threads.metarange_id != base.metarange_id
    assert pooled == threads  # counts too
    meta = await src.metarange(pooled.metarange_id)
    # and the tree holds what a from-scratch build holds
    model = {r.key: r for r in (rec(i) for i in range(0, space, 2))}
    for c in changes(random.Random(11), 3000, space):
        if c.value is None:
            model.pop(c.key, None)
        else:
            model[c.key] = c
    assert [r async for r in TreeReader(src, pooled.metarange_id)] == [
        model[k] for k in sorted(model)
    ]
    fresh = await apply_changes(
        src, store, EMPTY_METARANGE_ID, (model[k] for k in sorted(model)), POLICY, encoder=pool
    )
    assert fresh.metarange_id == pooled.metarange_id
    assert [r.id for r in meta.ranges] == [
        r.id for r in (await src.metarange(fresh.metarange_id)).ranges
    ]
