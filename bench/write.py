"""The write path and the read path end to end, beside SlateDB in the same run.

``python -m bench write [--seconds 2] [--systems redis,embedded,slatedb]
[--compaction off,on] [--keys 60000] [--batch 10000] [--measures ...] [--rate R]
[--encoder process|thread] [--dir DIR]`` (``./dev.sh bench write`` runs the defaults,
about 80 s on 2 cores; ``--seconds 1 --keys 30000`` about 45 s).

Every figure goes through the public API (``lsmstore.connect`` -> ``Branch``), with
N = 10 ms (``batch_interval_ms``), 40-byte keys and 150-byte values (1,024 distinct
values cycled; identities are their SHA-256), on the local-file object store:

* ``redis``: RefStore on a private ``redis-server`` (loopback);
* ``embedded``: the embedded default (SQLite RefStore, ``synchronous=FULL``);
* ``slatedb``: SlateDB's Python binding (``slatedb==0.17.0``) on a local-file object
  store, ``flush_interval`` 10 ms, each put awaited with ``await_durable()``.

Each lsmstore system runs once per ``--compaction`` mode, ``compaction_in_process`` set
explicitly: ``on`` runs the compactor as a task of the client's event loop; ``off``
runs the compactor worker (``python -m compactor --interval 0.25``) as its own process
beside the client, as a deployment would (without any compactor, L1 would pass its
soft limit within a second and slow the writer down).  Measures, in this order, each
for ``--seconds`` (bounded loops: every loop also has a count limit):

* acknowledged (durable) puts/s from 1, 100 and 1,000 concurrent tasks, each task
  writing unique keys (a fresh branch per measure, so L1 starts empty);
* ack latency p50/p99/p99.9 at half the 1,000-task rate (or ``--rate``), open loop: a
  scheduler issues puts at that fixed rate (every ms, each put due by then, as a task)
  and latency is counted from each put's scheduled time, so a stalled loop shows as
  latency.  It runs right after the 1,000-task burst, so the compactor is still
  working through that branch;
* records/s of ``put_many`` (SlateDB: ``WriteBatch``) with ``--batch`` records per call
  from 4 tasks;
* random gets/s with a warm cache from 100 tasks over ``--keys`` keys, interleaved
  across layers: key i lives in the committed base (i % 3 == 0), in compacted L2 files
  (i % 3 == 1), or in one of 6 L1 files (i % 3 == 2); every file's key range spans
  the whole key space, so a get of a base key tests every L1 and L2 sidecar first.
  Every key is read once before the timed reads.  SlateDB holds the same keys,
  written in ``WriteBatch``es and flushed from its memtable (L0 SSTs);
* a listing of 10,000 keys (the first 10,000 of the get keys, across all layers).

Besides the rates, CPU time per operation: of the event-loop thread, and of the whole
process (its threads included; not the encoder's or compactor's own processes).
Prints a Markdown table with the load average at the start and at the end (the
machine may be shared: other processes' CPU shows in every figure).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import platform
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvloop

import lsmstore
from lsmstore.client import Branch, Store
from lsmstore.config import load_config
from lsmstore.gcfreeze import freeze_startup_state
from lsmstore.staging.writer import FlushTrace
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store
from lsmstore.testing.faulty_store import OPS, FaultyStore
from lsmstore.testing.servers import RedisServer

KEY_BYTES = 40
VALUE_BYTES = 150
READ_TASKS = 100
LIST_KEYS = 10_000
L1_FILES = 6
#: Tasks calling put_many (WriteBatch) at once.
BATCH_TASKS = 4
#: Seconds between the passes of the compactor process that runs beside the writers
#: when ``compaction_in_process`` is off.
COMPACTOR_INTERVAL_S = 0.25
MEASURES = ("puts1", "puts100", "puts1000", "batch", "latency", "gets", "list")
#: Upper bound of puts per task in one measure (the duration ends it first).
MAX_OPS_PER_TASK = 1_000_000
#: open-loop label -> its (scheduled time, latency) points, for the plots
TIMELINES: dict[str, list[tuple[float, float]]] = {}


def make_values(n: int = 1024) -> list[bytes]:
    rng = random.Random(7)
    return [rng.randbytes(VALUE_BYTES) for _ in range(n)]


VALUES = make_values()


def key_of(prefix: str, i: int) -> bytes:
    """A 40-byte key: ``prefix`` then a zero-padded number."""
    return b"%s/%0*d" % (prefix.encode(), KEY_BYTES - len(prefix) - 1, i)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Result:
    name: str
    puts: dict[int, float] = field(default_factory=dict)  # tasks -> puts/s
    batch_rate: float = 0.0
    lat_rate: float = 0.0
    lat: tuple[float, float, float] = (0.0, 0.0, 0.0)  # ms
    lat_done: str = ""
    gets: float = 0.0
    list_ms: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: measure -> (CPU us per op of the event-loop thread, of the whole process)
    cpu: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: measure -> Probe.summary()
    probes: dict[str, str] = field(default_factory=dict)
    #: open-loop latency over time (right after the burst: compaction running)
    timeline: list[tuple[float, float]] = field(default_factory=list)
    #: the knee: (offered puts/s, p50, p99, p99.9 ms, achieved puts/s)
    knee: list[tuple[float, float, float, float, float]] = field(default_factory=list)


class Probe:
    """What the event loop and the garbage collector did during a measure: the lag of a
    1 ms ticker task (how late it woke: a stalled loop shows here) and CPython's
    collections by generation (count, longest pause, total pause)."""

    def __init__(self) -> None:
        self.lags: list[float] = []  # ms
        self.gc: dict[int, list[float]] = {0: [], 1: [], 2: []}  # generation -> pauses (ms)
        self.gc_cpu: list[float] = []  # CPU ms of each full collection (robust to load)
        self.young_cpu = 0.0  # CPU ms of the generation 0 and 1 collections, in all
        self._t_gc = self._cpu_gc = 0.0
        self._task: asyncio.Task[None] | None = None

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t_gc, self._cpu_gc = time.perf_counter(), time.thread_time()
        else:
            self.gc[info["generation"]].append((time.perf_counter() - self._t_gc) * 1000)
            if info["generation"] == 2:
                self.gc_cpu.append((time.thread_time() - self._cpu_gc) * 1000)
            else:
                self.young_cpu += (time.thread_time() - self._cpu_gc) * 1000

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(0.001)
            self.lags.append((loop.time() - t - 0.001) * 1000)

    async def __aenter__(self) -> Probe:
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on_gc)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def summary(self) -> str:
        full = self.gc[2]
        rss = _rss_mib()
        return (
            f"client RSS now {rss[0]:.0f} MiB, peak {rss[1]:.0f} MiB; "
            f"loop lag p99 {pct(self.lags, 0.99):.1f} / max {max(self.lags, default=0):.1f} ms; "
            f"gen-2 GCs {len(full)}, max {max(full, default=0):.1f} ms "
            f"(CPU {max(self.gc_cpu, default=0):.1f}), "
            f"total {sum(full):.0f} ms (CPU {sum(self.gc_cpu):.0f}); "
            f"gen-0/1 GCs {len(self.gc[0]) + len(self.gc[1])}, "
            f"max {max(self.gc[0] + self.gc[1], default=0):.1f} ms, CPU {self.young_cpu:.0f} ms"
        )


def _rss_mib() -> tuple[float, float]:
    """This process's resident set now and at its peak, in MiB."""
    now = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/statm") as f:
            now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return now, peak


