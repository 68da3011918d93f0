"""Decoding batch bodies within bounds (lsmstore.server.batch_body): entry and value
counts refused before the work, and a large body decoded in slices with the event
loop free between them."""

from __future__ import annotations

import asyncio
import gc
import struct
from typing import Any

import msgpack
import orjson
import pytest

from lsmstore.server.batch_body import MSGPACK, SLICE, decode_batch
from lsmstore.server.errors import ApiError

BIG = 10**9


def _body(media: str, entries: list[Any]) -> bytes:
    return msgpack.packb(entries) if media == MSGPACK else orjson.dumps(entries)


def _tuples(entries: list[Any]) -> list[Any]:
    """Entries compared field by field, whether decoded as tuples or as lists."""
    return [tuple(e) if type(e) is list else e for e in entries]


@pytest.mark.parametrize("media", [MSGPACK, "application/json"])
async def test_other_tasks_run_between_the_slices_of_a_large_body(media: str) -> None:
    events: list[str] = []
    turns = 0

    async def probe() -> None:
        events.append("probe")

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    from lsmstore.server import batch_body

    # keys long enough for the JSON body to be scanned (a smaller one is parsed in one
    # step, under a millisecond: its slices are the batch endpoint's, tests/test_server_batch.py)
    body = _body(media, [["kvdelete", f"k{i:0100d}"] for i in range(3 * SLICE)])
    assert len(body) > batch_body._ONE_STEP_BYTES
    task = asyncio.create_task(probe())  # runs at the decoder's first yield, if any
    counter = asyncio.create_task(count_turns())
    await asyncio.sleep(0)  # the counter's first turn
    started = turns
    try:
        entries = await decode_batch(body, media, max_entries=BIG, max_values=BIG)
    finally:
        counter.cancel()
    events.append("decoded")
    await task
    assert events == ["probe", "decoded"]
    assert turns - started == 2  # once between each two of the three slices
    assert len(entries) == 3 * SLICE and entries[-1] == ("kvdelete", f"k{3 * SLICE - 1:0100d}")


@pytest.mark.parametrize(("media", "n"), [(MSGPACK, 100), ("application/json", 20_000)])
async def test_entries_are_left_to_reference_counting(media: str, n: int) -> None:
    """A decoded entry of strings and bytes is a tuple, which the cyclic collector
    stops tracking at its first collection: a maximal batch's entries are not walked
    by every later collection while the batch is written (a JSON body past the
    one-step size; a smaller one keeps orjson's lists, below)."""
    from lsmstore.server import batch_body

    entries = [["kv", f"k{i}", "dmFsdWU="] for i in range(n)]
    entries.append(["link", "p", "data/x", 1, "c", None, {"a": "1"}])
    body = _body(media, entries)
    assert media == MSGPACK or len(body) > batch_body._ONE_STEP_BYTES
    decoded = await decode_batch(body, media, max_entries=BIG, max_values=BIG)
    assert decoded == [tuple(e) for e in entries]
    gc.collect()
    assert not any(gc.is_tracked(e) for e in decoded[:-1])
    assert gc.is_tracked(decoded[-1])  # it holds a dict: the collector keeps it


async def test_a_small_json_body_keeps_orjsons_lists() -> None:
    """A JSON body parsed in one step is not copied into tuples (the copy cost more
    than the collections it spares for a body of at most ``_ONE_STEP_BYTES``)."""
    entries = [["kv", f"k{i}", "dmFsdWU="] for i in range(1000)]
    decoded = await decode_batch(orjson.dumps(entries), "application/json", max_entries=BIG,
                                 max_values=BIG)  # fmt: skip
    assert decoded == entries
    assert all(type(e) is list for e in decoded)


async def test_an_entry_count_over_the_bound_is_refused_from_the_header() -> None:
    # An array header claiming 2**32 - 1 entries, and nothing behind it.
    body = b"\xdd" + struct.pack(">I", 2**32 - 1)
    with pytest.raises(ApiError) as e:
        await decode_batch(body, MSGPACK, max_entries=100_000, max_values=BIG)
    assert e.value.status == 413
    with pytest.raises(ApiError) as e:  # within the bound: the body is short
        await decode_batch(body[:1] + struct.pack(">I", 10), MSGPACK, max_entries=100,
                           max_values=BIG)  # fmt: skip
    assert e.value.status == 400


@pytest.mark.parametrize("media", [MSGPACK, "application/json"])
async def test_values_are_counted_across_entries_and_metadata(media: str) -> None:
    entries = [["link", f"p{i}", "data/x", 1, "c", None, {"a": "1", "b": "2"}] for i in range(10)]
    body = _body(media, entries)
    # 10 entries of 7 fields and 2 metadata pairs: 10 * (1 + 7 + 4) = 120 values
    decoded = await decode_batch(body, media, max_entries=10, max_values=130)
    assert _tuples(decoded) == [tuple(e) for e in entries]
    with pytest.raises(ApiError) as e:
        await decode_batch(body, media, max_entries=10, max_values=100)
    assert e.value.status == 413
    with pytest.raises(ApiError) as e:
        await decode_batch(body, media, max_entries=9, max_values=BIG)
    assert e.value.status == 413


