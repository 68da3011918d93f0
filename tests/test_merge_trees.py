"""Three-way merge: every row of the merge table, strategies, a dict model, range
shortcuts measured in store reads, and conflict reporting."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmstore import layout
from lsmstore.errors import InvalidInputError, MergeConflictError
from lsmstore.graveler.apply import write_tree
from lsmstore.graveler.merge import merge_trees
from lsmstore.graveler.ranges import RangePolicy
from lsmstore.graveler.record import Record
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.tree import TreeReader
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore

TINY = RangePolicy(min_bytes=120, max_bytes=600, raggedness=6)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Model = dict[bytes, bytes]
CONFLICT = "conflict"


def put(key: bytes, value: bytes) -> Record:
    return Record(key, b"i" + value, value)


def records(model: Model) -> list[Record]:
    return [put(k, v) for k, v in sorted(model.items())]


async def contents(store, metarange_id: str) -> Model:
    return {r.key: r.value async for r in TreeReader(DirectSource(store), metarange_id)}  # type: ignore[misc]


# (base, dest, source) -> merged value without a strategy; None is "absent".
# A is the base value, B and C are other values.
TABLE = [
    ((None, None, b"B"), b"B"),  # added on source
    ((None, b"B", None), b"B"),  # added on destination
    ((None, b"B", b"B"), b"B"),  # added identically on both
    ((None, b"B", b"C"), CONFLICT),  # added differently
    ((b"A", b"A", b"A"), b"A"),  # unchanged
    ((b"A", b"A", b"B"), b"B"),  # changed on source
    ((b"A", b"B", b"A"), b"B"),  # changed on destination
    ((b"A", b"B", b"B"), b"B"),  # changed identically on both
    ((b"A", b"B", b"C"), CONFLICT),  # changed differently
    ((b"A", b"A", None), None),  # deleted on source
    ((b"A", None, b"A"), None),  # deleted on destination
    ((b"A", None, None), None),  # deleted on both
    ((b"A", b"B", None), CONFLICT),  # changed on destination, deleted on source
    ((b"A", None, b"B"), CONFLICT),  # deleted on destination, changed on source
]


def side(filler: Model, key: bytes, value: bytes | None) -> Model:
    out = dict(filler)
    if value is not None:
        out[key] = value
    return out


@pytest.mark.parametrize(("row", "expected"), TABLE)
@pytest.mark.parametrize("strategy", [None, "source-wins", "dest-wins"])
@pytest.mark.parametrize("filler_size", [0, 300])
async def test_merge_table(row, expected, strategy, filler_size: int) -> None:
    _, d, s = row
    key = b"k150x"  # inside the filler's key span when there is one
    filler = {b"k%03d" % i: b"f" for i in range(filler_size)}
    store = MemoryStore()
    ids = [await write_tree(store, records(side(filler, key, v)), TINY) for v in row]
    if expected == CONFLICT:
        expected = {None: None, "source-wins": s, "dest-wins": d}[strategy]
        if strategy is None:
            with pytest.raises(MergeConflictError) as info:
                await merge_trees(DirectSource(store), store, *ids, policy=TINY)
            assert info.value.keys == [key]
            return
    result = await merge_trees(DirectSource(store), store, *ids, strategy=strategy, policy=TINY)
    assert await contents(store, result.metarange_id) == side(filler, key, expected)
    assert result.metarange_id == await write_tree(
        MemoryStore(), records(side(filler, key, expected)), TINY
    )


def merge_model(
    base: Model, dest: Model, source: Model, strategy: str | None
) -> tuple[Model, list[bytes]]:
    out: Model = {}
    conflicts = []
    for k in sorted(base.keys() | dest.keys() | source.keys()):
        b, d, s = base.get(k), dest.get(k), source.get(k)
        if d == s:
            v = d
        elif d == b:
            v = s
        elif s == b:
            v = d
        elif strategy == "source-wins":
            v = s
        elif strategy == "dest-wins":
            v = d
        else:
            conflicts.append(k)
            continue
        if v is not None:
            out[k] = v
    return out, conflicts


def seeded(n: int, seed: int) -> Model:
    rng = random.Random(seed)
    return {rng.randbytes(rng.randint(1, 4)): rng.randbytes(rng.randint(0, 2)) for _ in range(n)}


edit_lists = st.lists(
    st.tuples(st.integers(0, 10**6), st.sampled_from(["delete", "update", "insert", "same"])),
    max_size=30,
)


def edited(base: Model, edits: list[tuple[int, str]], tag: bytes) -> Model:
    out = dict(base)
    ordered = sorted(base)
    for where, op in edits if ordered else []:
        key = ordered[where % len(ordered)]
        if op == "delete":
            out.pop(key, None)
        elif op == "update":
            out[key] = tag
        elif op == "same":  # a value both sides may pick: identical changes
            out[key] = b"same"
        else:
            out[key + b"\x00"] = tag
    return out


@SETTINGS
@given(
    n=st.integers(0, 600),
    seed=st.integers(0, 2**16),
    dest_edits=edit_lists,
    source_edits=edit_lists,
    shared_edits=edit_lists,
    strategy=st.sampled_from([None, "source-wins", "dest-wins"]),
)
async def test_merge_matches_a_dict_model(
    n: int,
    seed: int,
    dest_edits: list[tuple[int, str]],
    source_edits: list[tuple[int, str]],
    shared_edits: list[tuple[int, str]],
    strategy: str | None,
) -> None:
    base = seeded(n, seed)
    dest = edited(edited(base, shared_edits, b"shared"), dest_edits, b"dest")
    source = edited(edited(base, shared_edits, b"shared"), source_edits, b"source")
    store = MemoryStore()
    ids = [await write_tree(store, records(m), TINY) for m in (base, dest, source)]
    expected, conflicts = merge_model(base, dest, source, strategy)
    src = DirectSource(store)
    if conflicts:
        with pytest.raises(MergeConflictError) as info:
            await merge_trees(src, store, *ids, strategy=strategy, policy=TINY)  # type: ignore[arg-type]
        assert info.value.keys == conflicts
        return
    result = await merge_trees(src, store, *ids, strategy=strategy, policy=TINY)  # type: ignore[arg-type]
    assert await contents(store, result.metarange_id) == expected
    assert result.metarange_id == await write_tree(MemoryStore(), records(expected), TINY)


async def test_range_shortcuts_skip_reads() -> None:
    inner = MemoryStore()
    base = {b"m%05d" % i: b"v%d" % i for i in range(3000)}
    dest = {k: v for k, v in base.items() if not b"m01000" <= k < b"m02000"}  # drop a region
    dest[b"m00010"] = b"dest"
    source = dict(base)
    source[b"m02500"] = b"source"
    source.update({b"z%05d" % i: b"new" for i in range(600)})  # a region past the base
    ids = [await write_tree(inner, records(m), TINY) for m in (base, dest, source)]
    tree_ranges = [await TreeReader(DirectSource(inner), i).ranges() for i in ids]

    store = FaultyStore(inner)
    result = await merge_trees(DirectSource(store), store, *ids, policy=TINY)
    expected, _ = merge_model(base, dest, source, None)
    assert await contents(inner, result.metarange_id) == expected

    deleted_region = [r for r in tree_ranges[0] if b"m01000" <= r.min_key < b"m02000"]
    added_region = [r for r in tree_ranges[2] if r.min_key >= b"z"]
    assert len(deleted_region) > 50 and len(added_region) > 30
    range_gets = store.count("get", prefix=layout.RANGES)
    assert range_gets == 3 + result.ranges_read
    # Ranges read: around the two edits and the ends of the deleted and added regions --
    # never the dropped region, nor the added one, nor the untouched stretches.
    assert result.ranges_read <= 16
    assert result.ranges_reused > len(tree_ranges[0]) - len(deleted_region)


async def test_trivial_merges_need_no_io() -> None:
    inner = MemoryStore()
    a = await write_tree(inner, records({b"a": b"1"}), TINY)
    b = await write_tree(inner, records({b"a": b"2"}), TINY)
    store = FaultyStore(inner)
    src = DirectSource(store)
    assert (await merge_trees(src, store, a, a, b, policy=TINY)).metarange_id == b  # fast-forward
    assert (await merge_trees(src, store, a, b, a, policy=TINY)).metarange_id == b  # up to date
    assert (await merge_trees(src, store, a, b, b, policy=TINY)).metarange_id == b
    assert sum(store.calls.values()) == 0


async def test_conflicts_list_the_first_keys() -> None:
    store = MemoryStore()
    base = {b"k%05d" % i: b"base" for i in range(1500)}
    dest = {k: b"dest" for k in base}
    source = {k: b"source" for k in base}
    source[b"k00000"] = b"base"  # source unchanged: not a conflict
    ids = [await write_tree(store, records(m), TINY) for m in (base, dest, source)]
    with pytest.raises(MergeConflictError) as info:
        await merge_trees(DirectSource(store), store, *ids, policy=TINY)
    assert info.value.keys == sorted(base)[1:1001]
    assert "1000 or more conflicting keys" in str(info.value)
    with pytest.raises(MergeConflictError) as info:
        await merge_trees(DirectSource(store), store, *ids, policy=TINY, max_conflicts=3)
    assert info.value.keys == sorted(base)[1:4]
    resolved = await merge_trees(
        DirectSource(store), store, *ids, strategy="dest-wins", policy=TINY
    )
    assert resolved.conflicts_resolved == 1499
    assert await contents(store, resolved.metarange_id) == {**dest, b"k00000": b"dest"}


async def test_bad_arguments() -> None:
    store = MemoryStore()
    a = await write_tree(store, records({b"a": b"1"}), TINY)
    with pytest.raises(InvalidInputError, match="strategy"):
        await merge_trees(DirectSource(store), store, a, a, a, strategy="ours", policy=TINY)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="max_conflicts"):
        await merge_trees(DirectSource(store), store, a, a, a, policy=TINY, max_conflicts=0)
