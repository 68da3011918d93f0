"""Shared bits of the committer and version-control tests: a repository on a real
embedded RefStore and a local object store, staging files written the way the writer
and the compactor write them, and reading committed trees back."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from lsmstore import layout
from lsmstore.graveler.ranges import RangePolicy
from lsmstore.graveler.record import Record
from lsmstore.graveler.tree import TreeReader
from lsmstore.refstore.base import Ref, RefStore, Repository
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.files import SIDECAR_SUFFIX, SST_SUFFIX, encode_staging_file, new_file_id
from lsmstore.staging.merge import merge_newest
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.storage.local import LocalStore
from lsmstore.testing.compaction import rec as rec  # shared with the compactor tests
from lsmstore.versioning.context import RepoContext
from lsmstore.versioning.refs import init_default_branch

REPO = "repo"
#: Small ranges so that a few thousand keys make many of them.
TINY = RangePolicy(min_bytes=200, max_bytes=2000, raggedness=8)


async def make_repo(
    tmp_path: Path,
    *,
    refstore: RefStore | None = None,
    objects: ObjectStore | None = None,
    policy: RangePolicy = TINY,
    name: str = REPO,
) -> RepoContext:
    """A repository with its initial commit and ``main`` on it."""
    rs = refstore or EmbeddedRefStore(tmp_path / "refs")
    store = objects or LocalStore(tmp_path / "data")
    await rs.create_repository(Repository(name, store.url, "main"))
    ctx = RepoContext(name, rs, store, policy=policy)
    await init_default_branch(ctx)
    return ctx


async def close(ctx: RepoContext) -> None:
    await ctx.refstore.aclose()
    await ctx.objects.aclose()


async def upload_staging(
    ctx: RepoContext, branch: str, level: layout.Level, records: Iterable[Record]
) -> str:
    """Write one staging file (SST + sidecar) of ``records``; its id (not in any ref)."""
    recs = sorted({r.key: r for r in records}.values())
    sst, meta, _ = encode_staging_file(recs, 0.01)
    fid = new_file_id()
    await ctx.objects.put(layout.staging_key(branch, level, fid, SST_SUFFIX), sst, PutMode.CREATE)
    await ctx.objects.put(
        layout.staging_key(branch, level, fid, SIDECAR_SUFFIX), meta, PutMode.CREATE
    )
    return fid


async def stage(ctx: RepoContext, branch: str, records: Iterable[Record]) -> str:
    """Stage ``records`` as one L1 file (as an acknowledged write batch would be)."""
    fid = await upload_staging(ctx, branch, "L1", records)
    await ctx.refstore.append_l1(ctx.name, branch, fid)
    return fid


async def read_staging(
    ctx: RepoContext, branch: str, level: layout.Level, fid: str
) -> list[Record]:
    return list(await ctx.staging_reader(branch, level, fid))


async def compact(ctx: RepoContext, branch: str, prefix_len: int, ref: Ref | None = None) -> Ref:
    """What a compactor does: merge L1[:prefix_len] (newest wins) with L2, keeping
    tombstones, into one new L2 file, and swap it in."""
    ref = ref or await ctx.refstore.get_ref(ctx.name, branch)
    prefix = ref.l1[:prefix_len]
    sources = [await read_staging(ctx, branch, "L1", f) for f in reversed(prefix)]
    sources += [await read_staging(ctx, branch, "L2", f) for f in ref.l2]
    records = list(merge_newest(sources))
    l2_new = [await upload_staging(ctx, branch, "L2", records)] if records else []
    return await ctx.refstore.swap_compacted(
        ctx.name, branch, base=ref.base, l2_old=ref.l2, l1_prefix=prefix, l2_new=l2_new
    )


async def tree_of(ctx: RepoContext, commit_id: str) -> dict[bytes, bytes]:
    commit = await ctx.commit(commit_id)
    out: dict[bytes, bytes] = {}
    async for r in TreeReader(ctx.source, commit.metarange_id):
        assert r.value is not None
        out[r.key] = r.value
    return out


async def branch_state(ctx: RepoContext, branch: str) -> dict[bytes, bytes]:
    """What a reader of ``branch`` sees: base tree, then L2, then L1 (newest wins)."""
    ref = await ctx.refstore.get_ref(ctx.name, branch)
    state = await tree_of(ctx, ref.base)
    layers = [await read_staging(ctx, branch, "L2", f) for f in ref.l2]
    layers += [await read_staging(ctx, branch, "L1", f) for f in ref.l1]
    for layer in layers:
        for r in layer:
            if r.value is None:
                state.pop(r.key, None)
            else:
                state[r.key] = r.value
    return state
