"""The object layer: uploads, link_many beside put_many, warm stat_object, memory.

``python -m bench objects [--only uploads|links|prep|stats] [--stores local,s3]
[--small 10000] [--small-bytes 4096] [--large 20] [--large-bytes 64MiB] [--tasks 64]
[--links 50000] [--batch 10000] [--rounds 3] [--callers 1] [--prep 10000]
[--stats 20000] [--seconds 2] [--dir DIR]``

Everything goes through the public API (``lsmstore.connect`` -> ``Branch``), on the
embedded RefStore (``batch_interval_ms`` 10, compaction in process):

* **upload, small**: ``--small`` objects of ``--small-bytes`` from ``--tasks`` concurrent
  tasks (each ``Branch.upload(path, bytes)``: data object written, then the entry
  staged and acknowledged);
* **upload, large**: ``--large`` objects of ``--large-bytes``, one at a time, each from a
  file on local disk (``Branch.upload(path, Path)``); on S3 a multipart upload of
  8 MiB parts.  Each data object is deleted after its upload (outside the timing) so
  moto's memory stays small.  The **memory high-water mark** of these uploads is
  tracemalloc's peak of Python allocations during one upload (moto runs in its own
  process, so none of its memory counts), beside the part size;
* **link_many beside put_many**: ``--rounds`` alternating rounds, each of
  ``--links`` records in ``--batch``-record calls (made one after another, or by
  ``--callers`` concurrent tasks): ``put_many`` of 150-byte values
  (default identities) to one prefix, ``link_many`` of links without metadata given
  as tuples ``(path, address, size, checksum)`` to another, and as ``ObjectLink`` objects
  to a third, on one branch (each call's list built in the timed loop, as a caller
  would); records/s (median of the rounds), the event-loop thread's
  CPU per record and the staging encoder's worker process's CPU per record (Linux:
  ``/proc``; the work moved off the loop, to show it did not vanish);
* **preparation**: the event loop's CPU per record of one call of ``--prep`` records
  with the branch's writer replaced by a no-op -- ``link_many`` (tuples, ObjectLinks),
  ``put_many`` and the
  server's batch endpoint (``apply()`` of ``link`` entries): the caller's side alone,
  robust to a loaded machine; beside it the CPU of building the call's list of tuples
  or of ObjectLinks, and of making ``--prep`` link entries as the encoder's worker
  does, a block at a time and entry by entry;
* **stat_object, warm**: ``--stats`` objects linked and committed half, staged half;
  random ``stat_object`` calls from 100 tasks for ``--seconds``, beside raw ``get`` of
  the same keys in the same run (every key read once first).

``--only`` runs one of the four parts (``links``: just ``put_many`` beside
``link_many``).

Stores: ``local`` is a ``file://`` namespace in ``--dir`` (default a temp dir);
``s3`` is moto's S3 server started as its own process on 127.0.0.1.  Prints a Markdown
table with the load average at the start and the end: the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import uvloop

import lsmstore
from lsmstore.config import parse_size
from lsmstore.testing.servers import MOTO_ENV, free_port, wait_listening
from lsmstore.types import ObjectLink

STAT_TASKS = 100
TUPLES = "link_many, tuples"
OBJECT_LINKS = "link_many, ObjectLinks"
BUILD_TUPLES = "building link tuples (the caller's list)"
BUILD_LINKS = "building ObjectLinks (the caller's list)"
PART_SIZE = 8 << 20


@contextlib.contextmanager
def moto_process() -> Iterator[str]:
    """moto's S3 server in its own process; yields its endpoint."""
    port = free_port()
    env = {**os.environ, **MOTO_ENV}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


async def s3_namespace(endpoint: str, name: str) -> str:
    from aiobotocore.session import get_session

    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    for k, v in MOTO_ENV.items():
        os.environ.setdefault(k, v)
    async with get_session().create_client(
        "s3", endpoint_url=endpoint, region_name="us-east-1"
    ) as client:
        await client.create_bucket(Bucket=bucket)
    return f"s3://{bucket}/{name}?endpoint_url={endpoint}&part_size={PART_SIZE}"


async def upload_small(branch: lsmstore.Branch, n: int, size: int, tasks: int) -> float:
    payloads = [random.Random(i).randbytes(size) for i in range(64)]
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            await branch.upload(f"small/{i:07d}", payloads[i % 64])

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return n / (time.perf_counter() - start)


