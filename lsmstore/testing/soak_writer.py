"""A writer process of the fault soak (:mod:`lsmstore.testing.soak`).

    python -m lsmstore.testing.soak_writer REFSTORE_URL HOME REPO WRITER_ID GENERATION SEED

Runs ``TASKS`` tasks on branch ``main``; task *t* owns the keys ``w<id>/t<t>/k<n>``
and issues one operation at a time (so per key, operations are ordered), chosen with
``random.Random`` seeded from (seed, writer, generation, task): ``put``, ``overwrite``
(a put of a key it wrote before), ``put_many``, ``delete``, ``stage_sst``, ``commit``.
Every operation is reported on stdout, one JSON object per line, flushed:
``{"t": "begin", "op": ID, "kind": K, "keys": {key: value or null}}`` before it starts,
then ``{"t": "ack", "op": ID}`` once acknowledged or ``{"t": "fail", "op": ID,
"error": E}`` when it raised.  Values are unique (``<id>.<generation>.<op>``).  It runs
until killed.

``SOAK_WRITER_PAUSE_AT=staged`` (a named step for crash tests): the first time a
staging SST has been uploaded -- before the RefStore append that would make it
visible -- the process prints ``{"t": "paused", "step": "staged"}`` and waits forever
(the soak kills it there).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys

import uvloop

import lsmstore
from lsmstore import layout
from lsmstore.api import BranchAPI
from lsmstore.config import load_config
from lsmstore.errors import LsmError, NothingToCommitError, UnavailableError
from lsmstore.graveler.record import Record, default_identity
from lsmstore.staging.files import SST_SUFFIX, encode_staging_file
from lsmstore.storage.base import ForwardingStore, ObjectStore, PutMode
from lsmstore.storage.url import open_object_store

PAUSE_ENV = "SOAK_WRITER_PAUSE_AT"

TASKS = 4
KEYS_PER_TASK = 25
KINDS = ("put", "overwrite", "put_many", "delete", "stage_sst", "commit")
WEIGHTS = (30, 25, 15, 12, 10, 2)


def emit(doc: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class _PauseWhenStaged(ForwardingStore):
    """Passes everything to ``inner``; after the first staging SST is stored, pauses
    for ever (used only by the soak's step kills)."""

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        await self.inner.put(key, data, mode)
        if key.startswith(layout.STAGING) and key.endswith(SST_SUFFIX):
            emit({"t": "paused", "step": "staged", "key": key})
            await asyncio.Event().wait()


def _open_objects(namespace: str) -> ObjectStore:
    store = open_object_store(namespace)
    return _PauseWhenStaged(store) if os.environ.get(PAUSE_ENV) == "staged" else store


async def task(
    branch: BranchAPI, wid: int, gen: int, t: int, seed: int, counter: list[int]
) -> None:
    rng = random.Random(f"{seed}/{wid}/{gen}/{t}")
    written: list[str] = []

    def key(n: int) -> str:
        return f"w{wid}/t{t}/k{n:03d}"

    while True:
        kind = rng.choices(KINDS, WEIGHTS)[0]
        counter[0] += 1
        op = f"{wid}.{gen}.{counter[0]}"
        keys: dict[str, str | None] = {}
        if kind == "overwrite" and written:
            keys[rng.choice(written)] = op
        elif kind in ("put", "overwrite"):
            keys[key(rng.randrange(KEYS_PER_TASK))] = op
        elif kind in ("put_many", "stage_sst"):
            for n in rng.sample(range(KEYS_PER_TASK), rng.randint(2, 6)):
                keys[key(n)] = f"{op}.{n}"
        elif kind == "delete":
            keys[rng.choice(written) if written else key(0)] = None
        emit({"t": "begin", "op": op, "kind": kind, "keys": keys})
        try:
            if kind in ("put", "overwrite"):
                ((k, v),) = keys.items()
                assert v is not None
                await branch.put(k, v.encode())
            elif kind == "put_many":
                await branch.put_many([(k, v.encode()) for k, v in keys.items() if v])
            elif kind == "delete":
                await branch.delete(next(iter(keys)))
            elif kind == "stage_sst":
                records = sorted(
                    Record(k.encode(), default_identity(v.encode()), v.encode())
                    for k, v in keys.items()
                    if v
                )
                sst, _, _ = await asyncio.to_thread(encode_staging_file, records, 0.01)
                await branch.stage_sst(sst)
            else:
                try:
                    await branch.commit(f"soak {op}")
                except NothingToCommitError:
                    pass
        except LsmError as e:
            emit({"t": "fail", "op": op, "error": f"{type(e).__name__}: {e}"[:300]})
            await asyncio.sleep(rng.uniform(0.05, 0.3))  # a dependency may be down
            continue
        emit({"t": "ack", "op": op})
        written.extend(k for k, v in keys.items() if v is not None and k not in written)
        await asyncio.sleep(rng.uniform(0, 0.02))


async def main(url: str, home: str, repo: str, wid: int, gen: int, seed: int) -> None:
    config = load_config(url, home=home, batch_interval_ms=10, compaction_in_process="off")
    async with lsmstore.Store(config, open_objects=_open_objects) as store:
        while True:  # the RefStore may be down while this process starts
            try:
                branch = (await store.get_repository(repo)).branch("main")
                break
            except UnavailableError:
                await asyncio.sleep(0.2)
        counter = [0]
        await asyncio.gather(*(task(branch, wid, gen, t, seed, counter) for t in range(TASKS)))


if __name__ == "__main__":
    url, home, repo, wid, gen, seed = sys.argv[1:]
    uvloop.run(main(url, home, repo, int(wid), int(gen), int(seed)))
