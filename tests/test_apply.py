"""apply_changes against a dict model, range reuse, and I/O counted on a real store."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmstore import layout
from lsmstore.errors import CorruptFileError, InvalidInputError, ObjectNotFoundError
from lsmstore.graveler.apply import apply_changes, write_tree
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.graveler.ranges import RangePolicy
from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.tree import TreeReader
from lsmstore.storage.local import LocalStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore

TINY = RangePolicy(min_bytes=120, max_bytes=600, raggedness=6)
PURE_CDC = RangePolicy(min_bytes=1, max_bytes=1 << 40, raggedness=16)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Model = dict[bytes, bytes]


def put(key: bytes, value: bytes) -> Record:
    return Record(key, b"i" + value, value)


def records(model: Model) -> list[Record]:
    return [put(k, v) for k, v in sorted(model.items())]


async def contents(store, metarange_id: str) -> list[Record]:
    return [r async for r in TreeReader(DirectSource(store), metarange_id)]


async def range_ids(store, metarange_id: str) -> list[str]:
    return [r.id for r in await TreeReader(DirectSource(store), metarange_id).ranges()]


keys = st.binary(min_size=1, max_size=6)
values = st.binary(max_size=12)
changes_st = st.dictionaries(keys, st.none() | values, max_size=80)


def seeded_model(n: int, seed: int) -> Model:
    rng = random.Random(seed)
    return {rng.randbytes(rng.randint(1, 6)): rng.randbytes(rng.randint(0, 12)) for _ in range(n)}


@SETTINGS
@given(
    n=st.integers(0, 1500),
    seed=st.integers(0, 2**16),
    picks=st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from(["delete", "update", "insert"])),
        max_size=40,
    ),
    extra=changes_st,
    wipe=st.booleans(),
)
async def test_apply_matches_a_dict_model(
    n: int,
    seed: int,
    picks: list[tuple[int, str]],
    extra: dict[bytes, bytes | None],
    wipe: bool,
) -> None:
    base = seeded_model(n, seed)
    ordered = sorted(base)
    changes: dict[bytes, bytes | None] = dict(extra)
    for where, op in picks if ordered else []:
        key = ordered[where % len(ordered)]
        if op == "delete":
            changes[key] = None
        elif op == "update":
            changes[key] = b"updated"
        else:
            changes[key + b"\x00"] = b"inserted"
    if wipe:
        changes.update(dict.fromkeys(ordered))
    store = MemoryStore()
    base_id = await write_tree(store, records(base), TINY)
    stream = [tombstone(k) if v is None else put(k, v) for k, v in sorted(changes.items())]
    result = await apply_changes(DirectSource(store), store, base_id, stream, TINY)

    model = dict(base)
    for k, v in changes.items():
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v
    assert await contents(store, result.metarange_id) == records(model)
    # Canonical: the same tree, to the ID, as building the new content from scratch.
    assert result.metarange_id == await write_tree(MemoryStore(), records(model), TINY)
    assert result.added == sum(1 for k, v in changes.items() if v is not None and k not in base)
    assert result.removed == sum(1 for k, v in changes.items() if v is None and k in base)
    assert result.changed == sum(
        1 for k, v in changes.items() if v is not None and k in base and base[k] != v
    )
    if model == base:
        assert result.metarange_id == base_id


async def test_edge_cases() -> None:
    store = MemoryStore()
    src = DirectSource(store)
    base = {b"k%03d" % i: b"v" for i in range(0, 200, 2)}
    base_id = await write_tree(store, records(base), TINY)

    async def check(changes: list[Record], expected: Model) -> str:
        result = await apply_changes(src, store, base_id, changes, TINY)
        assert await contents(store, result.metarange_id) == records(expected)
        assert result.metarange_id == await write_tree(MemoryStore(), records(expected), TINY)
        return result.metarange_id

    # Before the first key, after the last (the last range is entered: it ends where the
    # input ended, not where the policy cuts), and both.
    await check([put(b"a", b"x")], {b"a": b"x", **base})
    await check([put(b"z", b"y")], {**base, b"z": b"y"})
    await check([put(b"a", b"x"), put(b"z", b"y")], {b"a": b"x", **base, b"z": b"y"})
    # Deletes of absent keys change nothing.
    assert await check([tombstone(b"a"), tombstone(b"k001"), tombstone(b"z")], base) == base_id
    # Everything deleted: the empty tree, which is never stored.
    assert await check([tombstone(k) for k in sorted(base)], {}) == EMPTY_METARANGE_ID
    # Onto the empty base.
    result = await apply_changes(src, store, EMPTY_METARANGE_ID, records({b"a": b"1"}), TINY)
    assert await contents(store, result.metarange_id) == [put(b"a", b"1")]
    assert result.ranges_read == 0
    # Nothing at all.
    empty = await apply_changes(src, store, EMPTY_METARANGE_ID, [], TINY)
    assert empty.metarange_id == EMPTY_METARANGE_ID


async def test_same_identity_keeps_the_base_record() -> None:
    store = MemoryStore()
    base_id = await write_tree(store, [Record(b"k", b"id", b"old")], TINY)
    result = await apply_changes(
        DirectSource(store), store, base_id, [Record(b"k", b"id", b"new bytes")], TINY
    )
    assert result.metarange_id == base_id
    assert await contents(store, base_id) == [Record(b"k", b"id", b"old")]
    assert result.changed == 0


async def test_async_iterable_changes() -> None:
    store = MemoryStore()
    base_id = await write_tree(store, records({b"a": b"1", b"c": b"3"}), TINY)

    async def stream() -> AsyncIterator[Record]:
        yield put(b"b", b"2")
        yield tombstone(b"c")

    result = await apply_changes(DirectSource(store), store, base_id, stream(), TINY)
    assert await contents(store, result.metarange_id) == records({b"a": b"1", b"b": b"2"})


@pytest.mark.parametrize(
    "changes",
    [
        [put(b"b", b""), put(b"a", b"")],
        [put(b"a", b""), tombstone(b"a")],
        [put(b"", b"")],
    ],
)
async def test_unsorted_changes_are_rejected(changes: list[Record]) -> None:
    store = MemoryStore()
    base_id = await write_tree(store, records({b"m": b"1"}), TINY)
    with pytest.raises(InvalidInputError):
        await apply_changes(DirectSource(store), store, base_id, changes, TINY)


# --- reuse of untouched ranges ------------------------------------------------------


def large_base(n: int, seed: int = 7) -> Model:
    rng = random.Random(seed)
    return {rng.randbytes(rng.randint(4, 10)): rng.randbytes(rng.randint(0, 20)) for _ in range(n)}


_BUILT: dict[tuple[int, RangePolicy], tuple[Model, MemoryStore, str]] = {}


async def built_base(n: int, policy: RangePolicy) -> tuple[Model, MemoryStore, str]:
    """A large base tree, built once per module (objects are immutable: safe to share)."""
    if (n, policy) not in _BUILT:
        base = large_base(n)
        store = MemoryStore()
        _BUILT[n, policy] = base, store, await write_tree(store, records(base), policy)
    return _BUILT[n, policy]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.integers(0, 10**6),
    kind=st.sampled_from(["insert", "update", "delete", "first", "last", "before", "after"]),
)
async def test_one_key_change_touches_at_most_two_ranges(where: int, kind: str) -> None:
    base, inner, base_id = await built_base(4000, PURE_CDC)
    ordered = sorted(base)
    key = ordered[where % len(ordered)]
    change = {
        "insert": put(key + b"\x00", b"new"),
        "update": put(key, b"changed"),
        "delete": tombstone(key),
        "first": tombstone(ordered[0]),
        "last": put(ordered[-1], b"changed"),
        "before": put(b"\x00", b"new"),
        "after": put(b"\xff" * 12, b"new"),
    }[kind]
    store = FaultyStore(inner)
    result = await apply_changes(DirectSource(store), store, base_id, [change], PURE_CDC)

    before, after = await range_ids(inner, base_id), await range_ids(inner, result.metarange_id)
    assert len(before) > 150
    assert result.ranges_read <= 2 and result.ranges_written <= 2
    assert len(set(before) - set(after)) <= 2 and len(set(after) - set(before)) <= 2
    # Reused ranges were not fetched: the store saw the metarange and the touched ranges.
    assert store.calls["get"] == 1 + result.ranges_read
    assert store.calls["put"] == result.ranges_written + 1
    assert result.ranges_reused + result.ranges_written == len(after)


async def test_one_key_change_with_production_like_ratios(tmp_path) -> None:
    # min/max/raggedness in the proportions of the defaults (1 MiB / 10 MiB / 50k entries
    # of ~40 bytes ~ 2 MiB), scaled down; the base is built canonically.
    policy = RangePolicy(min_bytes=400, max_bytes=4000, raggedness=20)
    store = LocalStore(str(tmp_path))
    base = large_base(6000, seed=11)
    base_id = await write_tree(store, records(base), policy)
    n_ranges = len(await range_ids(store, base_id))
    rng = random.Random(5)
    reads = []
    for key in rng.sample(sorted(base), 12):
        result = await apply_changes(
            DirectSource(store), store, base_id, [put(key, b"changed!")], policy
        )
        reads.append(result.ranges_read)
        assert result.ranges_reused >= n_ranges - 3
        assert result.metarange_id == await write_tree(
            MemoryStore(), records({**base, key: b"changed!"}), policy
        )
    assert max(reads) <= 3 and sum(reads) <= 12 * 1.5


async def test_missing_or_corrupt_base_range(tmp_path) -> None:
    store = LocalStore(str(tmp_path))
    base = {b"k%04d" % i: b"v" for i in range(300)}
    base_id = await write_tree(store, records(base), TINY)
    ranges = await TreeReader(DirectSource(store), base_id).ranges()
    victim = ranges[2]
    (tmp_path / layout.range_key(victim.id)).unlink()
    with pytest.raises(ObjectNotFoundError, match=victim.id):
        await apply_changes(DirectSource(store), store, base_id, [put(victim.min_key, b"x")], TINY)
    # A change elsewhere never reads the missing range.
    result = await apply_changes(
        DirectSource(store), store, base_id, [put(ranges[5].min_key, b"x")], TINY
    )
    assert result.ranges_read >= 1
    path = tmp_path / layout.range_key(ranges[5].id)
    path.chmod(0o644)
    path.write_bytes(b"garbage" * 20)
    with pytest.raises(CorruptFileError):
        await apply_changes(
            DirectSource(store), store, base_id, [put(ranges[5].min_key, b"y")], TINY
        )


@pytest.mark.parametrize(
    "base_policy",
    [
        RangePolicy(min_bytes=40, max_bytes=300, raggedness=3),
        RangePolicy(min_bytes=500, max_bytes=5000, raggedness=40),
    ],
)
async def test_base_built_with_another_policy(base_policy: RangePolicy) -> None:
    # Reuse and boundary shortcuts assume the base's cuts; with other cuts the result
    # must still hold exactly the right records.
    store = MemoryStore()
    base = seeded_model(1500, 9)
    base_id = await write_tree(store, records(base), base_policy)
    ordered = sorted(base)
    changes = {ordered[i]: (None if i % 3 else b"new") for i in range(0, len(ordered), 97)}
    changes[b"\x00"] = b"first"
    changes[b"\xff" * 8] = b"last"
    stream = [tombstone(k) if v is None else put(k, v) for k, v in sorted(changes.items())]
    result = await apply_changes(DirectSource(store), store, base_id, stream, TINY)
    model = {k: v for k, v in {**base, **changes}.items() if v is not None}
    assert await contents(store, result.metarange_id) == records(model)
    old_ids = {r.id for r in await TreeReader(DirectSource(store), base_id).ranges()}
    for info in await TreeReader(DirectSource(store), result.metarange_id).ranges():
        if info.id not in old_ids:  # reused ranges keep their size; new ones obey the policy
            assert info.size < TINY.max_bytes + 64


#: Ranges of ~60-230 records spanning several 4 KiB blocks: unchanged runs between sparse
#: changes cross blocks, and are cut inside by hash boundaries and by max_bytes.
LONG_RUNS = RangePolicy(min_bytes=2 << 10, max_bytes=8 << 10, raggedness=200)


@pytest.mark.parametrize("every", [7, 60, 400, 5000])
async def test_sparse_changes_give_the_tree_built_from_scratch(every: int) -> None:
    # The walk copies the records between changes a run at a time and finds the cuts
    # of a run at once; the tree must be the one records pushed one by one build.
    rng = random.Random(every)
    base = {b"key-%07d" % i: rng.randbytes(rng.choice([0, 10, 30])) for i in range(0, 30_000, 3)}
    ordered = sorted(base)
    changes: dict[bytes, bytes | None] = {}
    for i in range(rng.randrange(every), len(ordered), every):
        op = rng.randrange(3)
        if op == 0:
            changes[ordered[i]] = None
        elif op == 1:
            changes[ordered[i]] = rng.randbytes(rng.choice([5, 200]))
        else:
            changes[ordered[i] + b"+"] = b"inserted"
    store = MemoryStore()
    base_id = await write_tree(store, records(base), LONG_RUNS)
    stream = [tombstone(k) if v is None else put(k, v) for k, v in sorted(changes.items())]
    result = await apply_changes(DirectSource(store), store, base_id, stream, LONG_RUNS)
    model = {k: v for k, v in {**base, **changes}.items() if v is not None}
    assert result.metarange_id == await write_tree(MemoryStore(), records(model), LONG_RUNS)
    assert await contents(store, result.metarange_id) == records(model)