async def upload_large(
    repo: lsmstore.Repository, n: int, size: int, work: Path
) -> tuple[float, int]:
    """MB/s of ``n`` sequential uploads from a file, and the tracemalloc peak (bytes)
    of one more upload."""
    branch = repo.branch()
    src = work / "large.bin"

    def write_source() -> None:
        with open(src, "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(size >> 20):
                f.write(block)
            f.write(block[: size & ((1 << 20) - 1)])

    await asyncio.to_thread(write_source)
    base = len(repo.objects.url.rstrip("/")) + 1
    elapsed = 0.0
    for i in range(n):
        start = time.perf_counter()
        stats = await branch.upload(f"large/{i:03d}", src)
        elapsed += time.perf_counter() - start
        await repo.objects.delete(stats.physical_address[base:])
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        stats = await branch.upload("large/traced", src)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    await repo.objects.delete(stats.physical_address[base:])
    src.unlink()
    return n * size / elapsed / 1e6, peak


def worker_cpu(store: lsmstore.Store) -> float:
    """CPU seconds of the store's staging encoder worker process so far (0 without one,
    or off Linux): the scheduler's nanosecond counts of its threads (``schedstat``)
    where the kernel keeps them, else user + system clock ticks (10 ms each, i.e.
    +-0.2 us a record over 50,000)."""
    proc = store.encoder._proc
    if proc is None:
        return 0.0
    try:
        ns = 0
        for task in os.listdir(f"/proc/{proc.pid}/task"):
            with open(f"/proc/{proc.pid}/task/{task}/schedstat") as f:
                ns += int(f.read().split()[0])
        return ns / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def links_vs_puts(
    repo: lsmstore.Repository, n: int, batch: int, rounds: int, callers: int = 1
) -> dict[str, tuple[float, float, float]]:
    """name -> (median records/s, event-loop CPU us per record, encoder worker CPU us
    per record); ``callers`` tasks make the calls concurrently (1: one after another)."""
    branch = repo.branch()
    base = repo.objects.url.rstrip("/")
    value = os.urandom(150)
    store = repo.store
    names = ("put_many", TUPLES, OBJECT_LINKS)
    rates: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}
    wcpu: dict[str, list[float]] = {k: [] for k in names}
    etag = "d41d8cd98f00b204e9800998ecf8427e"

    async def caller(name: str, r: int, starts: Iterator[int]) -> None:
        for b in starts:
            if name == "put_many":
                await branch.put_many(
                    [(f"puts/{r}/{i:08d}", value) for i in range(b, min(n, b + batch))]
                )
            elif name == TUPLES:
                await branch.link_many(
                    [(f"tuples/{r}/{i:08d}", f"{base}/data/t-{r}-{i:08d}", 4096, etag)
                     for i in range(b, min(n, b + batch))]
                )  # fmt: skip
            else:
                await branch.link_many(
                    [ObjectLink(f"links/{r}/{i:08d}", f"{base}/data/part-{r}-{i:08d}", 4096, etag)
                     for i in range(b, min(n, b + batch))]
                )  # fmt: skip

    for i in range(100):  # until the encoder's worker process is up: rounds measure it
        if store.encoder.batches_in_process:
            break
        await branch.put_many([(f"warm/{i}/{j:04d}", value) for j in range(1000)])
        await asyncio.sleep(0.05)
    for r in range(rounds):
        for name in names:
            w0 = worker_cpu(store)
            t_cpu, t0 = time.thread_time(), time.perf_counter()
            starts = iter(range(0, n, batch))
            await asyncio.gather(*(caller(name, r, starts) for _ in range(callers)))
            rates[name].append(n / (time.perf_counter() - t0))
            cpu[name].append((time.thread_time() - t_cpu) / n * 1e6)
            wcpu[name].append((worker_cpu(store) - w0) / n * 1e6)
    return {
        k: (statistics.median(rates[k]), statistics.median(cpu[k]), statistics.median(wcpu[k]))
        for k in rates
    }


