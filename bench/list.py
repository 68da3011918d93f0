"""Listing under staged deletes: the first page of a prefix whose keys are nearly all deleted.

``python -m bench list [--deletes 1000000] [--rounds 5] [--warm 20] [--peer-warm 2]
[--dir DIR]``

A base of ``--deletes + 5`` keys (bench.commit's keys and values, the production range
policy) is committed to a local object store under ``--dir`` (kept between runs).  A
fresh branch on it stages a tombstone for every key but the last 5, written as L1 files
of 100,000 records, then compacted into L2 by a :class:`CompactionJob` (timed: it finds
the covered spans, lsmstore.compaction.coverage).  The peer is a second branch holding
the same L2 files with their sidecars rewritten without spans -- what a reader walked
before spans existed (and what it still walks over another base).

For both branches, alternately, ``--rounds`` times: **cold** -- a new
:class:`lsmstore.client.Store` (empty file and sidecar caches; the files are on the
local disk, so the OS's page cache is warm) times its first ``list(prefix, limit=1)``:
the ref, the sidecars, the commit, the metarange, the range and the staging files a
page needs; **warm** -- the same call ``--warm`` times more on that store (median;
``--peer-warm`` times for the peer, whose calls take seconds).  Then the same through
the REST API (``GET .../refs/<branch>/objects/ls?prefix=...&amount=1``): a server
process (``python -m lsmstore.server`` on the same home, embedded RefStore) started
afresh for each cold call, then the warm calls on it; and the first page of the
branch's uncommitted diff (``GET .../branches/<branch>/diff?amount=1000``, warm).  And
through the S3 gateway (``ListObjectsV2`` of ``<branch>/<prefix>`` with ``max-keys=1``,
boto3, path style), on a server process of its own started afresh for each cold call.
Printed as a Markdown table with the date, nproc and load average.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import httpx
import uvloop
from botocore.config import Config as BotoConfig

from bench.commit import REPO, build_base, key
from lsmstore import layout
from lsmstore.client import Store
from lsmstore.compaction.coverage import Coverage
from lsmstore.compaction.job import CompactionJob
from lsmstore.config import load_config
from lsmstore.graveler.record import Record
from lsmstore.refstore.base import Ref, RefStore, Repository
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.staging.files import SIDECAR_SUFFIX, SST_SUFFIX, decode_sidecar, encode_sidecar
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.storage.local import LocalStore
from lsmstore.testing.compaction import append_l1_file
from lsmstore.testing.server_process import ServerProcess, start_server

PREFIX = b"tables/events/"
L1_RECORDS = 100_000
LIVE = 5


async def stage_deletes(rs: RefStore, store: ObjectStore, branch: str, n: int) -> None:
    for lo in range(0, n, L1_RECORDS):
        tombstones = [Record(key(i), b"", None) for i in range(lo, min(n, lo + L1_RECORDS))]
        await append_l1_file(rs, store, REPO, branch, tombstones)


async def without_spans(
    rs: RefStore, store: ObjectStore, ref: Ref, source: str, branch: str
) -> None:
    """``branch``: the L2 files of ``ref`` (``source``'s, copied) with sidecars that name
    no span."""
    for fid in ref.l2:
        src = layout.staging_key(source, "L2", fid, "")
        sst = await store.get(src + SST_SUFFIX)
        sc = decode_sidecar(await store.get(src + SIDECAR_SUFFIX))
        plain = encode_sidecar(dataclasses.replace(sc, base="", covered=()))
        dst = layout.staging_key(branch, "L2", fid, "")
        await store.put(dst + SST_SUFFIX, sst, PutMode.CREATE)
        await store.put(dst + SIDECAR_SUFFIX, plain, PutMode.CREATE)
    await rs.create_ref(REPO, branch, Ref("branch", ref.base, ref.l2))


async def first_page(store: Store, branch: str) -> tuple[float, list[bytes]]:
    b = (await store.get_repository(REPO)).branch(branch)
    t = time.perf_counter()
    keys = [e.key async for e in b.list(PREFIX, limit=1)]
    return time.perf_counter() - t, keys


def objects_dir(root: Path) -> Path:
    """Where namespace ``local://bench`` lives under the home ``root / "home"``."""
    return root / "home" / "data" / "bench"


async def measure(root: Path, branch: str, warm: int) -> tuple[float, float, list[bytes]]:
    home = root / "home"
    config = load_config(environ={}, home=str(home), compaction_in_process="off")
    store = Store(config, open_objects=lambda url: LocalStore(objects_dir(root)))
    try:
        cold, keys = await first_page(store, branch)
        times = [(await first_page(store, branch))[0] for _ in range(warm)]
    finally:
        await store.aclose()
    return cold, statistics.median(times), keys


async def run(args: argparse.Namespace) -> None:
    root = Path(args.dir)
    objects_dir(root).mkdir(parents=True, exist_ok=True)  # no task runs yet
    store = LocalStore(objects_dir(root))
    rs = EmbeddedRefStore(root / "home" / "refs", synchronous="NORMAL")
    n = args.deletes + LIVE
    try:
        try:
            await rs.get_repository(REPO)
        except KeyError:
            await rs.create_repository(Repository(REPO, "local://bench", "main"))
        marker = root / f"base-{n}.txt"
        if marker.exists():
            base = marker.read_text().split()[0]
        else:
            base, ranges, secs = await build_base(store, n)
            marker.write_text(f"{base} {ranges}")
            print(f"base of {n:,} keys built in {secs:.1f} s ({ranges} ranges)", flush=True)
        salt = os.urandom(4).hex()
        spans, plain = f"spans-{salt}", f"plain-{salt}"
        await rs.create_ref(REPO, spans, Ref("branch", base))
        t = time.perf_counter()
        await stage_deletes(rs, store, spans, args.deletes)
        staged = time.perf_counter() - t
        config = load_config(environ={}, compaction_job_files=1000, compaction_in_process="off")
        t = time.perf_counter()
        result = await CompactionJob(rs, store, REPO, spans, config).run()
        compacted = time.perf_counter() - t
        assert result.outcome == "compacted", result
        ref = await rs.get_ref(REPO, spans)
        await without_spans(rs, store, ref, spans, plain)
        covered = 0
        for fid in ref.l2:
            sc = decode_sidecar(
                await store.get(layout.staging_key(spans, "L2", fid, SIDECAR_SUFFIX))
            )
            covered += len(sc.covered)
        # what finding the spans cost the job: the same pass again over its outputs
        cover = Coverage(store, base)
        t = time.perf_counter()
        for fid in ref.l2:
            name = layout.staging_key(plain, "L2", fid, "")
            await cover.cover(
                await store.get(name + SST_SUFFIX), await store.get(name + SIDECAR_SUFFIX), name
            )
        spans_s = time.perf_counter() - t
        print(
            f"{args.deletes:,} deletes staged in {staged:.1f} s, compacted in {compacted:.1f} s "
            f"into {len(ref.l2)} L2 files, {covered} covered spans (finding them: "
            f"{spans_s:.1f} s of it, measured again; load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    finally:
        await rs.aclose()
        await store.aclose()
    results: dict[str, list[tuple[float, float]]] = {spans: [], plain: []}
    for _ in range(args.rounds):
        for b in (plain, spans):
            calls = args.warm if b == spans else args.peer_warm
            cold, warm, keys = await measure(root, b, calls)
            assert keys == [key(args.deletes)], keys
            results[b].append((cold, warm))
            print(
                f"  {b}: cold {cold * 1e3:.1f} ms, warm {warm * 1e3:.2f} ms "
                f"(load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    rest = await asyncio.to_thread(measure_rest, root, (plain, spans), args)
    gateway = await asyncio.to_thread(measure_gateway, root, (plain, spans), args)
    print()
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, nproc={os.cpu_count()}, load average "
        f"{os.getloadavg()[0]:.1f}; {args.deletes:,} staged deletes over {n:,} committed keys, "
        f"first page of `list({PREFIX.decode()!r}, limit=1)`, local store; median of "
        f"{args.rounds} rounds (cold) and of {args.warm} calls per round (warm; "
        f"{args.peer_warm} for the peer)"
    )
    print()
    _cold_warm_table("library, L2 sidecars", results, plain, spans)
    print()
    _cold_warm_table("S3 gateway `ListObjectsV2`, L2 sidecars", gateway, plain, spans)
    print()
    print(
        "| REST API, L2 sidecars | `objects/ls` cold ms (median) | warm ms (median) "
        "| `diff` first page warm ms (median) |"
    )
    print("|---|---:|---:|---:|")
    for label, b in (("without spans (peer)", plain), ("with covered spans", spans)):
        colds = [c for c, _, _ in rest[b]]
        warms = [w for _, w, _ in rest[b]]
        diffs = [d for _, _, d in rest[b]]
        print(
            f"| {label} | {statistics.median(colds) * 1e3:.1f} "
            f"| {statistics.median(warms) * 1e3:.2f} | {statistics.median(diffs) * 1e3:.1f} |"
        )


def _cold_warm_table(
    title: str, results: dict[str, list[tuple[float, float]]], plain: str, spans: str
) -> None:
    print(f"| {title} | cold ms (median) | cold ms (best) | warm ms (median) |")
    print("|---|---:|---:|---:|")
    for label, b in (("without spans (peer)", plain), ("with covered spans", spans)):
        colds = [c for c, _ in results[b]]
        warms = [w for _, w in results[b]]
        print(
            f"| {label} | {statistics.median(colds) * 1e3:.1f} | {min(colds) * 1e3:.1f} "
            f"| {statistics.median(warms) * 1e3:.2f} |"
        )


def _admin(root: Path) -> tuple[str, str] | None:
    admin_file = root / "admin.txt"
    if not admin_file.exists():
        return None
    key_id, secret = admin_file.read_text().split()
    return key_id, secret


def _started(root: Path) -> ServerProcess:
    """A fresh server process on the bench's home; its admin key kept for the next one."""
    admin = _admin(root)
    server = start_server(root / "home", admin=admin)
    if admin is None:
        admin_file = root / "admin.txt"
        admin_file.write_text(" ".join(server.admin))
        admin_file.chmod(0o600)
    return server


def _timed(call: Callable[..., object], *args: object) -> float:
    t = time.perf_counter()
    call(*args)
    return time.perf_counter() - t


def measure_rest(
    root: Path, branches: tuple[str, str], args: argparse.Namespace
) -> dict[str, list[tuple[float, float, float]]]:
    """Per branch and round: (cold ls, median warm ls, median warm diff page) seconds."""
    out: dict[str, list[tuple[float, float, float]]] = {b: [] for b in branches}
    params: dict[str, str | int] = {"prefix": PREFIX.decode(), "amount": 1}
    for _ in range(args.rounds):
        for b in branches:
            server = _started(root)
            try:
                with httpx.Client(base_url=server.api, auth=server.admin, timeout=600) as c:

                    def get(url: str, q: dict[str, str | int], c: httpx.Client = c) -> None:
                        r = c.get(url, params=q)
                        assert r.status_code == 200, r.text

                    ls = f"/repositories/{REPO}/refs/{b}/objects/ls"
                    cold = _timed(get, ls, params)
                    calls = args.warm if b == branches[1] else args.peer_warm
                    warm = statistics.median(_timed(get, ls, params) for _ in range(calls))
                    diff = f"/repositories/{REPO}/branches/{b}/diff"
                    page = statistics.median(
                        _timed(get, diff, {"amount": 1000}) for _ in range(max(1, args.peer_warm))
                    )
            finally:
                server.stop()
            out[b].append((cold, warm, page))
            print(
                f"  REST {b}: cold {cold * 1e3:.1f} ms, warm {warm * 1e3:.2f} ms, "
                f"diff page {page * 1e3:.1f} ms (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    return out


def measure_gateway(
    root: Path, branches: tuple[str, str], args: argparse.Namespace
) -> dict[str, list[tuple[float, float]]]:
    """Per branch and round: (cold, median warm) seconds of ListObjectsV2 ``max-keys=1``."""
    out: dict[str, list[tuple[float, float]]] = {b: [] for b in branches}
    expected = f"{key(args.deletes).decode()}"
    for _ in range(args.rounds):
        for b in branches:
            server = _started(root)
            try:
                s3 = boto3.client(
                    "s3", endpoint_url=server.url, region_name="us-east-1",
                    aws_access_key_id=server.admin[0], aws_secret_access_key=server.admin[1],
                    config=BotoConfig(s3={"addressing_style": "path"}, read_timeout=600),
                )  # fmt: skip

                def page(b: str, s3: Any) -> None:
                    r = s3.list_objects_v2(Bucket=REPO, Prefix=f"{b}/{PREFIX.decode()}", MaxKeys=1)
                    keys = [o["Key"] for o in r.get("Contents", [])]
                    assert keys == [f"{b}/{expected}"], keys

                cold = _timed(page, b, s3)
                calls = args.warm if b == branches[1] else args.peer_warm
                warm = statistics.median(_timed(page, b, s3) for _ in range(calls))
                s3.close()
            finally:
                server.stop()
            out[b].append((cold, warm))
            print(
                f"  S3 gateway {b}: cold {cold * 1e3:.1f} ms, warm {warm * 1e3:.2f} ms "
                f"(load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench list")
    parser.add_argument("--deletes", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--peer-warm", type=int, default=2)
    parser.add_argument("--dir", default="/tmp/lsmstore-bench-list")
    args = parser.parse_args(argv)
    uvloop.run(run(args))
    return 0
