"""An uploading process for the object crash tests; killed with SIGKILL by the test.

python child_uploader.py REFSTORE HOME REPO MODE

* ``stage``: uploads ``acked`` (prints ``acked``), then uploads ``pending`` while the
  namespace's store holds every staging-file put (lsmstore.testing.faulty_store): its
  data object is written and its entry cannot be staged; prints ``staging`` once the
  staging file's put is held.
* ``stream``: uploads ``streamed`` from an async iterator of 1 MiB chunks that prints
  ``chunk N`` after handing over each and never ends after the sixth.
* ``durable`` (a local namespace): uploads ``acked`` (prints ``acked``), then uploads
  ``pending`` while the fsync of the data directory never ends (``local_sync = "file"``,
  where that fsync is the data's own): its data is written
  and its entry staged, its batch's L1 file is uploaded, and the batch waits for the
  data to be durable; prints ``uploaded`` once both L1 objects have landed (and the
  writer had a moment to append wrongly).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import AsyncIterator

import uvloop
from counted_store import CountedPuts

from lsmstore.client import Store
from lsmstore.config import load_config
from lsmstore.storage import local
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store
from lsmstore.testing.faulty_store import FaultyStore


async def endless() -> AsyncIterator[bytes]:
    for i in range(6):
        yield os.urandom(1 << 20)
        print(f"chunk {i}", flush=True)
    await asyncio.Event().wait()  # the client "hangs" here until killed
    yield b""


def _hang_data_dir_fsyncs() -> None:
    """From now on the fsync of a ``data`` directory never ends (the process is killed)."""
    real = local._sync_dir

    def sync_dir(path: str) -> None:
        if os.path.basename(path) == "data":
            threading.Event().wait()
        real(path)

    local._sync_dir = sync_dir


async def main() -> None:
    refstore, home, repo_name, mode = sys.argv[1:]
    stores: dict[str, FaultyStore] = {}

    landed: dict[str, CountedPuts] = {}

    def open_objects(url: str) -> ObjectStore:
        if mode == "stream":  # the real store: it streams (a wrapper's put_stream gathers)
            return open_object_store(url)
        if mode == "durable":  # per-file fsyncs: only the data directory's one hangs
            store = open_object_store(url, local_sync="file")
            landed[url] = CountedPuts(store, containing="/L1/")
            return landed[url]
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
        elif mode == "durable":
            await main.upload("acked", b"acknowledged before the crash")
            print("acked", flush=True)
            l1 = landed[repo.storage_namespace]
            before = l1.puts
            _hang_data_dir_fsyncs()
            task = asyncio.create_task(main.upload("pending", b"written, never durable"))
            await l1.until(before + 2)  # the batch's SST and sidecar
            await asyncio.sleep(0.2)  # give the writer every chance to (wrongly) append
            print("uploaded", flush=True)
            await task
        else:
            await main.upload("streamed", endless())
        await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(main())
