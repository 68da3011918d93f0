"""The fault soak: several writer processes on one branch, a compactor and a committer,
while processes are killed (kill -9 at random times and at named steps) and restarted,
Redis (the RefStore, with an append-only file) is restarted mid-load, and S3 faults
are injected at the network level by :class:`~lsmstore.testing.faultproxy.FaultProxy`
in front of moto's server (a separate process).  Afterwards a history checker verifies
every acknowledged write through the branch, a listing and the committed head.

Used by ``tests/test_soak.py`` (a short run) and ``python -m bench soak --minutes N``.

Reproducibility: everything the soak decides -- the writers' operations, the chaos
schedule (what is killed or restarted, when, at which step), the faults' draws -- comes
from ``random.Random`` seeded from ``seed``.  The interleaving of processes on the
machine is not under its control, so two runs with one seed make the same decisions,
not byte-identical histories.

The history (:class:`History`) is what the writers printed: per operation ``begin``
(its keys and values), then ``ack`` or ``fail``, or nothing (killed in flight).  Each
key belongs to one task of one writer, which issues one operation at a time, so the
operations on a key are ordered.  For every key the checker allows exactly: the value
(or absence, for a delete) of the newest *acknowledged* operation, or that of any
later operation that was attempted but not acknowledged (it may have landed); with no
acknowledged operation, absence or any attempted value.  Anything else is a lost
write (an acknowledged value missing or replaced by an older one) or a resurrected
delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsmstore.api import ReadsAPI
from lsmstore.testing.faultproxy import FaultPlan, FaultProxy
from lsmstore.testing.pause import STEPS as PAUSE_STEPS
from lsmstore.testing.servers import MOTO_ENV, RedisServer, free_port

REPO = "soak"
#: How long a step kill waits for the worker to reach its step (it needs work to do).
STEP_WAIT_S = 30.0
BASELINE = FaultPlan(error=0.01, reset_before=0.005, reset_after=0.005, delay=0.02, max_delay_s=0.1)
STORM = FaultPlan(error=0.08, reset_before=0.04, reset_after=0.04, delay=0.1, max_delay_s=0.3)
EVENTS = (
    "kill_writer",
    "step_kill_writer",
    "kill_compactor",
    "kill_committer",
    "step_kill_compactor",
    "step_kill_committer",
    "restart_redis",
    "kill_redis",
    "s3_storm",
)
WEIGHTS = (30, 8, 4, 4, 6, 6, 5, 5, 16)
WORKER_ENV = {
    "LSMSTORE_COMPACTION_L1_FILES": "4",
    "LSMSTORE_COMMIT_MAX_STAGED_FILES": "6",
    "LSMSTORE_COMMIT_INTERVAL_S": "3",
    "LSMSTORE_COMMIT_LEASE_S": "5",
    "LSMSTORE_COMPACTION_LEASE_S": "5",
}


@dataclass
class SoakOptions:
    workdir: Path
    seed: int = 1
    duration_s: float = 60.0
    writers: int = 3
    chaos_every_s: float = 3.0  # mean seconds between chaos events
    log: Callable[[str], None] = lambda line: None


@dataclass
class Op:
    kind: str
    keys: dict[str, str | None]
    status: str = "pending"  # pending (killed in flight) | ack | fail


class History:
    def __init__(self) -> None:
        self.ops: dict[str, Op] = {}
        self.per_key: dict[str, list[str]] = {}

    def record(self, doc: dict[str, Any]) -> None:
        op = str(doc["op"])
        if doc["t"] == "begin":
            self.ops[op] = Op(str(doc["kind"]), dict(doc["keys"]))
            for key in doc["keys"]:
                self.per_key.setdefault(key, []).append(op)
        elif op in self.ops:
            self.ops[op].status = "ack" if doc["t"] == "ack" else "fail"

    def allowed(self, key: str) -> tuple[set[str | None], str | None]:
        """The values ``key`` may hold, and the newest acknowledged one's op id."""
        ids = self.per_key[key]
        last = None
        for i, op in enumerate(ids):
            if self.ops[op].status == "ack":
                last = i
        ok: set[str | None] = set()
        if last is None:
            ok.add(None)
            start = 0
        else:
            ok.add(self.ops[ids[last]].keys[key])
            start = last + 1
        for op in ids[start:]:
            if self.ops[op].status != "ack":
                ok.add(self.ops[op].keys[key])
        return ok, (ids[last] if last is not None else None)

    def counts(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for op in self.ops.values():
            c[f"ops_{op.status}"] += 1
            c[f"{op.kind}_{op.status}"] += 1
            if op.status == "ack":
                c["acknowledged_writes"] += len(op.keys)
        return c


@dataclass
class SoakReport:
    seed: int
    duration_s: float = 0.0
    kills: Counter[str] = field(default_factory=Counter)
    step_kills: Counter[str] = field(default_factory=Counter)
    redis_restarts: int = 0
    s3_storms: int = 0
    proxy: Counter[str] = field(default_factory=Counter)
    history: Counter[str] = field(default_factory=Counter)
    keys_checked: int = 0
    lost: int = 0
    resurrected: int = 0
    violations: list[str] = field(default_factory=list)
    worker_events: Counter[str] = field(default_factory=Counter)

    @property
    def acknowledged_writes(self) -> int:
        return self.history["acknowledged_writes"]

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "duration_s": round(self.duration_s, 1),
            "kills": self.total_kills,
            "kills_by_process": dict(self.kills),
            "kills_at_steps": dict(self.step_kills),
            "redis_restarts": self.redis_restarts,
            "s3_storms": self.s3_storms,
            "proxy_requests": dict(self.proxy),
            "acknowledged_writes": self.acknowledged_writes,
            "history": dict(self.history),
            "keys_checked": self.keys_checked,
            "lost": self.lost,
            "resurrected": self.resurrected,
            "violations": self.violations[:50],
            "worker_events": dict(self.worker_events),
        }


