"""Imports from an object-store prefix (``Branch.import_start`` / ``import_status`` /
``import_cancel``) through the client API, on every transport (tests/test_client_api.py
style): one commit with entries that reference the listed objects, destinations
replaced, progress, cancel, errors."""

from __future__ import annotations

import asyncio
from typing import Any

from lsmstore.types import ImportPath, ImportStatus
from tests.helpers.remote import lsm_server  # noqa: F401 - a fixture
from tests.test_client_api import Target, target  # noqa: F401 - the fixture


async def wait(branch: Any, import_id: str) -> ImportStatus:
    """Poll until the import is no longer running (the status says so, no clock)."""
    while True:
        s = await branch.import_status(import_id)
        if not s.running:
            return s
        await asyncio.sleep(0.05)


async def test_import_prefix_lands_as_one_commit(target: Target) -> None:
    repo = await target.repo()
    src = repo.branch("main")
    uploaded = {}
    for i in range(5):
        st = await src.upload(f"staged/f{i}", f"data {i}".encode())
        uploaded[st.physical_address] = st
    await src.commit("some objects")  # their entries: not what is imported
    await src.upload("dest/old-only", b"replaced")  # staged, stays staged on top
    base = await src.head()
    prefix = next(iter(uploaded)).rsplit("/", 1)[0] + "/"
    iid = await src.import_start([ImportPath(prefix, "dest/")], "import data", metadata={"k": "v"})
    s = await wait(src, iid)
    assert s.completed and s.error is None, s
    assert s.ingested_objects == len(uploaded) + 1  # the staged upload's data too
    assert s.commit is not None and s.commit_id is not None
    assert s.commit.parents == (base.base,)
    assert s.commit.message == "import data" and dict(s.commit.metadata) == {"k": "v"}
    log = [e async for e in src.log(limit=2)] if hasattr(src, "log") else None
    del log
    got = {o.physical_address: o async for o in repo.ref(s.commit_id).list_objects("dest/")}
    for address, st in uploaded.items():
        assert got[address].size == st.size and got[address].checksum == st.checksum
        assert got[address].path == "dest/" + address[len(prefix) :]
    # the commit holds the old objects too, and nothing else changed
    assert [o.path async for o in repo.ref(s.commit_id).list_objects("staged/")] == [
        f"staged/f{i}" for i in range(5)
    ]
