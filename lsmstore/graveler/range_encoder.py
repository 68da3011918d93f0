"""Naming and encoding committed ranges: in a thread, or spread over a process pool.

Once :class:`~lsmstore.graveler.ranges.RangeWriter` has cut a range, what is left is
pure CPU work on that range alone: its ID (three SHA-256 per record, then one over the
record IDs) and its SST.  A commit that rewrites many ranges (random changes touch
every range of a big tree) can therefore use every core: :class:`RangeEncoder` runs
:func:`encode_range` in a pool of worker processes, one range per task, while the
event loop goes on merging and cutting the next ranges.  The result is the same
whichever way a range is encoded -- the ID comes from the records alone -- so a
commit's range and metarange IDs do not depend on it (``tests/test_range_encoder.py``).

The pool is started on first use, sized to the machine (``os.cpu_count()``) unless
told otherwise, and uses the ``spawn`` start method (the parent has threads: forking
it could copy a held lock).  A writer sends its first range, and ranges under
``pool_min_bytes`` (256 KiB), to a thread, so a commit that rewrites one range never
waits for the pool to start; a pool that cannot start or breaks is replaced by threads
for good.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import multiprocessing
import os
import threading
from collections.abc import Container, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_writer import RANGE, write_committed_sst

log = logging.getLogger(__name__)

_sha256 = hashlib.sha256


def range_id(keys: Sequence[bytes], identities: Sequence[bytes]) -> str:
    """The fileID of records given as columns (see :mod:`lsmstore.graveler.ids`)."""
    h = _sha256()
    update = h.update
    for key, ident in zip(keys, identities, strict=True):
        update(_sha256(_sha256(key).digest() + _sha256(ident).digest()).digest())
    return h.hexdigest()


def encode_range(
    keys: list[bytes],
    identities: list[bytes],
    values: list[bytes],
    skip: Container[str] = frozenset(),
) -> tuple[str, bytes | None]:
    """``(id, sst)`` of a range's records (key order, no tombstones); ``sst`` is None
    when the id is in ``skip`` (already stored)."""
    rid = range_id(keys, identities)
    if rid in skip:
        return rid, None
    records = list(map(Record, keys, identities, values))
    return rid, write_committed_sst(records, RANGE)


class RangeEncoder:
    """Runs :func:`encode_range` in a thread or in a process pool (module docstring)."""

    def __init__(self, processes: int | None = None, *, pool_min_bytes: int = 256 << 10) -> None:
        """``processes``: size of the pool (None: ``os.cpu_count()``, or threads only on
        a machine with one CPU); 0: threads only.  Writers send ranges smaller than
        ``pool_min_bytes`` (estimated size) to a thread: shipping them costs more than
        encoding them."""
        self.pool_min_bytes = pool_min_bytes
        if processes is None:
            cpus = os.cpu_count() or 1
            processes = cpus if cpus > 1 else 0
        self.processes = max(0, processes)
        self.ranges_in_pool = 0
        self.ranges_in_thread = 0
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._broken = False

    def _get_pool(self) -> ProcessPoolExecutor | None:
        if not self.processes or self._broken:
            return None
        with self._lock:
            if self._pool is None:
                try:
                    self._pool = ProcessPoolExecutor(
                        self.processes, mp_context=multiprocessing.get_context("spawn")
                    )
                except (OSError, ValueError) as e:
                    log.warning("range encoder pool did not start (%s); using threads", e)
                    self._broken = True
            return self._pool

    async def encode(
        self, records: Sequence[Record], skip: Container[str], *, in_pool: bool = True
    ) -> tuple[str, bytes | None]:
        """:func:`encode_range` of ``records``; in the pool when ``in_pool`` and there
        is one, else in a thread."""
        keys = [r[0] for r in records]
        identities = [r[1] for r in records]
        values: list[bytes] = [r[2] for r in records]  # type: ignore[misc]  # no tombstones
        pool = self._get_pool() if in_pool else None
        if pool is not None:
            # sent along (pickled); a Container that is not a set is checked here after
            frozen = frozenset(skip) if isinstance(skip, set | frozenset) else frozenset()
            try:
                out = await asyncio.get_running_loop().run_in_executor(
                    pool, encode_range, keys, identities, values, frozen
                )
            except BrokenProcessPool as e:
                log.warning("range encoder pool broke (%s); using threads", e)
                self._broken = True
            else:
                self.ranges_in_pool += 1
                return (out[0], None) if out[0] in skip else out
        self.ranges_in_thread += 1
        return await asyncio.to_thread(encode_range, keys, identities, values, skip)

    def close(self) -> None:
        """Stop the pool (ranges being encoded finish first)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=False)


_shared: RangeEncoder | None = None
_shared_lock = threading.Lock()


def shared_range_encoder() -> RangeEncoder:
    """The process's default encoder (a pool sized to the machine, started on first
    use, stopped at interpreter exit)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = RangeEncoder()
        return _shared