async def preparation(repo: lsmstore.Repository, n: int, rounds: int) -> dict[str, float]:
    """name -> event-loop CPU us per record of a call's own work, the branch's writer
    replaced by a no-op (nothing is staged; min of ``rounds`` rounds, a full collection
    before each): ``link_many``, ``put_many`` and the server's batch endpoint
    (its ``WriteBatch`` of ``link`` entries built and applied)."""
    from lsmstore.server.batch import build

    async def apply(branch: Any, entries: list[Any], json_body: bool) -> int:
        return await (await build(branch, entries, json_body, False)).apply()

    branch = repo.branch()
    base = repo.objects.url.rstrip("/")
    value = os.urandom(150)
    writer = branch.writer()

    async def nothing(records: Any, *known: Any) -> None:
        pass

    for name in ("write_many", "write_staged"):
        setattr(writer, name, nothing)
    best: dict[str, float] = {}
    etag = "d41d8cd98f00b204e9800998ecf8427e"

    def built(name: str, make: Callable[[], list[Any]]) -> list[Any]:
        gc.collect()
        t = time.thread_time()
        made = make()
        cpu = (time.thread_time() - t) / n * 1e6
        best[name] = min(best.get(name, cpu), cpu)
        return made

    try:
        for r in range(rounds):
            links = built(BUILD_LINKS, lambda r=r: [
                ObjectLink(f"p/{r}/{i:08d}", f"{base}/data/p{r}-{i:08d}", 4096, etag)
                for i in range(n)])  # fmt: skip
            tuples = built(BUILD_TUPLES, lambda r=r: [
                (f"t/{r}/{i:08d}", f"{base}/data/t{r}-{i:08d}", 4096, etag)
                for i in range(n)])  # fmt: skip
            puts = [(f"p/{r}/{i:08d}", value) for i in range(n)]
            entries = [["link", f"b/{r}/{i:08d}", f"{base}/data/b{r}-{i:08d}", 4096, etag]
                       for i in range(n)]  # fmt: skip
            calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                (TUPLES, functools.partial(branch.link_many, tuples)),
                (OBJECT_LINKS, functools.partial(branch.link_many, links)),
                ("put_many", functools.partial(branch.put_many, puts)),
                ("batch endpoint, link entries", functools.partial(apply, branch, entries, False)),
            ]
            for name, call in calls:
                gc.collect()
                t = time.thread_time()
                await call()
                cpu = (time.thread_time() - t) / n * 1e6
                best[name] = min(best.get(name, cpu), cpu)
    finally:
        for name in ("write_many", "write_staged"):
            with contextlib.suppress(AttributeError):
                delattr(writer, name)
    return best


def entry_making(n: int, rounds: int) -> dict[str, float]:
    """name -> CPU us per entry (min of ``rounds``) of making ``n`` link entries'
    identities and graveler values, as the encoder's worker does: a block at a time
    (``BatchEncoder.encode_values_many``) against entry by entry (``encode_many`` then
    ``encode_values``), with one size and with sizes of several varint lengths."""
    from lsmstore.graveler.value import encode_values
    from lsmstore.objects.entry import DEFAULT_CONTENT_TYPE, AddressType, BatchEncoder

    enc = BatchEncoder(1_700_000_000, 5, int(AddressType.RELATIVE), DEFAULT_CONTENT_TYPE)
    rng = random.Random(1)
    addresses = [f"data/t-0-{i:08d}" for i in range(n)]
    etags = [f"{rng.getrandbits(128):032x}" for _ in range(n)]

    def by_entries(sizes: list[int]) -> None:
        identities, data = enc.encode_many(addresses, sizes, etags)
        encode_values(identities, data)

    best: dict[str, float] = {}
    varied = [rng.randrange(1, 1 << 30) for _ in range(n)]
    for label, sizes in (("one size", [4096] * n), ("sizes of 1 B-1 GiB", varied)):
        for how, make in (("a block at a time", functools.partial(enc.encode_values_many,
                                                                  addresses, sizes, etags)),
                          ("entry by entry", functools.partial(by_entries, sizes))):  # fmt: skip
            name = f"link entries made {how}, {label}"
            for _ in range(rounds):
                t = time.thread_time()  # the worker's thread (numpy starts idle ones)
                make()
                cpu = (time.thread_time() - t) / n * 1e6
                best[name] = min(best.get(name, cpu), cpu)
    return best


async def stats_vs_gets(repo: lsmstore.Repository, n: int, seconds: float) -> dict[str, float]:
    branch = repo.branch()
    base = repo.objects.url.rstrip("/")
    half = n // 2
    links = [ObjectLink(f"stat/{i:08d}", f"{base}/data/s{i}", i, "etag") for i in range(n)]
    await branch.link_many(links[:half])
    await branch.commit("half")
    await branch.link_many(links[half:])
    paths = [link.path for link in links]
    for p in paths:  # warm
        await branch.stat_object(p)
    out: dict[str, float] = {}

    async def worker(name: str, rng: random.Random, deadline: float) -> int:
        done = 0
        while time.perf_counter() < deadline:
            p = paths[rng.randrange(n)]
            if name == "stat_object":
                await branch.stat_object(p)
            else:
                await branch.get(p)
            done += 1
        return done

    for name in ("stat_object", "get"):
        rng = random.Random(1)
        start = time.perf_counter()
        counts = await asyncio.gather(
            *(worker(name, rng, start + seconds) for _ in range(STAT_TASKS))
        )
        out[name] = sum(counts) / (time.perf_counter() - start)
    return out