class Cpu:
    """CPU seconds of this thread (the event loop's) and of the whole process."""

    def __enter__(self) -> Cpu:
        self._thread, self._process = time.thread_time(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread = time.thread_time() - self._thread
        self.process = time.process_time() - self._process

    def per_op(self, n: int) -> tuple[float, float]:
        return (self.thread / n * 1e6, self.process / n * 1e6) if n else (0.0, 0.0)


# --- a system under test: put, put_many, get, list -----------------------------------


class System:
    name = ""
    notes: list[str]

    async def start(self) -> None: ...
    async def stop(self) -> None: ...

    async def fresh(self, label: str) -> None:
        """Switch to an empty keyspace for the next write measure."""

    async def put(self, key: bytes, value: bytes) -> None:
        raise NotImplementedError

    async def put_many(self, items: list[tuple[bytes, bytes]]) -> None:
        raise NotImplementedError

    def flushes(self) -> str:
        """Where the last write measure's flushes spent their time ('' if unknown)."""
        return ""

    async def load_for_reads(self, keys: list[bytes], batch: int) -> str:
        """Store ``keys`` (value ``VALUES[i % len]``) and say where they live."""
        raise NotImplementedError

    async def get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    async def lookup_cpu(self, keys: list[bytes]) -> str:
        """What one warm point lookup costs without the read's await (a note)."""
        return ""

    async def list_keys(self, n: int) -> int:
        raise NotImplementedError


class Lsm(System):
    def __init__(
        self,
        refstore: str,
        compaction: str,
        root: Path,
        encoder: str | None = None,
        latency_ms: float = 0.0,
        settings: dict[str, Any] | None = None,
        namespace: str = "",
    ) -> None:
        self.namespace = namespace
        self.encoder = encoder
        self.latency_ms = latency_ms
        self.extra = settings or {}
        self.refstore = refstore
        self.compaction = compaction
        self.root = root
        self.name = (
            f"lsmstore {refstore}, compaction_in_process={compaction}"
            + (" + compactor process" if compaction == "off" else "")
            + (f", +{latency_ms:g} ms per object-store request" if latency_ms else "")
            + "".join(f", {k}={v}" for k, v in self.extra.items())
        )
        self.redis: RedisServer | None = None
        self.compactor: asyncio.subprocess.Process | None = None
        self.store: Store | None = None
        self.branch: Branch | None = None
        self.read_branch: Branch | None = None
        self.notes: list[str] = []

    async def start(self) -> None:
        home = self.root / "home"
        settings: dict[str, Any] = {
            "home": str(home),
            "batch_interval_ms": 10,
            "compaction_in_process": self.compaction,
            **self.extra,
        }
        url = None
        if self.refstore == "redis":
            self.redis = RedisServer()
            await asyncio.to_thread(self.redis.start)
            url = self.redis.url
        if self.latency_ms:  # every request of the client's object stores waits this long
            delay = self.latency_ms / 1000

            def open_objects(namespace: str) -> ObjectStore:
                store = FaultyStore(open_object_store(namespace))
                store.delay(OPS, delay)
                return store

            self.store = Store(load_config(url, **settings), open_objects=open_objects)
        else:
            self.store = lsmstore.connect(url, **settings)
        if self.compaction == "off":  # the production setup: a compactor process alongside
            self.compactor = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "compactor",
                "--refstore",
                self.store.config.refstore_url,
                "--interval",
                str(COMPACTOR_INTERVAL_S),
                "--log-level",
                "warning",
                env={**os.environ, "LSMSTORE_HOME": str(home)},
            )
        if self.encoder is not None:
            self.store.encoder.use_process = self.encoder == "process"
        if self.store.config.gc_freeze != "off":
            # What the process's first write does (lsmstore.gcfreeze), done before the
            # measures: its one full collection is a startup cost, once per process,
            # and showed as the longest "gen-2" pause of the first measure.
            freeze_startup_state()
        ns = (self.root / "data").as_uri()
        if self.namespace:  # e.g. s3://bucket/prefix?endpoint_url=...: a fresh prefix per run
            base, _, query = self.namespace.partition("?")
            ns = f"{base.rstrip('/')}/{self.root.name}-{os.getpid()}" + (
                f"?{query}" if query else ""
            )
        self.repo = await self.store.create_repository("bench", storage_namespace=ns)
        await self._start_encoder()

    async def _start_encoder(self) -> None:
        """Write until the encoder's worker process has taken a batch (as ``bench
        objects`` does): it starts on first use, and the batches sealed meanwhile are
        encoded in threads -- a startup cost, once per process, which fell into the
        first measure (all of a 0.3 s ``put_many`` measure, the first ~10 batches of a
        3 s one)."""
        assert self.store is not None
        encoder = self.store.encoder
        if not encoder.use_process:
            return
        warm = await self.repo.create_branch("encoder-warm-up")
        for i in range(100):
            if encoder.batches_in_process:
                return
            await warm.put_many([(key_of(f"w/{i}", j), VALUES[j]) for j in range(1000)])
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self.store is not None:
            enc = getattr(self.store, "encoder", None)
            if enc is not None:
                self.notes.append(
                    f"batches encoded in the worker process {enc.batches_in_process:,}, "
                    f"in threads {enc.batches_in_thread:,}"
                )
            await self.store.aclose()
        if self.compactor is not None:
            self.compactor.terminate()
            await self.compactor.wait()
        if self.redis is not None:
            await asyncio.to_thread(self.redis.stop)

    async def fresh(self, label: str) -> None:
        self.branch = await self.repo.create_branch(label)
        self.put = self.branch.put  # type: ignore[method-assign]  # no wrapper frame

    async def put_many(self, items: list[tuple[bytes, bytes]]) -> None:
        assert self.branch is not None
        await self.branch.put_many(items)

    def flushes(self) -> str:
        if self.branch is None:
            return ""
        stats = self.branch.writer_stats
        return describe_flushes(list(stats.flushes)) + f"; L1 at the end {stats.l1_length}"

    async def load_for_reads(self, keys: list[bytes], batch: int) -> str:
        from lsmstore.compaction.runner import Compactor

        b = await self.repo.create_branch("reads")
        base = [(k, VALUES[i % len(VALUES)]) for i, k in enumerate(keys) if i % 3 == 0]
        l2 = [(k, VALUES[i % len(VALUES)]) for i, k in enumerate(keys) if i % 3 == 1]
        l1 = [(k, VALUES[i % len(VALUES)]) for i, k in enumerate(keys) if i % 3 == 2]
        for chunk in chunks(base, batch):
            await b.put_many(chunk)
        await b.commit("base of the read benchmark")
        for chunk in chunks(l2, batch):
            await b.put_many(chunk)
        assert self.store is not None
        compactor = Compactor(self.store.refstore, self.store.config)
        try:
            await compactor.compact("bench", "reads", self.repo.objects, force=True)
        finally:
            await compactor.aclose()
        self.store.notify_l1_changed("bench", "reads")
        for chunk in chunks(l1, -(-len(l1) // L1_FILES)):
            await b.put_many(chunk)
        head = await b.head()
        self.read_branch = b
        self.get = b.get  # type: ignore[method-assign]  # no wrapper frame
        return (
            f"base commit {head.base[:8]} ({len(base):,} keys), {len(head.l2)} L2 files "
            f"({len(l2):,} keys), {len(head.l1)} L1 files ({len(l1):,} keys)"
        )

    async def lookup_cpu(self, keys: list[bytes]) -> str:
        """CPU per key of the read branch's snapshot lookup alone (the part of a warm
        ``get`` after its ref arrived: sidecar ranges, bloom bits, SST lookups), the
        minimum and the median of 5 passes over ``keys``: steadier than a rate on a
        shared machine."""
        assert self.read_branch is not None
        view = self.read_branch.view
        snap = await view.snapshot()
        passes = []
        for _ in range(5):
            t0 = time.thread_time()
            for k in keys:
                snap.lookup_cached(k)
            passes.append((time.thread_time() - t0) / len(keys) * 1e6)
        passes.sort()
        return (
            f"warm lookup alone (Snapshot.lookup_cached, no await): {passes[0]:.2f} us "
            f"per key at best, {passes[2]:.2f} median ({len(keys):,} random keys, 5 passes)"
        )

    async def list_keys(self, n: int) -> int:
        assert self.read_branch is not None
        count = 0
        async for _ in self.read_branch.list(prefix=b"g/", limit=n):
            count += 1
        return count


class Slate(System):
    name = "SlateDB 0.17 (Python binding), file store, flush_interval 10ms"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dbs: list[Any] = []
        self.db: Any = None
        self.notes: list[str] = []

    async def _open(self, label: str) -> Any:
        from slatedb.uniffi import DbBuilder, ObjectStore, Settings

        store = ObjectStore.resolve("file:///")
        settings = Settings.default()
        settings.set("flush_interval", '"10ms"')
        path = self.root / label
        path.mkdir(parents=True, exist_ok=True)
        builder = DbBuilder(str(path).lstrip("/"), store)
        builder.with_settings(settings)
        db = await builder.build()
        self.dbs.append(db)
        return db

    async def stop(self) -> None:
        for db in self.dbs:
            await db.shutdown()

    async def fresh(self, label: str) -> None:
        if self.db is not None:  # one open database at a time: they share the 2 cores
            await self.db.shutdown()
            self.dbs.remove(self.db)
        self.db = await self._open(label)
        self._db_put = self.db.put

    async def put(self, key: bytes, value: bytes) -> None:
        handle = await self._db_put(key, value)
        await handle.await_durable()

    async def put_many(self, items: list[tuple[bytes, bytes]]) -> None:
        from slatedb.uniffi import WriteBatch

        wb = WriteBatch()
        for k, v in items:
            wb.put(k, v)
        handle = await self.db.write(wb)
        await handle.await_durable()

    async def load_for_reads(self, keys: list[bytes], batch: int) -> str:
        from slatedb.uniffi import FlushOptions, FlushType

        await self.fresh("reads")
        items = [(k, VALUES[i % len(VALUES)]) for i, k in enumerate(keys)]
        for chunk in chunks(items, batch):
            await self.put_many(chunk)
        await self.db.flush_with_options(FlushOptions(flush_type=FlushType.MEM_TABLE))
        self.get = self.db.get  # type: ignore[method-assign]  # no wrapper frame
        return f"{len(keys):,} keys written in WriteBatches of {batch:,}, memtable flushed to L0"

    async def list_keys(self, n: int) -> int:
        from slatedb.uniffi import KeyRange

        it = await self.db.scan(
            KeyRange(start=b"g/", start_inclusive=True, end=b"g0", end_inclusive=False)
        )
        count = 0
        while count < n:
            got = await it.next_batch(min(1000, n - count))
            if not got:
                break
            count += len(got)
        return count


def describe_flushes(traces: list[FlushTrace]) -> str:
    """p50 / p90 / p99 / max / mean in ms of each phase of the traced flushes
    (FlushTrace), and of ``flush``: all of a batch's time after its window closed."""
    if not traces:
        return "no flushes traced"
    parts = [
        f"{len(traces)} flushes, records p50 {pct([t.records for t in traces], 0.5):.0f}, "
        f"depth max {max(t.depth for t in traces)}, "
        f"batches appended in a group of >1 {sum(t.group > 1 for t in traces)}"
    ]
    after_window = ("slot", "admit", "encode", "upload", "data", "turn", "append")
    phases: dict[str, list[float]] = {
        phase: [getattr(t, phase) * 1000 for t in traces] for phase in ("window", *after_window)
    }
    phases["flush"] = [sum(getattr(t, p) for p in after_window) * 1000 for t in traces]
    for phase, ms in phases.items():
        parts.append(
            f"{phase} {pct(ms, 0.5):.1f}/{pct(ms, 0.9):.1f}/{pct(ms, 0.99):.1f}/"
            f"{max(ms):.1f}/{sum(ms) / len(ms):.1f}"
        )
    return ", ".join(parts) + " ms (p50/p90/p99/max/mean)"


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), max(1, size))]