class Proc:
    """A child process whose output lines go to ``on_line`` (JSON documents)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        on_line: Callable[[Proc, dict[str, Any]], None],
        *,
        stream: str,
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.on_line = on_line
        self.stream = stream  # "stdout" (writers) or "stderr" (workers)
        self.proc: asyncio.subprocess.Process | None = None
        self.reader: asyncio.Task[None] | None = None
        self.lines = asyncio.Event()
        self.expected_exit = False
        self.unexpected: list[str] = []
        self.started = asyncio.Event()  # a worker logged "started" (its handlers are in)
        self.log_path: Path | None = None
        self.stderr_path: Path | None = None  # writers: where their stderr goes

    async def start(
        self, extra_env: dict[str, str] | None = None, argv: list[str] | None = None
    ) -> None:
        """Start the process (``argv`` instead of the usual command line, once)."""
        pipe, devnull = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
        self.expected_exit = False
        self.started.clear()
        err: Any = pipe if self.stream == "stderr" else devnull
        if self.stream == "stdout" and self.stderr_path is not None:
            err = self.stderr_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            *(argv or self.argv),
            env={**self.env, **(extra_env or {})},
            stdin=devnull,
            stdout=pipe if self.stream == "stdout" else devnull,
            stderr=err,
            limit=1 << 20,
        )
        if not isinstance(err, int):
            err.close()
        self.reader = asyncio.create_task(self._read(self.proc))

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        stream = proc.stdout if self.stream == "stdout" else proc.stderr
        assert stream is not None
        while True:
            line = await stream.readline()
            if not line.endswith(b"\n"):  # EOF, or a line cut by kill -9
                break
            if self.log_path is not None:
                with self.log_path.open("ab") as f:  # small appends; diagnosis only
                    f.write(line)
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if doc.get("event") == "started":
                self.started.set()
            self.on_line(self, doc)
            self.lines.set()
        code = await proc.wait()
        if not self.expected_exit:
            tail = ""
            if self.stderr_path is not None:
                tail = await asyncio.to_thread(_tail, self.stderr_path)
            self.unexpected.append(f"{self.name} exited on its own with status {code}: {tail}")

    async def kill(self) -> None:
        if self.proc is None:
            return
        self.expected_exit = True
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()
        if self.reader is not None:
            await self.reader

    async def stop(self) -> int | None:
        """SIGTERM once its handlers are in (it logged ``started``); the exit status."""
        if self.proc is None:
            return None
        waiter = asyncio.create_task(self.started.wait())
        await asyncio.wait(
            [waiter, asyncio.create_task(self.proc.wait())], return_when="FIRST_COMPLETED"
        )
        waiter.cancel()
        self.expected_exit = True
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        code = await self.proc.wait()
        if self.reader is not None:
            await self.reader
        return code


def _tail(path: Path, size: int = 1500) -> str:
    try:
        return path.read_bytes()[-size:].decode("utf-8", "replace")
    except OSError:
        return ""


class Soak:
    def __init__(self, opts: SoakOptions) -> None:
        self.opts = opts
        self.rng = random.Random(f"soak-{opts.seed}")
        self.report = SoakReport(seed=opts.seed)
        self.history = History()
        self.work = opts.workdir
        self.redis = RedisServer(appendonly=True)
        self.moto: asyncio.subprocess.Process | None = None
        self.moto_port = free_port()
        self.proxy: FaultProxy | None = None
        self.writers: list[Proc] = []
        self.generations: list[int] = []
        self.compactor: Proc | None = None
        self.committer: Proc | None = None
        self.paused: dict[str, asyncio.Event] = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LSMSTORE_")}
        self.env.update(MOTO_ENV)
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")) if p
        )

    def log(self, msg: str) -> None:
        self.opts.log(f"[soak {time.strftime('%H:%M:%S')}] {msg}")

    @property
    def url(self) -> str:
        return f"{self.redis.url}?timeout=2"

    # --- set-up ---------------------------------------------------------------------

    async def _start_moto(self) -> None:
        self.moto = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import sys; from moto.server import main; sys.exit(main(sys.argv[1:]))",
            "-H",
            "127.0.0.1",
            "-p",
            str(self.moto_port),
            env=self.env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        while True:  # no time limit: until it listens or dies
            if self.moto.returncode is not None:
                raise RuntimeError(f"moto server exited with status {self.moto.returncode}")
            try:
                _, w = await asyncio.open_connection("127.0.0.1", self.moto_port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            w.close()
            return

    async def setup(self) -> None:
        from aiobotocore.session import get_session

        import lsmstore

        await asyncio.to_thread(self.redis.start)
        await self._start_moto()
        self.proxy = FaultProxy(
            "127.0.0.1", self.moto_port, rng=random.Random(f"proxy-{self.opts.seed}")
        )
        await self.proxy.start()
        bucket = f"soak-{uuid.uuid4().hex[:12]}"
        os.environ.update({k: v for k, v in MOTO_ENV.items() if k not in os.environ})
        async with get_session().create_client(
            "s3", endpoint_url=f"http://127.0.0.1:{self.moto_port}", region_name="us-east-1"
        ) as client:
            await client.create_bucket(Bucket=bucket)
        ns = f"s3://{bucket}/{REPO}?endpoint_url={self.proxy.endpoint}"
        async with lsmstore.connect(self.url, home=str(self.work / "setup")) as store:
            await store.create_repository(REPO, storage_namespace=ns)
        py = sys.executable
        for wid in range(self.opts.writers):
            self.generations.append(0)
            writer = Proc(f"writer{wid}", [], self.env, self._writer_line, stream="stdout")
            writer.stderr_path = self.work / f"writer{wid}.stderr"
            self.writers.append(writer)
        common = ["--refstore", self.url, "--log-level", "info"]
        self.compactor = Proc(
            "compactor",
            [py, "-m", "compactor", *common, "--interval", "0.2", "--owner", "soak-compactor"],
            {**self.env, **WORKER_ENV, "LSMSTORE_HOME": str(self.work / "compactor")},
            self._worker_line,
            stream="stderr",
        )
        self.committer = Proc(
            "committer",
            [py, "-m", "committer", *common, "--interval", "0.3", "--owner", "soak-committer"],
            {**self.env, **WORKER_ENV, "LSMSTORE_HOME": str(self.work / "committer")},
            self._worker_line,
            stream="stderr",
        )
        self.compactor.log_path = self.work / "compactor.log"
        self.committer.log_path = self.work / "committer.log"
        await self.compactor.start()
        await self.committer.start()
        for wid in range(self.opts.writers):
            await self._start_writer(wid)

    async def _start_writer(self, wid: int, env: dict[str, str] | None = None) -> None:
        p = self.writers[wid]
        gen = self.generations[wid]
        p.argv = [
            sys.executable,
            "-m",
            "lsmstore.testing.soak_writer",
            self.url,
            str(self.work / f"writer{wid}-{gen}"),
            REPO,
            str(wid),
            str(gen),
            str(self.opts.seed),
        ]
        await p.start(env)

    def _writer_line(self, proc: Proc, doc: dict[str, Any]) -> None:
        if doc.get("t") in ("begin", "ack", "fail"):
            self.history.record(doc)
        elif doc.get("t") == "paused" and proc.name in self.paused:
            self.paused[proc.name].set()

    def _worker_line(self, proc: Proc, doc: dict[str, Any]) -> None:
        event = doc.get("event")
        if event == "compaction":
            self.report.worker_events[f"compaction_{doc.get('outcome')}"] += 1
        elif event == "commit":
            self.report.worker_events[f"commit_{doc.get('outcome')}"] += 1
        elif event in ("crashed", "dependency_down", "dependency_up", "paused"):
            self.report.worker_events[f"{proc.name}_{event}"] += 1
            if event == "crashed":
                self.report.violations.append(f"{proc.name} crashed: {doc.get('error')}")
            if event == "paused" and proc.name in self.paused:
                self.paused[proc.name].set()

    # --- chaos ----------------------------------------------------------------------

    async def _restart_worker(self, p: Proc, argv: list[str] | None = None) -> None:
        await p.kill()
        await p.start(argv=argv)

    async def _step_kill(self, p: Proc, suffix: str) -> None:
        """Restart worker ``p`` paused at a random step (through
        :mod:`lsmstore.testing.pause`), wait for it to get there, restart it plainly."""
        steps = PAUSE_STEPS[p.name]
        step = self.rng.choice(steps)
        paused = self.paused[p.name] = asyncio.Event()
        py, _, module, *args = p.argv
        paused_argv = [py, "-m", "lsmstore.testing.pause", module, step + suffix, *args]
        await self._restart_worker(p, paused_argv)
        try:
            await asyncio.wait_for(paused.wait(), STEP_WAIT_S)
        except TimeoutError:
            self.report.step_kills[f"{p.name}:{step}:not-reached"] += 1
        else:
            self.report.step_kills[f"{p.name}:{step}"] += 1
            self.report.kills[p.name] += 1
        finally:
            self.paused.pop(p.name, None)
        await self._restart_worker(p)

    async def _storm(self, seconds: float) -> None:
        assert self.proxy is not None
        self.proxy.plan = STORM
        await asyncio.sleep(seconds)
        self.proxy.plan = BASELINE

    async def chaos(self, event: str, background: set[asyncio.Task[None]]) -> None:
        assert self.compactor is not None and self.committer is not None
        self.log(f"chaos: {event}")
        if event == "kill_writer":
            wid = self.rng.randrange(self.opts.writers)
            await self.writers[wid].kill()
            self.report.kills["writer"] += 1
            self.generations[wid] += 1
            await self._start_writer(wid)
        elif event == "step_kill_writer":
            # a writer that stops right after uploading a staging SST, before the
            # RefStore append: killed there
            wid = self.rng.randrange(self.opts.writers)
            p = self.writers[wid]
            await p.kill()
            self.generations[wid] += 1
            paused = self.paused[p.name] = asyncio.Event()
            await self._start_writer(wid, {"SOAK_WRITER_PAUSE_AT": "staged"})
            try:
                await asyncio.wait_for(paused.wait(), STEP_WAIT_S)
            except TimeoutError:
                self.report.step_kills[f"{p.name}:staged:not-reached"] += 1
            else:
                self.report.step_kills["writer:staged"] += 1
                self.report.kills["writer"] += 1
            finally:
                self.paused.pop(p.name, None)
            await p.kill()
            self.generations[wid] += 1
            await self._start_writer(wid)
        elif event in ("kill_compactor", "kill_committer"):
            p = self.compactor if event == "kill_compactor" else self.committer
            await self._restart_worker(p)
            self.report.kills[p.name] += 1
        elif event == "step_kill_compactor":
            # the job pauses 1 s at the step (then would go on); killed while paused
            await self._step_kill(self.compactor, ":1")
        elif event == "step_kill_committer":
            await self._step_kill(self.committer, "")
        elif event in ("restart_redis", "kill_redis"):
            if event == "kill_redis":
                await asyncio.to_thread(self.redis.kill)
                self.report.kills["redis"] += 1
                await asyncio.sleep(self.rng.uniform(0, 1))
                await asyncio.to_thread(self.redis.start)
            else:
                await asyncio.to_thread(self.redis.restart)
            self.report.redis_restarts += 1
        elif event == "s3_storm":
            self.report.s3_storms += 1
            task = asyncio.create_task(self._storm(self.rng.uniform(1, 4)))
            background.add(task)
            task.add_done_callback(background.discard)

    async def run(self) -> SoakReport:
        t0 = time.monotonic()
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            await self.setup()
            assert self.proxy is not None
            self.proxy.plan = BASELINE
            deadline = time.monotonic() + self.opts.duration_s
            # every kind of event once (in a seeded order; the step kills, which wait
            # for the worker to reach the step, last), then at random
            schedule = [e for e in EVENTS if not e.startswith("step_")]
            self.rng.shuffle(schedule)
            schedule += ["step_kill_writer", "step_kill_committer", "step_kill_compactor"]
            background: set[asyncio.Task[None]] = set()
            while time.monotonic() < deadline:
                await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.opts.chaos_every_s)
                event = schedule.pop(0) if schedule else self.rng.choices(EVENTS, WEIGHTS)[0]
                await self.chaos(event, background)
            await asyncio.gather(*background)
            self.proxy.plan = FaultPlan.none()
            await self.finish()
            await self.verify()
        finally:
            await self.teardown()
        self.report.duration_s = time.monotonic() - t0
        self.report.history = self.history.counts()
        if self.proxy is not None:
            self.report.proxy = Counter(self.proxy.counts)
        return self.report

    async def finish(self) -> None:
        """Stop the writers (kill -9: whatever is in flight stays unknown) and the
        workers (SIGTERM: they must exit 0)."""
        for p in self.writers:
            await p.kill()
        assert self.compactor is not None and self.committer is not None
        for p in (self.compactor, self.committer):
            code = await p.stop()
            if code != 0:
                self.report.violations.append(f"{p.name} exited with {code} on SIGTERM")
        for p in (*self.writers, self.compactor, self.committer):
            self.report.violations.extend(p.unexpected)

    # --- the check ------------------------------------------------------------------

    async def verify(self) -> None:
        import lsmstore
        from lsmstore.errors import NotFoundError, NothingToCommitError
        from lsmstore.graveler.record import default_identity

        async with lsmstore.connect(
            self.url, home=str(self.work / "verify"), compaction_in_process="off"
        ) as store:
            repo = await store.get_repository(REPO)
            branch = repo.branch("main")
            keys = sorted(self.history.per_key)

            async def read(r: ReadsAPI, key: str) -> str | None:
                try:
                    return (await r.get(key)).decode()
                except NotFoundError:
                    return None

            observed = dict(
                zip(keys, await asyncio.gather(*(read(branch, k) for k in keys)), strict=True)
            )
            listed = {e.path: e.identity async for e in branch.list(prefix="w")}
            try:
                head = (await branch.commit("soak: final check")).id
            except NothingToCommitError:
                head = (await branch.head()).base
            ref = repo.ref(head)
            committed = dict(
                zip(keys, await asyncio.gather(*(read(ref, k) for k in keys)), strict=True)
            )
            committed_listing = {e.path: e.identity async for e in ref.list(prefix="w")}
        present = {k for k, v in observed.items() if v is not None}
        if set(listed) != present:
            self.report.violations.append(
                f"listing disagrees with reads: only listed {sorted(set(listed) - present)[:5]},"
                f" only read {sorted(present - set(listed))[:5]}"
            )
        for key in keys:
            ok, acked = self.history.allowed(key)
            value = observed[key]
            self.report.keys_checked += 1
            if value not in ok:
                newest = self.history.ops[acked].keys[key] if acked else None
                if newest is None:
                    self.report.resurrected += 1
                else:
                    self.report.lost += 1
                self.report.violations.append(
                    f"{key}: read {value!r}, allowed {sorted(ok, key=str)} (newest ack {acked})"
                )
            if value is not None and key in listed:
                if listed[key] != default_identity(value.encode()):
                    self.report.violations.append(f"{key}: listing identity is not its value's")
            if committed[key] != value:
                self.report.violations.append(
                    f"{key}: committed head {head} has {committed[key]!r}, branch {value!r}"
                )
        if set(committed_listing) != present:
            self.report.violations.append("committed listing disagrees with the branch")

    async def teardown(self) -> None:
        for p in (*self.writers, self.compactor, self.committer):
            if p is not None and p.proc is not None and p.proc.returncode is None:
                await p.kill()
        if self.proxy is not None:
            await self.proxy.aclose()
        if self.moto is not None and self.moto.returncode is None:
            self.moto.terminate()
            await self.moto.wait()
        await asyncio.to_thread(self.redis.stop)


async def run_soak(opts: SoakOptions) -> SoakReport:
    return await Soak(opts).run()
