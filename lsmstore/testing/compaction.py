"""Helpers for tests and benchmarks of compaction: an oracle that reads a branch's whole
state straight from its files (independently of the reader), L2 invariant checks, and
real commits made from a dict."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from lsmstore import layout
from lsmstore.config import Config, load_config
from lsmstore.gc.staging import GC_PREFIX, StagedFile, _parse_staging_key
from lsmstore.graveler.apply import write_tree
from lsmstore.graveler.commit import read_commit, write_commit
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.graveler.ranges import RangePolicy
from lsmstore.graveler.record import Record, default_identity
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.graveler.tree import TreeReader
from lsmstore.refstore.base import Ref, RefStore, Repository
from lsmstore.staging.files import (
    SIDECAR_SUFFIX,
    SST_SUFFIX,
    decode_sidecar,
    encode_staging_file,
    new_file_id,
)
from lsmstore.storage.base import ObjectStore
from lsmstore.types import Commit

TINY_RANGES = RangePolicy(min_bytes=256, max_bytes=4096, raggedness=7)
T = TypeVar("T")

REPO = "repo"
BRANCH = "main"


class PlainCache:
    """A FileCacheLike with no caching: every file read is an object-store get."""

    async def get(
        self, store: ObjectStore, key: str, parse: Callable[[bytes, str], T], *, kind: str = ""
    ) -> T:
        return parse(await store.get(key), key)


async def setup_branch(
    refstore: RefStore, namespace: str = "mem://unused", repo: str = REPO, branch: str = BRANCH
) -> RefStore:
    """Create ``repo`` (storage namespace ``namespace``) with an empty branch ``branch``."""
    await refstore.create_repository(Repository(repo, namespace, branch))
    await refstore.create_ref(repo, branch, Ref("branch", ""))
    return refstore


def make_config(**overrides: Any) -> Config:
    """A Config for tests: defaults, no environment, the given settings."""
    return load_config(environ={}, **overrides)


def rec(key: bytes | str, value: bytes | str | None) -> Record:
    k = key.encode() if isinstance(key, str) else key
    if value is None:
        return Record(k, b"", None)
    v = value.encode() if isinstance(value, str) else value
    return Record(k, default_identity(v), v)


async def read_staging(
    objects: ObjectStore, branch: str, level: layout.Level, fid: str
) -> list[Record]:
    key = layout.staging_key(branch, level, fid, SST_SUFFIX)
    return list(SSTReader(await objects.get(key), key))


async def base_state(objects: ObjectStore, base: str) -> dict[bytes, bytes]:
    if not base:
        return {}
    commit = await read_commit(objects, base)
    if commit.metarange_id == EMPTY_METARANGE_ID:
        return {}
    out: dict[bytes, bytes] = {}
    async for r in TreeReader(DirectSource(objects), commit.metarange_id):
        assert r.value is not None
        out[r.key] = r.value
    return out


async def check_l2(objects: ObjectStore, branch: str, ref: Ref) -> list[list[Record]]:
    """The records of each L2 file; asserts they are sorted, non-overlapping, in key
    order, and that each sidecar matches its file."""
    files = []
    prev_last: bytes | None = None
    for fid in ref.l2:
        records = await read_staging(objects, branch, "L2", fid)
        assert records, f"L2 file {fid} is empty"
        keys = [r.key for r in records]
        assert keys == sorted(set(keys)), f"L2 file {fid} is not sorted/unique"
        if prev_last is not None:
            assert keys[0] > prev_last, f"L2 file {fid} overlaps its predecessor"
        prev_last = keys[-1]
        meta_key = layout.staging_key(branch, "L2", fid, ".meta")
        sc = decode_sidecar(await objects.get(meta_key), meta_key)
        assert (sc.first_key, sc.last_key, sc.entries) == (keys[0], keys[-1], len(keys))
        assert sc.tombstones == sum(1 for r in records if r.value is None)
        files.append(records)
    return files


async def branch_state(
    refstore: RefStore, objects: ObjectStore, repo: str, branch: str, ref: Ref | None = None
) -> dict[bytes, bytes]:
    """The live key -> value map of a branch: base, then L2, then L1 oldest to newest."""
    if ref is None:
        ref = await refstore.get_ref(repo, branch)
    state = await base_state(objects, ref.base)
    layers = await check_l2(objects, branch, ref)
    layers += await asyncio.gather(*(read_staging(objects, branch, "L1", f) for f in ref.l1))
    for records in layers:
        for r in records:
            if r.value is None:
                state.pop(r.key, None)
            else:
                state[r.key] = r.value
    return state


async def make_commit(
    objects: ObjectStore,
    state: dict[bytes, bytes],
    *,
    parent: str = "",
    policy: RangePolicy = TINY_RANGES,
) -> str:
    """Write ``state`` as a real tree and commit (parent ``parent``); the commit id."""
    records = [rec(k, state[k]) for k in sorted(state)]
    metarange = await write_tree(objects, records, policy) if records else EMPTY_METARANGE_ID
    parents: tuple[str, ...] = (parent,) if parent else ()
    gen = 1
    if parent:
        gen = (await read_commit(objects, parent)).generation + 1
    commit = Commit(metarange, parents, "test", "commit", int(time.time()), {}, gen)
    return await write_commit(objects, commit)


async def staged_files(objects: ObjectStore, branch: str | None = None) -> set[StagedFile]:
    """Staging files present in the store (of one branch, or all as (level, id))."""
    prefix = layout.STAGING if branch is None else layout.staging_prefix(branch)
    out: set[StagedFile] = set()
    async for meta in objects.list(prefix):
        parsed = _parse_staging_key(meta.key)
        if parsed is not None:
            out.add(parsed[1])
    return out


async def gc_records(objects: ObjectStore) -> list[str]:
    return [m.key async for m in objects.list(GC_PREFIX)]


def referenced(ref: Ref) -> set[StagedFile]:
    return {("L1", f) for f in ref.l1} | {("L2", f) for f in ref.l2}


async def append_l1_file(
    refstore: RefStore,
    objects: ObjectStore,
    repo: str,
    branch: str,
    records: list[Record],
    *,
    clock: Callable[[], float] = time.time,
) -> str:
    """Write ``records`` as one L1 file the way the writer does, and append it."""
    records = sorted({r.key: r for r in records}.values(), key=lambda r: r.key)
    sst, meta, _ = encode_staging_file(records, 0.01)
    fid = new_file_id(clock)
    await objects.put(layout.staging_key(branch, "L1", fid, SIDECAR_SUFFIX), meta)
    await objects.put(layout.staging_key(branch, "L1", fid, SST_SUFFIX), sst)
    await refstore.append_l1(repo, branch, fid)
    return fid


class WorkerProcess:
    """``python -m compactor ...`` (or another ``module``'s process) as a child process
    whose JSON log lines (stderr) are collected.  With ``pause`` (``STEP[:SECONDS]``) the
    worker runs through :mod:`lsmstore.testing.pause` and pauses at that step."""

    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        module: str = "compactor",
        pause: str | None = None,
    ) -> None:
        if pause is not None:
            module, args = "lsmstore.testing.pause", (module, pause, *args)
        self.module = module
        self.args = args
        self.env = {**os.environ, **(env or {})}
        self.proc: asyncio.subprocess.Process | None = None
        self.lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._reader: asyncio.Task[None] | None = None
        self._new_line = asyncio.Event()

    async def start(self) -> WorkerProcess:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            self.module,
            *self.args,
            env=self.env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.raw.append(line)
            self.lines.append(json.loads(line))  # every line must be JSON
            self._new_line.set()

    async def wait_for(self, event: str, seconds: float = 30.0) -> dict[str, Any]:
        """The first log line with ``"event": event`` (waiting up to ``seconds``)."""

        async def find() -> dict[str, Any]:
            while True:
                for doc in self.lines:
                    if doc.get("event") == event:
                        return doc
                if self._reader is not None and self._reader.done():
                    self._reader.result()
                    raise AssertionError(f"worker exited without {event!r}: {self.raw[-20:]}")
                self._new_line.clear()
                await self._new_line.wait()

        return await asyncio.wait_for(find(), seconds)

    async def wait_until(self, done: Callable[[], bool], what: str, seconds: float = 300.0) -> None:
        """Wait (on new log lines) until ``done()`` is true."""

        async def poll() -> None:
            while not done():
                if self._reader is not None and self._reader.done():
                    self._reader.result()
                    if done():
                        return
                    raise AssertionError(f"worker exited before {what}: {self.raw[-20:]}")
                self._new_line.clear()
                await self._new_line.wait()

        await asyncio.wait_for(poll(), seconds)

    def count(self, event: str) -> int:
        return sum(1 for d in self.lines if d.get("event") == event)

    async def wait(self, seconds: float = 60.0) -> int:
        """Wait for the process to exit; its status."""
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), seconds)
        if self._reader is not None:
            await self._reader
        return code

    def events(self, event: str) -> list[dict[str, Any]]:
        return [d for d in self.lines if d.get("event") == event]
