"""Discarding a branch's staged changes (lakeFS ``resetBranch``, our ``reset``).

Under the branch's exclusive lock (this process's writes to it are flushed and held
off): read the branch, then ``swap_committed`` with the same base and the whole L1/L2
as the consumed prefix -- the staged files leave the ref in one compare-and-swap,
writes appended by other processes meanwhile stay.  A compaction swapping in between
makes the CAS fail; it is retried from a fresh read.  The dropped files are recorded
as garbage (swept after the grace period, readers holding the old ref still work).
Crash between the swap and the garbage record: the files are orphans the sweep finds.
"""

from __future__ import annotations

from lsmstore.client import Repository
from lsmstore.errors import ConflictError
from lsmstore.refstore.base import Ref
from lsmstore.server.context import Context
from lsmstore.versioning.refs import get_branch

ATTEMPTS = 10


async def discard(ctx: Context, repo: Repository, branch: str) -> Ref:
    """Drop every staged change of ``repo``/``branch``; the ref value dropped."""
    async with ctx.locks.exclusive(repo.name, branch):
        await repo.branch(branch).flush()
        for attempt in range(ATTEMPTS):
            ref = await get_branch(repo.context(), branch)
            if not ref.l1 and not ref.l2:
                return ref
            try:
                await ctx.store.refstore.swap_committed(
                    repo.name, branch, base=ref.base, l2_old=ref.l2, l1_prefix=ref.l1,
                    new_base=ref.base,
                )  # fmt: skip
            except ConflictError:
                if attempt == ATTEMPTS - 1:
                    raise
                continue
            ctx.store.notify_l1_changed(repo.name, branch)
            await _record_garbage(ctx, repo, branch, ref)
            return ref
    raise AssertionError("unreachable")  # pragma: no cover


async def _record_garbage(ctx: Context, repo: Repository, branch: str, ref: Ref) -> None:
    from lsmstore.gc.staging import record_garbage

    files = [("L1", f) for f in ref.l1] + [("L2", f) for f in ref.l2]
    try:
        await record_garbage(
            repo.objects,
            repo.name,
            branch,
            files,  # type: ignore[arg-type]
            grace_s=ctx.store.config.compaction_grace_s,
            reason="staged changes discarded",
            clock=ctx.store.clock,
        )
    except Exception:  # the sweep finds them as orphans anyway
        pass
