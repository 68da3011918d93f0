"""The batch endpoint's decoded entries made a WriteBatch (lsmstore.server.batch.build):
entries as tuples or as orjson's lists alike, other tasks run between slices, the
first bad entry named."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import orjson
import pytest

import lsmstore
from lsmstore.server.batch import build
from lsmstore.server.batch_body import SLICE, decode_batch
from lsmstore.server.errors import ApiError

BIG = 10**9


async def test_json_entries_build_in_slices_with_the_loop_free_between(tmp_path: Path) -> None:
    entries = [["kv", f"k/{i:06d}", base64.b64encode(b"v%d" % i).decode()]
               for i in range(3 * SLICE)]  # fmt: skip
    decoded = await decode_batch(orjson.dumps(entries), "application/json", max_entries=BIG,
                                 max_values=BIG)  # fmt: skip
    assert type(decoded[0]) is list  # parsed in one step: orjson's lists
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    async with lsmstore.connect(home=str(tmp_path)) as store:
        repo = await store.create_repository("rep", storage_namespace="local://rep")
        main = repo.branch("main")
        counter = asyncio.create_task(count_turns())
        await asyncio.sleep(0)  # the counter's first turn
        started = turns
        try:
            batch = await build(main, decoded, True, False)
        finally:
            counter.cancel()
        assert turns - started == 2  # once between each two of the three slices
        assert len(batch) == 3 * SLICE
        assert await batch.apply() == 3 * SLICE
        assert await main.get(f"k/{3 * SLICE - 1:06d}") == b"v%d" % (3 * SLICE - 1)


@pytest.mark.parametrize("kind", [tuple, list])
async def test_the_first_bad_entry_is_named_in_either_form(tmp_path: Path, kind: type) -> None:
    ok = ["kv", "ok", base64.b64encode(b"v").decode()]
    async with lsmstore.connect(home=str(tmp_path)) as store:
        repo = await store.create_repository("rep", storage_namespace="local://rep")
        main = repo.branch("main")
        for bad, status, kind_name in (
            (["kv", "k", "dmFsdWU\u00e9"], 400, None),  # not ASCII: not base64
            (["kv", "", "dg=="], 400, "InvalidKeyError"),
            (["link", "p"], 400, None),
            ("kv", 400, None),  # not an array
        ):
            body = [kind(ok), kind(bad) if isinstance(bad, list) else bad]
            with pytest.raises(ApiError) as e:
                await build(main, body, True, False)
            assert e.value.status == status and e.value.message.startswith("entry 1: "), bad
            if kind_name is not None:
                assert e.value.kind == kind_name
