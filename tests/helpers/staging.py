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
