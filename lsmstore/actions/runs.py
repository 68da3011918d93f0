"""Where runs and their hooks' output are recorded: objects in the repository's storage
namespace, written once, listed newest first.

Layout::

    _lsm/actions/runs/<run id>.json                 {"run": {...}, "hooks": [...]}
    _lsm/actions/output/<run id>/<hook run id>.log  what the hook sent and got

A run ID is ``<14 digits><8 hex>``: the milliseconds left until the year 3000 (so
later runs sort first, as lakeFS's decreasing IDs) and random hex.  A run's outputs
are written before its record; a crash in between leaves outputs without a record,
which no listing shows and retention deletes.

**Retention.**  Each recorded run deletes up to :data:`PRUNE_BATCH` runs and outputs
older than ``actions_runs_retention_s`` (default 30 days): the IDs of older runs all
sort after the ID of the cut-off time, so finding them lists only what is deleted.
An output is cut at :data:`MAX_OUTPUT_BYTES`.

**Cost.**  Listing with a ``branch`` or ``commit`` filter reads the records of the
runs it passes over (at most the runs within the retention period).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict

from lsmstore import layout
from lsmstore.errors import (
    CorruptFileError,
    InvalidInputError,
    NotFoundError,
    ObjectNotFoundError,
)
from lsmstore.storage.base import ObjectStore
from lsmstore.types import ActionRun, HookRun

RUNS = f"{layout.PREFIX}/actions/runs/"
OUTPUT = f"{layout.PREFIX}/actions/output/"
MAX_OUTPUT_BYTES = 1024 * 1024
PRUNE_BATCH = 100
_YEAR_3000_MS = 32_500_915_200_000
_DIGITS = 14
_RUN_ID_CHARS = _DIGITS + 8


def new_run_id(now: float, token: Callable[[int], str]) -> str:
    return f"{_YEAR_3000_MS - int(now * 1000):0{_DIGITS}d}{token(4)}"


def check_run_id(run_id: str) -> str:
    if (
        not isinstance(run_id, str)
        or len(run_id) != _RUN_ID_CHARS
        or not all(c in "0123456789abcdef" for c in run_id)
    ):
        raise NotFoundError(f"no action run {str(run_id)[:40]!r}")
    return run_id


def _output_key(run_id: str, hook_run_id: str) -> str:
    return f"{OUTPUT}{run_id}/{hook_run_id}.log"


def hook_run_id(action_index: int, hook_index: int) -> str:
    return f"{action_index:04d}_{hook_index:04d}"


def _hook_run_ok(hook_run_id: str) -> bool:
    a, sep, b = hook_run_id.partition("_")
    return bool(sep) and len(a) == len(b) == 4 and (a + b).isdigit()


async def save_output(objects: ObjectStore, run_id: str, hook_run_id: str, text: str) -> None:
    data = text.encode("utf-8", "replace")
    if len(data) > MAX_OUTPUT_BYTES:
        data = data[:MAX_OUTPUT_BYTES] + b"\n[output cut]\n"
    await objects.put(_output_key(run_id, hook_run_id), data)


async def save_run(objects: ObjectStore, run: ActionRun, hooks: list[HookRun]) -> None:
    doc = {"run": asdict(run), "hooks": [asdict(h) for h in hooks]}
    await objects.put(f"{RUNS}{run.run_id}.json", json.dumps(doc).encode())


async def _load(objects: ObjectStore, key: str) -> tuple[ActionRun, list[HookRun]]:
    data = await objects.get(key)
    try:
        doc = json.loads(data)
        return ActionRun(**doc["run"]), [HookRun(**h) for h in doc["hooks"]]
    except (ValueError, TypeError, KeyError) as e:
        raise CorruptFileError(key, f"not a run record: {e}") from None


async def get_run(objects: ObjectStore, run_id: str) -> tuple[ActionRun, list[HookRun]]:
    """A run and its hooks; NotFoundError when there is no such run."""
    try:
        return await _load(objects, f"{RUNS}{check_run_id(run_id)}.json")
    except ObjectNotFoundError:
        raise NotFoundError(f"no action run {run_id!r}") from None


async def list_runs(
    objects: ObjectStore, *, after: str = "", branch: str = "", commit: str = ""
) -> AsyncIterator[ActionRun]:
    """Runs newest first, strictly after run ID ``after``, with ``branch`` /
    ``commit_id`` equal to the filters given."""
    if after and (len(after) > 64 or "/" in after):
        raise InvalidInputError(f"invalid run ID {after[:40]!r} to list after")
    start = f"{RUNS}{after}.json" if after else None
    async for meta in objects.list(RUNS, after=start):
        try:
            run, _ = await _load(objects, meta.key)
        except ObjectNotFoundError:  # pruned meanwhile
            continue
        if (branch and run.branch != branch) or (commit and run.commit_id != commit):
            continue
        yield run


async def get_output(objects: ObjectStore, run_id: str, hook_run: str) -> bytes:
    """A hook's output; NotFoundError when the run or hook is unknown."""
    if not _hook_run_ok(hook_run):
        raise NotFoundError(f"no hook run {hook_run[:40]!r}")
    _, hooks = await get_run(objects, run_id)
    if not any(h.hook_run_id == hook_run for h in hooks):
        raise NotFoundError(f"run {run_id} has no hook run {hook_run!r}")
    try:
        return await objects.get(_output_key(run_id, hook_run))
    except ObjectNotFoundError:  # a hook skipped after an earlier failure
        return b""


async def prune(objects: ObjectStore, now: float, retention_s: float) -> int:
    """Delete up to PRUNE_BATCH runs and outputs older than ``retention_s``; how many
    objects were deleted."""
    cutoff = new_run_id(now - retention_s, lambda n: "f" * (2 * n))
    deleted = 0
    for prefix in (RUNS, OUTPUT):
        async for meta in objects.list(prefix, after=prefix + cutoff):
            if deleted >= PRUNE_BATCH:
                return deleted
            await objects.delete(meta.key)
            deleted += 1
    return deleted
