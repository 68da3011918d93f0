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
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_done = False


def freeze_startup_state() -> bool:
    """Collect, then freeze what survived; only the first call does anything.  True if
    this call froze."""
    global _done
    with _lock:
        if _done:
            return False
        _done = True
    if not gc.isenabled():  # the application manages the collector itself
        return False
    gc.collect()
    gc.freeze()
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