# --- measures ----------------------------------------------------------------------------


async def closed_loop(system: System, label: str, tasks: int, seconds: float) -> tuple[float, int]:
    """Puts/s of ``tasks`` tasks, each putting unique keys until the deadline."""
    await system.fresh(label)
    loop = asyncio.get_running_loop()
    put = system.put
    done = 0
    nvalues = len(VALUES)

    async def one(t: int, deadline: float) -> None:
        nonlocal done
        prefix = b"%s/%05d/" % (label.encode(), t)
        width = KEY_BYTES - len(prefix)
        for i in range(MAX_OPS_PER_TASK):
            if loop.time() >= deadline:
                return
            await put(b"%s%0*d" % (prefix, width, i), VALUES[(t + i) % nvalues])
            done += 1

    t0 = loop.time()
    await asyncio.gather(*(one(t, t0 + seconds) for t in range(tasks)))
    return done / (loop.time() - t0), done


async def batches(system: System, label: str, batch: int, seconds: float) -> tuple[float, int]:
    """Records/s of ``put_many`` calls of ``batch`` records from 4 tasks."""
    await system.fresh(label)
    loop = asyncio.get_running_loop()
    done = 0

    nvalues = len(VALUES)

    async def one(t: int, deadline: float) -> None:
        nonlocal done
        for j in range(10_000):
            if loop.time() >= deadline:
                return
            # key_of's bytes, with the prefix formatted once per call, not per record:
            # key_of per record cost the loop 0.7 us a record, about as much as
            # put_many itself (0.3 us built this way)
            prefix = b"%s/%d/%05d/" % (label.encode(), t, j)
            width = KEY_BYTES - len(prefix)
            items = [(b"%s%0*d" % (prefix, width, i), VALUES[i % nvalues]) for i in range(batch)]
            await system.put_many(items)
            done += len(items)

    t0 = loop.time()
    await asyncio.gather(*(one(t, t0 + seconds) for t in range(BATCH_TASKS)))
    return done / (loop.time() - t0), done


