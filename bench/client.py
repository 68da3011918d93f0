"""Client benchmark: the remote client through a real server beside the in-process
library, in the same run; and the CLI's uploads.

``python -m bench client [--seconds S] [--skip-gib] [--tasks 1,100,1000]``

1. acknowledged raw ``put`` calls per second from 1, 100 and 1,000 tasks (100-byte
   values, unique keys), ``put_many`` records per second (batches of 1,000 from 4
   tasks) and ``delete`` calls from the most tasks: the embedded store in this process,
   then the remote client against ``lsmstore serve`` on loopback (a separate process;
   the same machine's two cores serve both), whose puts travel as coalesced ``kv``
   entries of the batch endpoint.  Beside each rate, CPU per call: of this process
   (``client``; embedded: with its encoder worker) and of the server's process tree
   (``server``), which survive a loaded machine better than the rates; and, as the
   peer in the same run, remote puts sent as ``put`` entries (each value uploaded as an
   object: what the remote ``put`` did before ``kv`` entries);
2. ``lsmstore fs upload -r`` of 1,000 small files (1 KiB) in files/s, and of one 1 GiB
   file in MB/s, embedded and through the server.

Each timed phase runs for ``--seconds`` (a whole number of waves of the tasks) and
prints its rate.  Figures depend on the machine's load: record them with the date,
``nproc`` and this command (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import lsmstore

VALUE = b"v" * 100


def tree_cpu(pid: int, *, own: bool = False) -> float:
    """CPU seconds (user + system) of process ``pid`` and its descendants (``own``: of
    ``pid`` alone), from /proc (0.0 where there is none)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            if own:
                break
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, IndexError, ValueError):
            continue
    return total


class _Cpu:
    """CPU seconds consumed between :meth:`start` and :meth:`stop`, per call: this
    process (with its children when there is no server), the server's process tree,
    and the server process alone (its workers -- staging encoder, compaction merge
    worker -- are the difference)."""

    def __init__(self, server: int | None) -> None:
        self.server = server

    def _read(self) -> tuple[float, float, float]:
        s = self.server
        if not s:
            return tree_cpu(os.getpid()), 0.0, 0.0
        return time.process_time(), tree_cpu(s), tree_cpu(s, own=True)

    def start(self) -> None:
        self._t0 = self._read()

    def stop(self, calls: int) -> None:
        t1 = self._read()
        LAST_CPU_US[:] = [(b - a) / max(calls, 1) * 1e6 for a, b in zip(self._t0, t1, strict=True)]


async def _rate_puts(
    branch: Any, tasks: int, seconds: float, op: str = "put", server: int | None = None
) -> float:
    """Acknowledged calls/s of ``tasks`` tasks, each calling in a loop until time;
    :data:`LAST_CPU_US` gets CPU per call of this process (with its children when there
    is no ``server``) and of the ``server`` process tree."""
    done = 0
    stop = time.perf_counter() + seconds

    async def worker(t: int) -> None:
        nonlocal done
        i = 0
        call: Callable[..., Awaitable[None]] = getattr(branch, op)
        while time.perf_counter() < stop:
            if op == "put":
                await call(f"{op}/{tasks}/{t}/{i:08d}", VALUE)
            else:
                await call(f"{op}/{tasks}/{t}/{i:08d}")
            i += 1
            done += 1

    cpu = _Cpu(server)
    t0 = time.perf_counter()
    cpu.start()
    await asyncio.gather(*(worker(t) for t in range(tasks)))
    cpu.stop(done)
    return done / (time.perf_counter() - t0)


#: CPU per call in the last phase (microseconds): this process, the server's process
#: tree, the server process alone.
LAST_CPU_US = [0.0, 0.0, 0.0]


def _cpu(what: str, server: int | None) -> str:
    out = f"; client CPU {LAST_CPU_US[0]:.1f} µs/{what}"
    if server:
        out += (f", server CPU {LAST_CPU_US[1]:.1f} µs/{what} "
                f"(of which the server process {LAST_CPU_US[2]:.1f})")  # fmt: skip
    return out


async def _rate_put_many(
    branch: Any, seconds: float, batch: int = 1000, server: int | None = None
) -> float:
    done = 0
    stop = time.perf_counter() + seconds

    async def worker(t: int) -> None:
        nonlocal done
        j = 0
        while time.perf_counter() < stop:
            await branch.put_many([(f"many/{t}/{j:06d}/{i:05d}", VALUE) for i in range(batch)])
            j += 1
            done += batch

    cpu = _Cpu(server)
    t0 = time.perf_counter()
    cpu.start()
    await asyncio.gather(*(worker(t) for t in range(4)))
    cpu.stop(done)
    return done / (time.perf_counter() - t0)


class _ObjectPuts:
    """Remote puts as ``put`` batch entries: each value becomes an object (a data object
    plus its entry), as the remote client's ``put`` sent them before ``kv`` entries."""

    def __init__(self, batcher: Any) -> None:
        self._batcher = batcher

    async def put(self, key: str, value: bytes) -> None:
        await self._batcher.submit([["put", key, value]], [key.encode()], len(key) + len(value))


