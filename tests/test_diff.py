"""diff_trees against a dict model; equal ranges are skipped without I/O."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmstore import layout
from lsmstore.graveler.apply import apply_changes, write_tree
from lsmstore.graveler.diff import diff_trees
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.graveler.ranges import RangePolicy
from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.tree import TreeReader
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore
from lsmstore.types import Change

TINY = RangePolicy(min_bytes=120, max_bytes=600, raggedness=6)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Model = dict[bytes, bytes]


def put(key: bytes, value: bytes) -> Record:
    return Record(key, b"i" + value, value)


def records(model: Model) -> list[Record]:
    return [put(k, v) for k, v in sorted(model.items())]


def model_diff(left: Model, right: Model) -> list[Change]:
    out = []
    for k in sorted(left.keys() | right.keys()):
        lv, rv = left.get(k), right.get(k)
        if rv is None:
            out.append(Change(k, "removed", put(k, lv), None))  # type: ignore[arg-type]
        elif lv is None:
            out.append(Change(k, "added", None, put(k, rv)))
        elif lv != rv:
            out.append(Change(k, "changed", put(k, lv), put(k, rv)))
    return out


def seeded(n: int, seed: int) -> Model:
    rng = random.Random(seed)
    return {rng.randbytes(rng.randint(1, 5)): rng.randbytes(rng.randint(0, 3)) for _ in range(n)}


@SETTINGS
@given(
    n=st.integers(0, 800),
    seed=st.integers(0, 2**16),
    edits=st.dictionaries(st.binary(min_size=1, max_size=5), st.none() | st.binary(max_size=3)),
    unrelated=st.booleans(),
)
async def test_diff_matches_a_dict_model(
    n: int, seed: int, edits: dict[bytes, bytes | None], unrelated: bool
) -> None:
    store = MemoryStore()
    left = seeded(n, seed)
    if unrelated:  # a right tree sharing nothing structural with the left
        right = seeded(n // 2, seed + 1)
    else:
        right = dict(left)
    for k, v in edits.items():
        if v is None:
            right.pop(k, None)
        else:
            right[k] = v
    left_id = await write_tree(store, records(left), TINY)
    right_id = await write_tree(store, records(right), TINY)
    src = DirectSource(store)
    assert [c async for c in diff_trees(src, left_id, right_id)] == model_diff(left, right)
    assert [c async for c in diff_trees(src, right_id, left_id)] == model_diff(right, left)


async def test_identical_and_empty_trees() -> None:
    store = FaultyStore(MemoryStore())
    model = {b"k%03d" % i: b"v" for i in range(100)}
    tree = await write_tree(store, records(model), TINY)
    gets = store.calls["get"]
    assert [c async for c in diff_trees(DirectSource(store), tree, tree)] == []
    assert store.calls["get"] == gets  # nothing read
    src = DirectSource(store)
    assert [c async for c in diff_trees(src, EMPTY_METARANGE_ID, tree)] == model_diff({}, model)
    assert [c async for c in diff_trees(src, tree, EMPTY_METARANGE_ID)] == model_diff(model, {})


async def test_equal_ranges_are_skipped_without_reading() -> None:
    inner = MemoryStore()
    rng = random.Random(3)
    base = {rng.randbytes(8): rng.randbytes(10) for _ in range(4000)}
    base_id = await write_tree(inner, records(base), TINY)
    ordered = sorted(base)
    edits = [put(ordered[100], b"x"), tombstone(ordered[2000]), put(ordered[3500] + b"+", b"y")]
    result = await apply_changes(DirectSource(inner), inner, base_id, edits, TINY)
    n_ranges = len(await TreeReader(DirectSource(inner), base_id).ranges())

    store = FaultyStore(inner)
    got = [c async for c in diff_trees(DirectSource(store), base_id, result.metarange_id)]
    assert [(c.key, c.kind) for c in got] == [
        (ordered[100], "changed"),
        (ordered[2000], "removed"),
        (ordered[3500] + b"+", "added"),
    ]
    left_ids = {r.id for r in await TreeReader(DirectSource(inner), base_id).ranges()}
    right_ids = {r.id for r in await TreeReader(DirectSource(inner), result.metarange_id).ranges()}
    # Two metaranges, then exactly the ranges that differ; the hundreds shared are skipped.
    assert n_ranges > 200
    assert store.count("get", prefix=layout.RANGES) == 2 + len(left_ids ^ right_ids)