@pytest.mark.parametrize(
    "body",
    [b"", b"\x81\xa1a\x01", msgpack.packb([["kv"]]) + b"\x00", b"\x92\x91\xa2kv", b"\xc1"],
    ids=["empty", "map", "extra-data", "truncated", "reserved-byte"],
)
async def test_malformed_msgpack_is_400(body: bytes) -> None:
    with pytest.raises(ApiError) as e:
        await decode_batch(body, MSGPACK, max_entries=BIG, max_values=BIG)
    assert e.value.status == 400


async def test_other_media_types_are_400() -> None:
    with pytest.raises(ApiError) as e:
        await decode_batch(b"[]", "text/plain", max_entries=1, max_values=1)
    assert e.value.status == 400


@pytest.mark.parametrize(
    "body",
    [b"", b"{}", b'"x"', b"[", b'[["kv", "a", "b"]', b'[["kv", "a"],]', b'[["kv" "a"]]',
     b'[["kv", "a"]] x', b'[["kv", "a"]][]', b"[NaN]", b'[["a", Infinity]]', b"[-Infinity]",
     b"[1e400]", b'["\\ud800"]', b'["\\udc00x"]', b'["\\ude00\\ud83d"]', b'["\xed\xa0\x80"]',
     b'["\xff"]', b"[" * 5000 + b"]" * 5000, b"[1" + b"0" * 5000 + b"]"],
    ids=["empty", "object", "string", "open", "unclosed", "trailing-comma", "no-comma",
         "extra-data", "two-arrays", "nan", "infinity", "minus-infinity", "overflow",
         "lone-high-surrogate", "lone-low-surrogate", "reversed-pair", "utf8-surrogate",
         "bad-utf8", "deep", "long-integer"],
)  # fmt: skip
async def test_malformed_json_is_400(body: bytes) -> None:
    """What orjson refused in one step is refused entry by entry too."""
    with pytest.raises(ApiError) as e:
        await decode_batch(body, "application/json", max_entries=BIG, max_values=BIG)
    assert e.value.status == 400


@pytest.mark.parametrize(
    ("body", "entries"),
    [(b" [ ] ", []),
     (b'\n[ ["kv","a", "b"] ,\t["x", 1.5, 2, -0, true, null, {"m": [1]}] ]\r\n',
      [("kv", "a", "b"), ("x", 1.5, 2, 0, True, None, {"m": [1]})]),
     (b'[["\\ud83d\\ude00", "\\\\ud800", "\\u00e9"]]', [("\U0001f600", "\\ud800", "\u00e9")])],
    ids=["empty-array", "spacing-and-types", "escapes"],
)  # fmt: skip
async def test_json_bodies_decode_as_orjson_did(body: bytes, entries: list[Any]) -> None:
    got = await decode_batch(body, "application/json", max_entries=BIG, max_values=BIG)
    assert _tuples(got) == entries
    assert [tuple(e) for e in orjson.loads(body)] == entries


async def test_a_json_entry_past_the_bound_is_refused_before_it_is_decoded() -> None:
    body = b'[["kvdelete", "a"], ["kvdelete", "b"], this is never parsed'
    with pytest.raises(ApiError) as e:
        await decode_batch(body, "application/json", max_entries=2, max_values=BIG)
    assert e.value.status == 413


def _counted(data: bytes) -> int:
    return sum(map(data.count, (b"[", b"{", b",", b":")))


@pytest.mark.parametrize("n", [1, 3, 5000, 40_000])
async def test_json_values_are_counted_to_the_bound_across_slices(n: int) -> None:
    """A JSON body is refused exactly when it holds ``max_values`` or more of the
    characters that open or separate values, whether it is shorter than the bound or
    counted over several slices (the 40,000-entry body is over 1 MB)."""
    import orjson

    from lsmstore.server import batch_body

    entries = [["link", f"p{i}", "data/x", 1, "c", None, {"a": "1"}] for i in range(n)]
    body = orjson.dumps(entries)
    count = _counted(body)
    if n == 40_000:
        assert len(body) > 4 * batch_body._COUNT_SLICE
    for bound in (count, count + 1, len(body), len(body) + 1, count // 2 + 1):
        over = count >= bound
        assert batch_body._json_values_over(body, bound) is over, bound
        if over:
            with pytest.raises(ApiError) as e:
                await decode_batch(body, "application/json", max_entries=BIG, max_values=bound)
            assert e.value.status == 413
        else:
            got = await decode_batch(body, "application/json", max_entries=BIG, max_values=bound)
            assert _tuples(got) == [tuple(e) for e in entries]
    # every byte one of them: as many values as bytes
    dense = b"[" * 10 + b"]" * 10
    assert batch_body._json_values_over(dense, 10) and not batch_body._json_values_over(dense, 11)


@pytest.mark.parametrize("n", [10, 5000])
async def test_small_and_large_json_bodies_decode_alike(n: int) -> None:
    """A body of at most ``_ONE_STEP_BYTES`` is parsed in one step, a larger one by the
    scanner an entry at a time: the same entries either way (orjson's lists, the
    scanner's tuples)."""
    from lsmstore.server import batch_body

    entries = [["link", f"p/{i:06d}", "local://r/data/" + "x" * 40, i, "e" * 32, None,
                {"k": [i, 1.5, True]}] for i in range(n)]  # fmt: skip
    body = orjson.dumps(entries)
    assert (len(body) > batch_body._ONE_STEP_BYTES) == (n == 5000)
    got = await decode_batch(body, "application/json", max_entries=BIG, max_values=BIG)
    assert _tuples(got) == [tuple(e) for e in entries]
    assert all(type(e) is (tuple if n == 5000 else list) for e in got)
