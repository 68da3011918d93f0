"""``python -m lsmstore.testing.pause WORKER STEP[:SECONDS] [worker flags]``: a worker
process that pauses at a named step, for crash tests.

``WORKER`` is ``compactor`` or ``committer``; the rest of the command line goes to that
worker's main unchanged (``python -m WORKER [worker flags]`` otherwise).  When the
worker reaches ``STEP`` it logs ``{"event": "paused", "step": ..., "pid": ...}`` (plus
``repo`` and ``branch`` when the step knows them) and waits ``SECONDS``, or forever, so
that a test can kill it exactly there.  The steps:

* compactor: the job's steps (:data:`lsmstore.compaction.job.STEPS`); the compactor
  tests use ``before_swap:1`` (pause a second, then go on) and kills at each step;
* committer: ``range-uploaded`` (the first new range is stored, the metarange not yet)
  or one of the commit job's steps (:data:`lsmstore.commit.job.STEPS`).

The hooks are passed to the worker's main as arguments; the workers read nothing of
this from the environment.  The worker package is named on the command line, as with
``python -m``: lsmstore itself never imports the worker packages.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence

from lsmstore import layout
from lsmstore.commit.job import STEPS as COMMIT_STEPS
from lsmstore.compaction.job import STEPS as COMPACTION_STEPS
from lsmstore.service import log_event
from lsmstore.storage.base import ForwardingStore, ObjectStore, PutMode

log = logging.getLogger("lsmstore.testing.pause")

#: The steps each worker can pause at.
STEPS: dict[str, tuple[str, ...]] = {
    "compactor": COMPACTION_STEPS,
    "committer": ("range-uploaded", *COMMIT_STEPS),
}


class Pause:
    """A step hook that pauses at ``step``: waits ``seconds``, or forever when None.

    Called as ``pause(step)`` (the committer's ``on_step``) or ``pause(step, job)`` (the
    compactor's step hook; ``job.repo`` and ``job.branch`` go into the log line)."""

    def __init__(self, step: str, seconds: float | None = None) -> None:
        self.step = step
        self.seconds = seconds

    @classmethod
    def parse(cls, worker: str, spec: str) -> Pause:
        """``STEP`` or ``STEP:SECONDS`` for ``worker``; ValueError names what is wrong."""
        if worker not in STEPS:
            raise ValueError(f"worker {worker!r}: expected one of {tuple(STEPS)}")
        name, _, secs = spec.partition(":")
        if name not in STEPS[worker]:
            raise ValueError(f"{worker} step {name!r}: expected one of {STEPS[worker]}")
        return cls(name, float(secs) if secs else None)

    async def __call__(self, step: str, job: object = None) -> None:
        if step == self.step:
            await self.pause(step, job)

    async def pause(self, step: str, job: object = None) -> None:
        fields = {k: getattr(job, k) for k in ("repo", "branch") if hasattr(job, k)}
        log_event(log, "paused", level=logging.WARNING, step=step, pid=os.getpid(), **fields)
        for h in logging.getLogger().handlers:
            h.flush()
        if self.seconds is None:
            await asyncio.Event().wait()
        else:
            await asyncio.sleep(self.seconds)

    def wrap(self, store: ObjectStore) -> ObjectStore:
        """``store``, pausing after its first stored range when the step is
        ``range-uploaded`` (the committer's ``wrap_objects``)."""
        if self.step != "range-uploaded":
            return store
        return PauseAfterPut(store, layout.RANGES, lambda: self.pause("range-uploaded"))


class PauseAfterPut(ForwardingStore):
    """Passes everything to ``inner``; after a put of a key under ``prefix`` succeeded,
    awaits ``pause``."""

    def __init__(
        self, inner: ObjectStore, prefix: str, pause: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(inner)
        self._prefix = prefix
        self._pause = pause

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        await self.inner.put(key, data, mode)
        if key.startswith(self._prefix):
            await self._pause()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        sys.stderr.write(
            f"usage: python -m lsmstore.testing.pause {{{','.join(STEPS)}}} "
            "STEP[:SECONDS] [worker flags]\n"
        )
        return 2
    worker, spec, rest = args[0], args[1], args[2:]
    try:
        pause = Pause.parse(worker, spec)
    except ValueError as e:
        sys.stderr.write(f"{e}\n")
        return 2
    entry = importlib.import_module(f"{worker}.__main__")
    if worker == "compactor":
        return int(entry.main(rest, step=pause))
    return int(entry.main(rest, on_step=pause, wrap_objects=pause.wrap))


if __name__ == "__main__":
    sys.exit(main())
