"""The merge of one compaction job as a synchronous event stream (no I/O, no event loop).

A job merges its L1 prefix (newest wins, tombstones kept) with the branch's L2 and cuts
the result into L2 files of about ``target`` bytes (docs/compaction.md, "The job").
:func:`plan` does the merging and cutting and leaves every side effect to its driver,
so the same code runs in two places:

* on the event loop (:mod:`lsmstore.compaction.job`, the worker process ``python -m compactor``):
  the driver fetches, encodes in a thread and uploads, and yields to the loop at each
  :data:`TICK`;
* in a merge process (:mod:`lsmstore.compaction.merge_worker`, the in-process compactor): the
  records never exist in the client process, whose event loop and garbage collector
  only see bytes going through a pipe.

Events (tuples; the generator is driven with ``send``):

``(NEED, i)``
    the merge reached L2 file ``i`` and must read it: send back an iterator of its
    records (an :class:`~lsmstore.graveler.sst_reader.SSTReader`).
``(REUSE, i)``
    L2 file ``i`` is kept by id, unread: no prefix key falls in it and the output has
    just been cut before it (or the pending output is at least half the target); small
    files (< target / 4) are absorbed instead.
``(FILE, records)``
    an output file, records in key order (tombstones included).
``(TICK,)``
    every :data:`YIELD_EVERY` records merged (the loop driver's chance to yield).

The driver sends None for every event but ``NEED``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lsmstore.graveler.record import Record
from lsmstore.staging.merge import merge_newest

NEED = "need"
REUSE = "reuse"
FILE = "file"
TICK = "tick"

#: Records merged between two TICK events (a millisecond or two of CPU).
YIELD_EVERY = 256

Event = tuple[Any, ...]
Plan = Generator[Event, Iterable[Record] | None, None]


@dataclass(frozen=True, slots=True)
class L2Input:
    """What the plan needs to know of an L2 file before reading it (from its sidecar)."""

    first_key: bytes
    last_key: bytes
    data_bytes: int


def record_bytes(rec: Record) -> int:
    """Key + value bytes, as a sidecar's ``data_bytes`` counts them."""
    return len(rec.key) + (len(rec.value) if rec.value is not None else 0)


class _Peek:
    """A sorted record iterator with one record of lookahead."""

    __slots__ = ("_it", "head")

    def __init__(self, it: Iterator[Record]) -> None:
        self._it = it
        self.head: Record | None = next(it, None)

    def below(self, limit: bytes) -> Iterator[Record]:
        """Records with key < ``limit``."""
        while self.head is not None and self.head.key < limit:
            yield self.head
            self.head = next(self._it, None)

    def through(self, limit: bytes) -> Iterator[Record]:
        """Records with key <= ``limit``."""
        while self.head is not None and self.head.key <= limit:
            yield self.head
            self.head = next(self._it, None)

    def rest(self) -> Iterator[Record]:
        while self.head is not None:
            yield self.head
            self.head = next(self._it, None)


def plan(l1_newest_first: Sequence[Iterable[Record]], l2: Sequence[L2Input], target: int) -> Plan:
    """The merge of the L1 sources (newest first) with L2 (key order); see the module
    docstring for the events."""
    l1 = _Peek(merge_newest(l1_newest_first))
    pending: list[Record] = []
    pending_bytes = 0
    merged = 0

    def add(records: Iterator[Record]) -> Plan:
        nonlocal pending, pending_bytes, merged
        for rec in records:
            pending.append(rec)
            pending_bytes += len(rec.key) + (len(rec.value) if rec.value is not None else 0)
            if pending_bytes >= target:
                out, pending, pending_bytes = pending, [], 0
                yield (FILE, out)
                del out
            merged += 1
            if not merged % YIELD_EVERY:
                yield (TICK,)

    for i, inp in enumerate(l2):
        yield from add(l1.below(inp.first_key))
        touched = l1.head is not None and l1.head.key <= inp.last_key
        reusable = inp.data_bytes >= target // 4 and (not pending or pending_bytes >= target // 2)
        if not touched and reusable:
            if pending:
                out, pending, pending_bytes = pending, [], 0
                yield (FILE, out)
                del out
            yield (REUSE, i)
            continue
        reader = yield (NEED, i)
        assert reader is not None, "NEED must be answered with the file's records"
        # L1 is newer than L2: it comes first.
        yield from add(merge_newest([l1.through(inp.last_key), iter(reader)]))
        del reader
    yield from add(l1.rest())
    if pending:
        yield (FILE, pending)
