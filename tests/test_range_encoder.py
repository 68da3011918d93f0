"""Ranges named and encoded in a process pool are the ranges a thread makes: a commit
or merge gets the same range and metarange IDs however its ranges are encoded."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import subprocess
import sys
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
from tests.helpers.range_pool import running_pool

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
    yield from running_pool(2)


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
    # the pool did the work: the change set was split by range across the workers
    assert pool.conversations >= 2
    assert pooled.metarange_id == threads.metarange_id != base.metarange_id
    # counts too (a split walk may fetch a base range twice: ranges_read may differ)
    assert pooled.chunks >= 2
    assert dataclasses.replace(pooled, ranges_read=0, chunks=0, resyncs=0) == dataclasses.replace(
        threads, ranges_read=0
    )
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


SCRIPT = r"""
# no `if __name__ == "__main__":` guard, as many scripts are written
import asyncio, sys
from pathlib import Path
from lsmstore.graveler.apply import write_tree
from lsmstore.graveler.range_encoder import RangeEncoder
from lsmstore.graveler.ranges import RangePolicy
from lsmstore.graveler.record import Record
from lsmstore.storage.local import LocalStore

with open(sys.argv[1], "a") as f:
    f.write("ran\n")  # the script's own side effect

async def main() -> None:
    enc = RangeEncoder(2, pool_min_bytes=0)
    enc.start()
    while enc.started < 2:
        await asyncio.sleep(0.05)
    store = LocalStore(Path(sys.argv[2]))
    records = (Record(b"k%06d" % i, b"id", b"v" * 100) for i in range(3000))
    from lsmstore.graveler.apply import apply_changes
    from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
    from lsmstore.graveler.source import DirectSource
    policy = RangePolicy(min_bytes=8 << 10, max_bytes=32 << 10, raggedness=50)
    await apply_changes(DirectSource(store), store, EMPTY_METARANGE_ID, records, policy,
                        encoder=enc)
    print(enc.ranges_in_pool)
    enc.close()

asyncio.run(main())
"""


async def test_workers_never_run_the_applications_main_script(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    marker = tmp_path / "marker"
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(script), str(marker), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) > 5  # ranges were encoded by the workers
    assert marker.read_text() == "ran\n"  # and the script ran once, in its own process