async def open_loop(
    system: System, label: str, rate: float, seconds: float
) -> tuple[list[float], int, float]:
    """Latencies (ms) of puts issued at ``rate``/s, counted from each scheduled time.

    Returns the latencies, the puts issued, and the worst lag of the scheduler itself.
    """
    await system.fresh(label)
    loop = asyncio.get_running_loop()
    lat: list[float] = []
    timeline: list[tuple[float, float]] = []  # (scheduled s since start, latency ms)
    put = system.put
    tasks: set[asyncio.Task[None]] = set()
    prefix = label.encode() + b"/"
    width = KEY_BYTES - len(prefix)

    async def one(i: int, scheduled: float) -> None:
        await put(b"%s%0*d" % (prefix, width, i), VALUES[i % len(VALUES)])
        ms = (loop.time() - scheduled) * 1000
        lat.append(ms)
        timeline.append((scheduled - t0, ms))

    total = int(rate * seconds)
    t0 = loop.time() + 0.01
    issued = 0
    worst_lag = 0.0
    for _ in range(int(seconds * 1000) + 10_000):  # one tick per ms, bounded
        now = loop.time()
        due = min(total, int((now - t0) * rate) + 1) if now >= t0 else 0
        if issued < due:
            worst_lag = max(worst_lag, now - (t0 + issued / rate))
        while issued < due:
            task = loop.create_task(one(issued, t0 + issued / rate))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            issued += 1
        if issued >= total:
            break
        await asyncio.sleep(0.001)
    if tasks:
        await asyncio.gather(*tasks)
    timeline.sort()
    TIMELINES[label] = timeline
    return lat, issued, worst_lag * 1000


