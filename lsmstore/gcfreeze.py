"""Keep CPython's full garbage collections short in a long-running writer process.

A full (generation 2) collection walks every container object the collector tracks.
In a client process most of them are its startup state -- modules, classes, functions,
their dicts: ~24,000 objects in the write benchmark, ~2/3 of all tracked objects --
which live as long as the process, so every full collection walked them for nothing
(8-15 ms of CPU each under the 1,000-task load on the 2-core machine, BENCHMARKS.md).
:func:`freeze_startup_state` runs once per process, on the first write: one full
collection (so no garbage is frozen), then ``gc.freeze()`` moves the survivors to the
permanent generation, which later collections skip (1.5-5 ms each in the same run).

Objects frozen are never collected: a reference cycle created before the first write
and dropped afterwards stays in memory.  That is the startup state, created once; set
``gc_freeze = "off"`` where an application builds and drops large cyclic structures
before it writes.

The same first write raises the young generation's threshold from CPython's default
(700 net container allocations) to :data:`YOUNG_THRESHOLD`.  A writer's batch keeps
about three young containers alive per waiting put (its future, the caller's
coroutine, the staged record) until the acknowledgement, so with 1,000 waiting puts
a young collection ran every ~850 puts, walked the ~3,000 live ones, found nothing to
free and promoted them: 0.45-0.55 us of the loop's 3.5-5 us per put.  At 7,000 they
die by reference counting before a collection comes (BENCHMARKS.md, "The embedded
default at full speed").  A threshold the application set itself is left alone.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_done = False

#: The young generation's threshold a writer process runs with (module docstring).
YOUNG_THRESHOLD = 7000
#: CPython's own defaults for it (3.11-3.12, 3.13): any other value is the
#: application's choice.
_DEFAULT_YOUNG = (700, 2000)


def freeze_startup_state() -> bool:
    """Collect, then freeze what survived, and raise the young generation's threshold
    to :data:`YOUNG_THRESHOLD` if it is CPython's default; only the first call does
    anything.  True if this call froze."""
    global _done
    with _lock:
        if _done:
            return False
        _done = True
    if not gc.isenabled():  # the application manages the collector itself
        return False
    gc.collect()
    gc.freeze()
    young, *older = gc.get_threshold()
    if young in _DEFAULT_YOUNG:
        gc.set_threshold(YOUNG_THRESHOLD, *older)
    return True


@contextmanager
def paused() -> Iterator[None]:
    """The cyclic collector off for the block (when it was on), on again after.

    For a worker process's bounded CPU-bound request that allocates a container per
    record and makes few reference cycles: collections during it would find nothing
    to free and walk what it built; the cycles it made are collected afterwards."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
