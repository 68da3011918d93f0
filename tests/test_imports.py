"""Imports from an object-store prefix (``Branch.import_start`` / ``import_status`` /
``import_cancel``) through the client API, on every transport (tests/test_client_api.py
style): one commit with entries that reference the listed objects, destinations
replaced, progress, cancel, errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lsmstore.errors import (
    ConflictError,
    ImportNotFoundError,
    InvalidInputError,
    ProtectedBranchError,
    RefNotFoundError,
)
from lsmstore.types import ImportPath, ImportStatus
from tests.helpers.remote import lsm_server  # noqa: F401 - a fixture
from tests.test_client_api import (
    Target,
    target,  # noqa: F401 - the fixture
)


async def wait(branch: Any, import_id: str) -> ImportStatus:
    """Poll until the import is no longer running (the status says so, no clock)."""
    while True:
        s = await branch.import_status(import_id)
        if not s.running:
            return s
        await asyncio.sleep(0.05)


async def test_import_prefix_lands_as_one_commit(target: Target) -> None:  # noqa: F811
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


async def _uploaded_prefix(branch: Any, paths: list[str]) -> tuple[str, dict[str, Any]]:
    """Upload ``paths``; the prefix of their data objects (``<namespace>/data/``) and
    their stats by physical address."""
    stats = {}
    for p in paths:
        st = await branch.upload(p, f"contents of {p}".encode())
        stats[st.physical_address] = st
    return next(iter(stats)).rsplit("/", 1)[0] + "/", stats


async def test_import_replaces_destinations_and_places_objects(target: Target) -> None:  # noqa: F811
    repo = await target.repo()
    main = repo.branch("main")
    prefix, stats = await _uploaded_prefix(main, ["a", "b", "c"])
    await main.upload("dest/stale", b"gone after the import")
    await main.upload("dest-sibling", b"not under dest/: kept")
    await main.commit("before")
    first = next(iter(stats))
    iid = await main.import_start(
        [
            ImportPath(prefix, "dest/"),
            ImportPath(first, "single/one", type="object"),
            # the same object again, later in the list: its destination wins
            ImportPath(first, "dest/" + first[len(prefix) :] + "x", type="object"),
        ],
        "replace",
    )
    s = await wait(main, iid)
    assert s.completed, s
    paths = [o.path async for o in main.list_objects()]
    data = [p for p in paths if p.startswith("dest/")]
    assert "dest/stale" not in data and "dest-sibling" in paths
    # the data of "dest/stale" and "dest-sibling" too, and the second object source
    assert len(data) == len(stats) + 3
    one = await main.stat_object("single/one")
    assert one.physical_address == first and one.size == stats[first].size
    reader = await main.open("single/one")
    assert await reader.read() == f"contents of {stats[first].path}".encode()
    # imported objects read back through the branch
    for address, st in stats.items():
        r = await main.open("dest/" + address[len(prefix) :])
        assert await r.read() == f"contents of {st.path}".encode()


async def test_import_errors_are_typed(target: Target) -> None:  # noqa: F811
    repo = await target.repo()
    main = repo.branch("main")
    prefix, _ = await _uploaded_prefix(main, ["a"])
    for bad in (
        [],
        [ImportPath(prefix, "d/", type="folder")],
        [ImportPath(prefix, "", type="object")],
        [ImportPath("s3://some-other-bucket/data/", "d/")],
        [ImportPath(prefix.rsplit("/data/", 1)[0] + "/_lsm/", "d/")],
        [ImportPath(prefix + "../../", "d/")],
    ):
        with pytest.raises(InvalidInputError):
            await main.import_start(bad, "m")
    with pytest.raises(RefNotFoundError):
        await repo.branch("nope").import_start([ImportPath(prefix, "d/")], "m")
    with pytest.raises(ImportNotFoundError):
        await main.import_status("no-such-import")
    with pytest.raises(ImportNotFoundError):
        await main.import_cancel("no-such-import")
    iid = await main.import_start([ImportPath(prefix, "d/")], "m")
    s = await wait(main, iid)
    assert s.completed
    with pytest.raises(ImportNotFoundError):  # the id is the branch's
        await repo.branch("other").import_status(iid)
    with pytest.raises(ConflictError):
        await main.import_cancel(iid)
    await repo.set_branch_protection(["main"])
    with pytest.raises(ProtectedBranchError):
        await main.import_start([ImportPath(prefix, "d/")], "m")


async def test_an_object_source_that_is_missing_fails_the_import(target: Target) -> None:  # noqa: F811
    repo = await target.repo()
    main = repo.branch("main")
    prefix, _ = await _uploaded_prefix(main, ["a"])
    head = (await main.head()).base
    iid = await main.import_start([ImportPath(prefix + "missing", "m", type="object")], "m")
    s = await wait(main, iid)
    assert not s.completed and s.error is not None and "does not exist" in s.error
    assert (await main.head()).base == head