def draw_indices(n: int) -> dict[int, list[int]]:
    """The random key indices of each read task, drawn before a measure starts: the
    410,000 randrange calls took a sixth of a 2 s measure, and about 1 us of the loop's
    CPU per get, when they were inside it."""
    draws: dict[int, list[int]] = {}
    for seed in range(READ_TASKS):
        rng = random.Random(seed)
        draws[seed] = [rng.randrange(n) for _ in range(4096)]
    return draws


async def gets(
    system: System, keys: list[bytes], seconds: float, draws: dict[int, list[int]]
) -> tuple[float, int]:
    """Random gets/s of 100 tasks over ``keys`` (every value is checked), task ``t``
    reading the indices ``draws[t]`` (:func:`draw_indices`)."""
    loop = asyncio.get_running_loop()
    get = system.get
    nvalues = len(VALUES)
    done = 0
    wrong = 0

    async def one(seed: int, deadline: float) -> None:
        nonlocal done, wrong
        idx = draws[seed]
        for j in range(MAX_OPS_PER_TASK):
            if j & 63 == 0 and loop.time() >= deadline:
                return
            i = idx[j & 4095]
            if await get(keys[i]) != VALUES[i % nvalues]:
                wrong += 1
            done += 1

    t0 = loop.time()
    await asyncio.gather(*(one(s, t0 + seconds) for s in range(READ_TASKS)))
    if wrong:
        raise AssertionError(f"{wrong} gets returned a wrong value")
    return done / (loop.time() - t0), done