async def amain(args: argparse.Namespace) -> None:
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-objects-"))
    load0 = os.getloadavg()
    print(f"# objects benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"nproc={os.cpu_count()}, load {load0[0]:.1f}")  # fmt: skip
    rows: list[tuple[str, str]] = []
    stack = contextlib.ExitStack()
    try:
        async with lsmstore.connect(home=str(work / "home"), batch_interval_ms=10) as store:
            for kind in filter(None, args.stores.split(",")):
                if kind == "local":
                    ns = (work / "ns-local").as_uri()
                else:
                    endpoint = stack.enter_context(moto_process())
                    ns = await s3_namespace(endpoint, "repo")
                repo = await store.create_repository(f"bench-{kind}", storage_namespace=ns)
                if args.small:
                    rate = await upload_small(
                        repo.branch(), args.small, args.small_bytes, args.tasks
                    )
                    rows.append((f"{kind}: upload {args.small} x {args.small_bytes} B, "
                                 f"{args.tasks} tasks", f"{rate:,.0f} objects/s"))  # fmt: skip
                if args.large:
                    mbs, peak = await upload_large(repo, args.large, args.large_bytes, work)
                    rows.append((f"{kind}: upload {args.large} x {args.large_bytes >> 20} MiB "
                                 "from a file, one at a time", f"{mbs:,.0f} MB/s"))  # fmt: skip
                    rows.append((f"{kind}: memory high-water of one "
                                 f"{args.large_bytes >> 20} MiB upload (tracemalloc peak)",
                                 f"{peak / 2**20:.1f} MiB (part size "
                                 f"{PART_SIZE >> 20 if kind == 's3' else 1} MiB)"))  # fmt: skip
            repo = await store.create_repository(
                "bench-links", storage_namespace=(work / "ns-links").as_uri()
            )
            if args.links:
                res = await links_vs_puts(repo, args.links, args.batch, args.rounds, args.callers)
                for name, (rate, cpu, wcpu) in res.items():
                    rows.append((f"{name}: {args.links} records in calls of {args.batch}, "
                                 f"{args.callers} caller(s), median of {args.rounds} rounds",
                                 f"{rate:,.0f} records/s, {cpu:.2f} us loop CPU/rec, "
                                 f"{wcpu:.2f} us encoder worker CPU/rec"))  # fmt: skip
                for name in (TUPLES, OBJECT_LINKS):
                    ratio = res[name][0] / res["put_many"][0]
                    rows.append((f"{name} / put_many records/s", f"{ratio:.2f}"))
            if args.prep:
                prep_repo = await store.create_repository(
                    "bench-prep", storage_namespace=(work / "ns-prep").as_uri()
                )
                for name, cpu in (await preparation(prep_repo, args.prep, 7)).items():
                    what = "" if name.startswith("building") else " the call's own"
                    rows.append((f"{name}:{what} loop CPU, writer stubbed, "
                                 f"{args.prep} records, min of 7",
                                 f"{cpu:.2f} us/rec"))  # fmt: skip
                for name, cpu in entry_making(args.prep, 7).items():
                    rows.append((f"{name}: CPU, {args.prep} entries, min of 7",
                                 f"{cpu:.2f} us/entry"))  # fmt: skip
            if args.stats:
                res2 = await stats_vs_gets(repo, args.stats, args.seconds)
                for name, rate in res2.items():
                    rows.append((f"{name}, warm, {STAT_TASKS} tasks, {args.stats} paths "
                                 "(half committed, half staged)", f"{rate:,.0f} /s"))  # fmt: skip
    finally:
        stack.close()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print("\n| measure | result |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    print(f"\nload average: start {load0[0]:.1f}, end {os.getloadavg()[0]:.1f}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench objects")
    p.add_argument("--only", choices=("uploads", "links", "prep", "stats"), default=None)
    p.add_argument("--stores", default="local,s3")
    p.add_argument("--small", type=int, default=10_000)
    p.add_argument("--small-bytes", type=lambda v: parse_size(v), default=4096)
    p.add_argument("--large", type=int, default=20)
    p.add_argument("--large-bytes", type=lambda v: parse_size(v), default=64 << 20)
    p.add_argument("--tasks", type=int, default=64)
    p.add_argument("--links", type=int, default=50_000)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--callers", type=int, default=1)
    p.add_argument("--prep", type=int, default=10_000)
    p.add_argument("--stats", type=int, default=20_000)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--dir", default="")
    args: Any = p.parse_args(argv)
    if args.only is not None:  # the other parts run nothing
        if args.only != "uploads":
            args.stores, args.small, args.large = "", 0, 0
        if args.only != "links":
            args.links = 0
        if args.only != "prep":
            args.prep = 0
        if args.only != "stats":
            args.stats = 0
    uvloop.run(amain(args))
    return 0