async def _phase(
    label: str, store: Any, ns: str, tasks: list[int], seconds: float, server: int | None = None
) -> None:
    """The put, put_many and delete rates of ``store``; ``server``: the pid of the
    server it talks to (its CPU is reported too)."""
    repo = await store.create_repository(f"bench-{label}", storage_namespace=ns)
    for n in tasks:
        b = await repo.create_branch(f"p{n}", source=repo.default_branch)
        rate = await _rate_puts(b, n, seconds, server=server)
        extra = ""
        batcher = getattr(store, "batcher", None)
        if batcher is not None:
            bt = batcher(repo.name, b.name)
            extra = f" ({bt.entries / max(bt.requests, 1):,.0f} entries per request)"
        print(f"{label:9} put        {n:5} tasks  {rate:>10,.0f} acknowledged puts/s{extra}"
              f"{_cpu('put', server)}")  # fmt: skip
    b = await repo.create_branch("many", source=repo.default_branch)
    rate = await _rate_put_many(b, seconds, server=server)
    print(f"{label:9} put_many       4 tasks  {rate:>10,.0f} records/s{_cpu('record', server)}")
    if server:
        b = await repo.create_branch("objects", source=repo.default_branch)
        n = max(tasks)
        rate = await _rate_puts(_ObjectPuts(store.batcher(repo.name, b.name)), n, seconds,
                                server=server)  # fmt: skip
        print(f"{label:9} put as objects {n:5} tasks  {rate:>10,.0f} acknowledged puts/s"
              f"{_cpu('put', server)}")  # fmt: skip
    b = await repo.create_branch("del", source=repo.default_branch)
    rate = await _rate_puts(b, max(tasks), seconds, op="delete", server=server)
    print(f"{label:9} delete     {max(tasks):5} tasks  {rate:>10,.0f} acknowledged deletes/s"
          f"{_cpu('delete', server)}")  # fmt: skip


def _cli(env: dict[str, str], *args: str) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "lsmstore", *args], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"lsmstore {' '.join(args)}: {out.stderr}")
    return time.perf_counter() - t0


def _uploads(label: str, env: dict[str, str], root: Path, skip_gib: bool) -> None:
    small = root / "small"
    if not small.exists():
        small.mkdir()
        for i in range(1000):
            (small / f"f{i:04d}.bin").write_bytes(os.urandom(1024))
    _cli(env, "repo", "create", f"lsm://up-{label}")
    dt = _cli(env, "fs", "upload", "-r", "-p", "32", str(small), f"lsm://up-{label}/main/small/")
    print(f"{label:9} fs upload  1,000 x 1 KiB files  {1000 / dt:>8,.0f} files/s ({dt:.1f} s)")
    if skip_gib:
        return
    big = root / "big.bin"
    if not big.exists():
        with big.open("wb") as f:
            for _ in range(64):
                f.write(os.urandom(16 << 20))
    dt = _cli(env, "fs", "upload", str(big), f"lsm://up-{label}/main/big.bin")
    print(
        f"{label:9} fs upload  1 GiB file           {(1 << 30) / dt / 1e6:>8,.0f} MB/s ({dt:.1f} s)"
    )


async def _run(args: argparse.Namespace, root: Path) -> None:
    tasks = [int(t) for t in args.tasks.split(",")]
    async with lsmstore.connect(home=str(root / "embedded"), batch_interval_ms=10) as store:
        await _phase("embedded", store, (root / "embedded-data").as_uri(), tasks, args.seconds)

    from lsmstore.testing.server_process import start_server

    server = start_server(root / "server")
    try:
        key, secret = server.admin
        async with lsmstore.connect(
            server.url, access_key_id=key, secret_access_key=secret
        ) as remote:
            await _phase("remote", remote, "local://bench", tasks, args.seconds,
                         server.proc.pid)  # fmt: skip
        base = {k: v for k, v in os.environ.items() if not k.startswith("LSMSTORE_")}
        _uploads("embedded", {**base, "LSMSTORE_HOME": str(root / "cli")}, root, args.skip_gib)
        remote_env = {**base, "LSMSTORE_HOME": str(root / "cli-remote"),
                      "LSMSTORE_SERVER_URL": server.url, "LSMSTORE_ACCESS_KEY_ID": key,
                      "LSMSTORE_SECRET_ACCESS_KEY": secret}  # fmt: skip
        _uploads("remote", remote_env, root, args.skip_gib)
    finally:
        server.stop()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench client", description=__doc__)
    p.add_argument("--seconds", type=float, default=3.0, help="length of each timed phase")
    p.add_argument("--tasks", default="1,100,1000", help="task counts of the put phases")
    p.add_argument("--skip-gib", action="store_true", help="skip the 1 GiB upload")
    args = p.parse_args(argv)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"client benchmark, nproc {os.cpu_count()}, load average {load}, {stamp}")
    with tempfile.TemporaryDirectory(prefix="lsm-bench-client-") as tmp:
        import uvloop

        uvloop.run(_run(args, Path(tmp)))
    return 0