def full_collection() -> str:
    """What a full collection of this process's heap costs now: the objects the
    collector tracks (the frozen startup state aside) and the CPU of one collection."""
    tracked = len(gc.get_objects())
    t0 = time.thread_time()
    gc.collect()
    ms = (time.thread_time() - t0) * 1000
    return f"{tracked:,} tracked objects, a full collection {ms:.1f} ms CPU"


async def warm(system: System, keys: list[bytes]) -> None:
    """Read every key once (from 100 tasks): every file is then in the caches."""
    get = system.get

    async def one(part: list[bytes]) -> None:
        for k in part:
            await get(k)

    await asyncio.gather(*(one(keys[i::READ_TASKS]) for i in range(READ_TASKS)))


async def measure(system: System, args: argparse.Namespace, tag: str) -> Result:
    res = Result(system.name)
    secs = args.seconds
    want = set(args.measures.split(","))
    await system.start()
    try:
        for tasks in (1, 100, 1000):
            if f"puts{tasks}" not in want:
                continue
            async with Probe() as probe:
                with Cpu() as cpu:
                    rate, n = await closed_loop(system, f"{tag}p{tasks}", tasks, secs)
            res.probes[f"puts{tasks}"] = probe.summary()
            res.probes[f"puts{tasks} flushes"] = system.flushes()
            res.puts[tasks] = rate
            res.cpu[f"puts{tasks}"] = cpu.per_op(n)
            print(f"  {system.name}: {tasks} tasks: {rate:,.0f} puts/s ({n:,})", flush=True)
        if "latency" in want:
            res.lat_rate = args.rate or res.puts.get(1000, 0.0) / 2
            if not res.lat_rate:
                raise SystemExit("the latency measure needs puts1000 or --rate")
            async with Probe() as probe:
                with Cpu() as cpu:
                    lat, issued, lag = await open_loop(system, f"{tag}l", res.lat_rate, secs)
            res.probes["latency"] = probe.summary()
            res.probes["latency flushes"] = system.flushes()
            res.timeline = TIMELINES.get(f"{tag}l", [])
            res.cpu["latency"] = cpu.per_op(issued)
            res.lat = (pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999))
            res.lat_done = f"{issued:,} puts, scheduler lag at most {lag:.1f} ms"
            print(
                f"  {system.name}: open loop at {res.lat_rate:,.0f}/s: p50 {res.lat[0]:.1f} "
                f"p99 {res.lat[1]:.1f} p99.9 {res.lat[2]:.1f} ms ({res.lat_done})",
                flush=True,
            )
        if args.knee and res.puts.get(1000):
            top = res.puts[1000]
            for i, frac in enumerate(float(x) for x in args.knee.split(",") if x):
                rate = top * frac
                t0 = time.perf_counter()
                lat, issued, _ = await open_loop(system, f"{tag}k{i}", rate, secs)
                achieved = len(lat) / (time.perf_counter() - t0)
                row = (rate, pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999), achieved)
                res.knee.append(row)
                res.probes[f"knee {frac:g} flushes"] = system.flushes()
                print(
                    f"  {system.name}: knee, offered {rate:,.0f}/s ({frac:g} of max): "
                    f"p50 {row[1]:.1f} p99 {row[2]:.1f} p99.9 {row[3]:.1f} ms",
                    flush=True,
                )
        if "batch" in want:
            async with Probe() as probe:
                with Cpu() as cpu:
                    res.batch_rate, n = await batches(system, f"{tag}b", args.batch, secs)
            res.probes["batch"] = probe.summary()
            res.probes["batch flushes"] = system.flushes()
            res.cpu["batch"] = cpu.per_op(n)
            print(f"  {system.name}: put_many: {res.batch_rate:,.0f} records/s", flush=True)
        if "gets" in want or "list" in want:
            keys = [key_of("g", i) for i in range(args.keys)]
            where = await system.load_for_reads(keys, args.batch)
            res.notes.append(f"gets: {where}")
            await warm(system, keys)
            res.notes.append(f"after the warm reads: {full_collection()}")
            if "gets" in want:
                draws = draw_indices(len(keys))
                async with Probe() as probe:
                    with Cpu() as cpu:
                        res.gets, n = await gets(system, keys, secs, draws)
                res.probes["gets"] = probe.summary()
                res.cpu["gets"] = cpu.per_op(n)
                print(f"  {system.name}: gets: {res.gets:,.0f}/s; {where}", flush=True)
                drawn = [keys[i] for t in range(10) for i in draws[t]]
                note = await system.lookup_cpu(drawn)
                if note:
                    res.notes.append(note)
                    print(f"  {system.name}: {note}", flush=True)
            t0 = time.perf_counter()
            listed = await system.list_keys(LIST_KEYS)
            res.list_ms = (time.perf_counter() - t0) * 1000
            if listed != min(LIST_KEYS, args.keys):
                raise AssertionError(f"listed {listed} keys, not {min(LIST_KEYS, args.keys)}")
    finally:
        await system.stop()
        res.notes.extend(system.notes)
    return res


