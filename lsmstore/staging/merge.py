"""K-way merge of sorted record streams, newest wins.

Every source yields records in strictly increasing key order.  Sources are given
**newest first**: when several hold a key, the record of the lowest-numbered source
is kept and the others are dropped.  Tombstones are yielded like any record (the
caller decides: a reader hides them, a compactor keeps them, a committer applies
them); :func:`live` drops them.

Used by the reader (listing), the compactor (L1 prefix + L2 -> L2) and the
committer (staged changes over the base).
"""

from __future__ import annotations

import heapq
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Iterable,
    Iterator,
    Sequence,
)
from operator import attrgetter

from lsmstore.graveler.record import Record

_key = attrgetter("key")


def merge_newest(sources: Sequence[Iterable[Record]]) -> Iterator[Record]:
    """One record per key: the one from the newest (lowest-index) source holding it."""
    if len(sources) == 1:
        yield from sources[0]
        return
    prev: bytes | None = None
    # heapq.merge is stable: on equal keys, items of earlier iterables come first.
    for rec in heapq.merge(*sources, key=_key):
        if rec.key != prev:
            prev = rec.key
            yield rec


def live(records: Iterable[Record]) -> Iterator[Record]:
    """Drop tombstones."""
    for rec in records:
        if rec.value is not None:
            yield rec


async def amerge_newest(
    sources: Sequence[Iterable[Record] | AsyncIterable[Record]],
) -> AsyncGenerator[Record]:
    """:func:`merge_newest` over a mix of sync and async sources (e.g. staging files
    held in memory over a lazily fetched base tree)."""
    sync_sources = [s for s in sources if not isinstance(s, AsyncIterable)]
    if len(sync_sources) == len(sources):
        for rec in merge_newest(sync_sources):
            yield rec
        return
    # heap entries: (key, source index, record, source)
    heap: list[tuple[bytes, int, Record, Iterator[Record] | AsyncIterator[Record]]] = []
    for i, src in enumerate(sources):
        if isinstance(src, AsyncIterable):
            ait = aiter(src)
            first = await anext(ait, None)
            if first is not None:
                heap.append((first.key, i, first, ait))
        else:
            it = iter(src)
            first_s = next(it, None)
            if first_s is not None:
                heap.append((first_s.key, i, first_s, it))
    heapq.heapify(heap)
    prev: bytes | None = None
    while heap:
        key, i, rec, it2 = heap[0]
        if key != prev:
            prev = key
            yield rec
        nxt = await anext(it2, None) if isinstance(it2, AsyncIterator) else next(it2, None)
        if nxt is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (nxt.key, i, nxt, it2))
