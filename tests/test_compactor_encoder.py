"""Compaction outputs encoded by a client's Encoder (its worker process) are the files
a thread would write; an in-process compactor uses its store's encoder."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import lsmstore
from lsmstore.compaction.job import CompactionJob
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.encoder import Encoder
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.compaction import (
    BRANCH,
    REPO,
    append_l1_file,
    branch_state,
    check_l2,
    make_config,
    rec,
    setup_branch,
)


async def test_outputs_through_the_worker_process_hold_the_merged_state(
    tmp_path: Path,
) -> None:
    rng = random.Random(3)
    async with EmbeddedRefStore(tmp_path / "refs") as refstore:
        await setup_branch(refstore)
        objects = MemoryStore()
        model: dict[bytes, bytes] = {}
        for _ in range(6):
            batch = []
            for _ in range(200):
                k = b"k%05d" % rng.randrange(600)
                if rng.random() < 0.2:
                    batch.append(rec(k, None))
                    model.pop(k, None)
                else:
                    v = rng.randbytes(30)
                    batch.append(rec(k, v))
                    model[k] = v
            # a key written twice in one batch keeps its last record, as in the model
            await append_l1_file(refstore, objects, REPO, BRANCH, batch)
        encoder = Encoder(use_process=True, min_records=1)
        try:
            cfg = make_config(compaction_l2_file_bytes=4096)
            first = await CompactionJob(refstore, objects, REPO, BRANCH, cfg, encoder=encoder).run()
            for i in range(200):  # the worker starts on first use, meanwhile threads encode
                if encoder.batches_in_process:
                    break
                await asyncio.sleep(0.02)
                value = b"x%d" % i
                await append_l1_file(refstore, objects, REPO, BRANCH, [rec(b"k00000", value)])
                model[b"k00000"] = value
                await CompactionJob(refstore, objects, REPO, BRANCH, cfg, encoder=encoder).run()
            assert encoder.batches_in_process > 0
        finally:
            await encoder.aclose()
        assert first.outcome == "compacted" and first.files_out > 1
        ref = await refstore.get_ref(REPO, BRANCH)
        assert not ref.l1
        await check_l2(objects, BRANCH, ref)  # sorted, non-overlapping, sidecars match
        assert await branch_state(refstore, objects, REPO, BRANCH, ref) == model


async def test_an_in_process_compactor_uses_its_stores_encoder(tmp_path: Path) -> None:
    async with lsmstore.connect(home=str(tmp_path), compaction_in_process="on") as store:
        background = store._background
        assert background is not None
        assert background.compactor.encoder is store.encoder