def table(results: list[Result]) -> None:
    cols = results
    print("| measure | " + " | ".join(r.name for r in cols) + " |")
    print("|---|" + "---|" * len(cols))

    def row(label: str, cell: Callable[[Result], str]) -> None:
        print(f"| {label} | " + " | ".join(cell(r) for r in cols) + " |")

    for t in (1, 100, 1000):
        row(
            f"durable puts/s, {t} task{'s' if t > 1 else ''}",
            lambda r, t=t: f"{r.puts.get(t, 0):,.0f}",
        )
    row("records/s, put_many / WriteBatch", lambda r: f"{r.batch_rate:,.0f}")
    row("open-loop rate (half the 1,000-task rate)", lambda r: f"{r.lat_rate:,.0f}/s")
    row("ack latency p50 / p99 / p99.9 (ms)", lambda r: "{:.1f} / {:.1f} / {:.1f}".format(*r.lat))
    row(f"random gets/s, warm, {READ_TASKS} tasks", lambda r: f"{r.gets:,.0f}")
    row(f"list {LIST_KEYS:,} keys (ms)", lambda r: f"{r.list_ms:.0f}")
    for m, label in (
        ("puts1000", "1,000-task puts"),
        ("batch", "put_many records"),
        ("latency", "open-loop puts"),
        ("gets", "gets"),
    ):
        row(
            f"CPU µs per op, {label}: event-loop thread / whole process",
            lambda r, m=m: "{:.1f} / {:.1f}".format(*r.cpu[m]) if m in r.cpu else "",
        )


