"""Shared bits of the staging tests: a real embedded RefStore with one branch, and
reading a branch's L1 files straight from the object store."""

from __future__ import annotations

from pathlib import Path

from lsmstore import layout
from lsmstore.graveler.record import Record, default_identity
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.refstore.base import Ref, RefStore, Repository
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.storage.base import ObjectStore

REPO = "repo"
BRANCH = "main"


def rec(key: bytes | str, value: bytes | None) -> Record:
    k = key.encode() if isinstance(key, str) else key
    if value is None:
        return Record(k, b"", None)
    return Record(k, default_identity(value), value)


async def embedded_refstore(tmp_path: Path, *, branch: str = BRANCH) -> RefStore:
    rs = EmbeddedRefStore(tmp_path / "refs")
    await rs.create_repository(Repository(REPO, "mem://x", branch))
    await rs.create_ref(REPO, branch, Ref("branch", ""))
    return rs


async def l1_files(rs: RefStore, objects: ObjectStore, branch: str = BRANCH) -> list[list[Record]]:
    """The records of each L1 file of the branch, oldest first."""
    ref = await rs.get_ref(REPO, branch)
    out = []
    for fid in ref.l1:
        data = await objects.get(layout.staging_key(branch, "L1", fid))
        out.append(list(SSTReader(data, fid)))
    return out


class DirectCache:
    """The file-cache interface with no caching: every get is a fetch (so a counting
    store sees exactly which files a read needed)."""

    async def get(self, store: ObjectStore, key: str, parse, *, kind: str = "sst"):  # type: ignore[no-untyped-def]
        return parse(await store.get(key), key)


async def commit_tree(
    objects: ObjectStore, records: list[Record], max_bytes: int = 2000, raggedness: int = 7
) -> str:
    """Write ``records`` (sorted, no tombstones) as a committed tree and a commit; its id."""
    from lsmstore.graveler.commit import write_commit
    from lsmstore.graveler.metarange import store_metarange
    from lsmstore.graveler.ranges import RangePolicy, RangeWriter
    from lsmstore.types import Commit

    writer = RangeWriter(
        objects, RangePolicy(min_bytes=0, max_bytes=max_bytes, raggedness=raggedness)
    )
    for r in records:
        await writer.add(r)
    ranges = await writer.finish()
    metarange_id = await store_metarange(objects, ranges)
    return await write_commit(objects, Commit(metarange_id, (), "test", "base", 0))
