"""An uploading process for the object crash tests; killed with SIGKILL by the test.

python child_uploader.py REFSTORE HOME REPO MODE

* ``stage``: uploads ``acked`` (prints ``acked``), then uploads ``pending`` while the
  namespace's store holds every staging-file put (lsmstore.testing.faulty_store): its
  data object is written and its entry cannot be staged; prints ``staging`` once the
  staging file's put is held.
* ``stream``: uploads ``streamed`` from an async iterator of 1 MiB chunks that prints
  ``chunk N`` after handing over each and never ends after the sixth.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import uvloop

from lsmstore.client import Store
from lsmstore.config import load_config
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store
from lsmstore.testing.faulty_store import FaultyStore


async def endless() -> AsyncIterator[bytes]:
    for i in range(6):
        yield os.urandom(1 << 20)
        print(f"chunk {i}", flush=True)
    await asyncio.Event().wait()  # the client "hangs" here until killed
    yield b""


async def main() -> None:
    refstore, home, repo_name, mode = sys.argv[1:]
    stores: dict[str, FaultyStore] = {}

    def open_objects(url: str) -> ObjectStore:
        if mode == "stream":  # the real store: it streams (a wrapper's put_stream gathers)
            return open_object_store(url)
        stores[url] = FaultyStore(open_object_store(url))
        return stores[url]

    config = load_config(refstore, home=home, batch_interval_ms=5)
    async with Store(config, open_objects=open_objects) as store:
        repo = await store.get_repository(repo_name)
        main = repo.branch()
        if mode == "stage":
            await main.upload("acked", b"acknowledged before the crash")
            print("acked", flush=True)
            gate = stores[repo.storage_namespace].hold("put", prefix="_lsm/staging/")
            task = asyncio.create_task(main.upload("pending", b"written, never staged"))
            await gate.entered.wait()
            print("staging", flush=True)
            await task
        else:
            await main.upload("streamed", endless())
        await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(main())