async def run(args: argparse.Namespace) -> None:
    load0 = os.getloadavg()
    print(
        f"write/read path benchmark, {datetime.now(UTC):%Y-%m-%d}, "
        f"{platform.python_implementation()} {platform.python_version()}, uvloop, "
        f"nproc={os.cpu_count()}, load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} "
        f"at the start; {args.seconds}s per measure, {args.keys:,} keys for reads, "
        f"batches of {args.batch:,}",
        flush=True,
    )
    systems = [s for s in args.systems.split(",") if s]
    modes = [m for m in args.compaction.split(",") if m]
    results: list[Result] = []
    root = Path(tempfile.mkdtemp(prefix="lsm-bench-write-", dir=args.dir))
    try:
        n = 0
        for s in systems:
            if s == "slatedb":
                try:
                    import slatedb.uniffi  # noqa: F401
                except ImportError:
                    print("  slatedb is not installed: pip install slatedb==0.17.0", flush=True)
                    continue
                results.append(await measure(Slate(root / "slatedb"), args, "s"))
                continue
            if s not in ("redis", "embedded"):
                raise SystemExit(f"unknown system {s!r}: redis, embedded, slatedb")
            for mode in modes:
                n += 1
                extra = dict(kv.split("=", 1) for kv in args.set)
                system = Lsm(
                    s, mode, root / f"lsm{n}", args.encoder, args.latency_ms, extra, args.namespace
                )
                results.append(await measure(system, args, f"x{n}"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load1 = os.getloadavg()
    print()
    table(results)
    print()
    for r in results:
        for note in r.notes:
            print(f"* {r.name}: {note}")
        for m, summary in r.probes.items():
            print(f"* {r.name}, {m}: {summary}")
    print(f"load average at the end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if args.out:
        write_outputs(Path(args.out), results, args, (load0, load1))


def write_outputs(
    out: Path, results: list[Result], args: argparse.Namespace, load: tuple[Any, Any]
) -> None:
    """``results.json`` and PNG plots (matplotlib) next to it."""
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M}Z",
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "argv": sys.argv,
        "load_start": list(load[0]),
        "load_end": list(load[1]),
        "results": [
            {
                "name": r.name,
                "puts": r.puts,
                "batch_rate": r.batch_rate,
                "open_loop_rate": r.lat_rate,
                "ack_ms_p50_p99_p999": r.lat,
                "gets": r.gets,
                "list_ms": r.list_ms,
                "cpu_us_per_op": r.cpu,
                "probes": r.probes,
                "knee": r.knee,
                "notes": r.notes,
            }
            for r in results
        ],
    }
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    title = f"{doc['date']}, nproc={doc['nproc']}, load {load[0][0]:.1f}-{load[1][0]:.1f}"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        if r.puts:
            xs = sorted(r.puts)
            ax.plot(xs, [r.puts[x] for x in xs], marker="o", label=r.name)
    ax.set(xscale="log", yscale="log", xlabel="concurrent tasks", ylabel="acknowledged puts/s")
    ax.set_title(f"Durable puts vs concurrency ({title})", fontsize=8)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "throughput_vs_concurrency.png", dpi=110)
    plt.close(fig)
    if any(r.knee for r in results):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in results:
            if r.knee:
                xs = [k[0] for k in r.knee]
                ax.plot(xs, [k[1] for k in r.knee], marker="o", label=f"{r.name} p50")
                ax.plot(xs, [k[2] for k in r.knee], marker="s", ls="--", label=f"{r.name} p99")
        ax.set(yscale="log", xlabel="offered puts/s (open loop)", ylabel="ack latency, ms")
        ax.set_title(f"Ack latency vs offered load ({title})", fontsize=8)
        ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(out / "latency_vs_load.png", dpi=110)
        plt.close(fig)
    if any(r.timeline for r in results):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in results:
            if r.timeline:
                ax.scatter(
                    [p[0] for p in r.timeline], [p[1] for p in r.timeline], s=1, label=r.name
                )
        ax.set(
            yscale="log",
            xlabel="seconds (right after the 1,000-task burst)",
            ylabel="ack latency, ms",
        )
        ax.set_title(
            f"Ack latency over time, compaction of the burst running ({title})", fontsize=8
        )
        ax.legend(fontsize=6, markerscale=8)
        fig.tight_layout()
        fig.savefig(out / "latency_over_time.png", dpi=110)
        plt.close(fig)
    print(f"results and plots in {out}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench write", description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each measure")
    parser.add_argument("--systems", default="redis,embedded,slatedb")
    parser.add_argument("--compaction", default="off,on", help="compaction_in_process modes")
    parser.add_argument("--keys", type=int, default=60_000, help="keys of the read measures")
    parser.add_argument("--batch", type=int, default=10_000, help="records per put_many")
    parser.add_argument("--dir", default=None, help="where the temporary data goes")
    parser.add_argument(
        "--encoder", choices=("process", "thread"), help="force where batches are encoded"
    )
    parser.add_argument("--measures", default=",".join(MEASURES), help="a subset to run")
    parser.add_argument(
        "--knee",
        default="",
        help="open-loop runs at these fractions of the 1,000-task rate, e.g. "
        "0.25,0.5,0.75,1 (ack latency against offered load)",
    )
    parser.add_argument(
        "--namespace",
        default="",
        help="the repositories' storage namespace (default: a local directory), e.g. "
        "s3://bench/run?endpoint_url=http://127.0.0.1:8333&path_style=true for SeaweedFS "
        "`weed mini` on loopback (credentials from AWS_* variables); with --compaction on",
    )
    parser.add_argument("--out", default="", help="write results.json and PNG plots here")
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="add this much to every object-store request of the client (an S3-like "
        "store: ~15-20 ms per small PUT or GET); use with --compaction on",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a client setting (lsmstore.config), e.g. --set max_inflight_batches=8",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="open-loop puts/s (default: half the 1,000-task rate)",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.keys < 3 or args.batch < 1:
        parser.error("need --seconds > 0, --keys >= 3, --batch >= 1")
    logging.basicConfig(level=logging.WARNING)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
