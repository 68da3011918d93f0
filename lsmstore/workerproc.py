"""The parent side of the project's worker processes (the staging encoder, the commit
range encoder, the compaction merge worker): starting one, its handshake, sending
and reading messages (:mod:`lsmstore.workerpipe`), killing it and stopping it.

A worker is ``python -c "from <module> import main; main()"`` on a pair of pipes,
importing the project from the directory this one is imported from.  It is ready
once it has written the zero length (:data:`~lsmstore.workerpipe.READY`) and exits
when its stdin closes -- on :meth:`stop`/:meth:`close`, or when this process dies
(even by ``kill -9``).

:class:`AsyncWorkerProcess` talks through the event loop's pipes (for workers used
from one event loop); :class:`WorkerProcess` through blocking pipes, called from
threads, so any event loop (or none) may use it.  What the caller does when a worker
cannot start or dies -- fall back, restart, fail the request -- stays with the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from lsmstore.workerpipe import FRAME, READY, read_exactly, read_message, write_message

#: The directory the project is imported from (its workers import it from there too).
_ROOT = str(Path(__file__).resolve().parents[1])


def _command(module: str) -> list[str]:
    return [sys.executable, "-c", f"from {module} import main; main()"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
    return env


def pickle_message(msg: tuple[Any, ...]) -> bytes:
    """The bytes :meth:`AsyncWorkerProcess.write` sends for ``msg``."""
    return pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)


class AsyncWorkerProcess:
    """A started worker on the event loop's pipes (:meth:`start`)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self._in, self._out = proc.stdin, proc.stdout

    @classmethod
    async def start(cls, module: str, ready_within: float) -> AsyncWorkerProcess:
        """Start ``module``'s worker and wait up to ``ready_within`` seconds for it to be
        ready; raises (OSError, TimeoutError, ...) with the worker killed and reaped
        if it is not."""
        proc = await asyncio.create_subprocess_exec(
            *_command(module),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=_env(),
        )
        worker = cls(proc)
        try:
            ready = await asyncio.wait_for(worker._out.readexactly(FRAME.size), ready_within)
            if FRAME.unpack(ready)[0] != 0:
                raise RuntimeError("unexpected greeting")
        except BaseException:
            worker.kill()
            await proc.wait()
            raise
        return worker

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def alive(self) -> bool:
        """Not known to have exited."""
        return self.proc.returncode is None

    def write(self, msg: tuple[Any, ...]) -> None:
        """Queue ``msg`` on the worker's stdin (pickled first: a message that cannot be
        pickled raises before anything is written); :meth:`drain` sends it."""
        self.write_pickled(pickle_message(msg))

    def write_pickled(self, data: bytes) -> None:
        """:meth:`write` of a message :func:`pickle_message` made (e.g. in a thread,
        for a large one: the event loop stays free while it is pickled)."""
        self._in.write(FRAME.pack(len(data)))
        self._in.write(data)

    async def drain(self) -> None:
        await self._in.drain()

    async def send(self, msg: tuple[Any, ...]) -> None:
        """:meth:`write` and :meth:`drain`; ConnectionError when the worker is gone."""
        self.write(msg)
        await self._in.drain()

    async def receive(self) -> tuple[Any, ...]:
        """The worker's next message; asyncio.IncompleteReadError when it has exited."""
        (n,) = FRAME.unpack(await self._out.readexactly(FRAME.size))
        msg: tuple[Any, ...] = pickle.loads(await self._out.readexactly(n))
        return msg

    def kill(self) -> None:
        """SIGKILL the worker without reaping it.

        ``proc.kill()`` on the standard event loop goes through
        ``subprocess.Popen.kill``, which first polls -- and so reaps -- a worker that
        has just exited (it exits as soon as its stdin closes).  asyncio's child
        watcher, still waiting for that pid, then logs "Unknown child process pid ...,
        will report returncode 255".  ``os.kill`` does not reap: until the watcher
        has, the pid is still our (zombie) child, never another process's."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)

    async def wait(self) -> int:
        """Wait for the worker to exit (and reap it); its return code."""
        return await self.proc.wait()

    async def stop(self, grace: float = 5.0) -> None:
        """Close its stdin and wait for it to exit (what it was sent finishes first);
        killed after ``grace`` seconds.  Reaped either way."""
        self._in.close()
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            self.kill()
            await self.proc.wait()


class WorkerProcess:
    """A worker on blocking pipes, started by the constructor (raises OSError when it
    does not start).  Each method blocks: call it from a thread, not an event loop."""

    def __init__(self, module: str, name: str) -> None:
        """``name``: the worker's name in errors."""
        self.name = name
        self.proc = subprocess.Popen(
            _command(module), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env()
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin, self.proc.stdout
        if read_exactly(self._out, FRAME.size) != READY:
            self.kill()
            raise OSError(f"{name} did not start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """Not known to have exited."""
        return self.proc.poll() is None

    def send(self, msg: tuple[Any, ...]) -> None:
        """Write ``msg``, big byte strings out of band (the child reads with
        :mod:`lsmstore.workerpipe`)."""
        write_message(self._in, msg, out_of_band=True)

    def receive(self) -> tuple[Any, ...]:
        """The worker's next message; OSError when it has exited."""
        msg = read_message(self._out)
        if msg is None:
            raise OSError(f"{self.name} exited")
        return msg

    def request(self, msg: tuple[Any, ...]) -> tuple[Any, ...]:
        """Send ``msg`` and return the next message (its answer)."""
        self.send(msg)
        return self.receive()

    def kill(self) -> None:
        """SIGKILL the worker and reap it."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(5)

    def close(self, timeout: float = 10.0) -> None:
        """Close its stdin and wait for it to exit (a request being answered finishes
        first); killed after ``timeout`` seconds."""
        with contextlib.suppress(OSError):
            self._in.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
