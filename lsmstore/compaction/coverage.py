"""Covered spans: runs of an L2 file's tombstones that delete every key the base holds there.

A branch that deletes most of a prefix stages one tombstone per key; a listing merges
them with the base tree and drops each pair, so its first page costs a walk over every
deleted key.  When compaction writes an L2 file it finds the runs of consecutive
tombstones in it (no live record between them) and checks them against the branch's
base commit: a span ``[lo, hi]`` of at least :data:`MIN_SPAN_TOMBSTONES` tombstones
such that every key the base holds in ``[lo, hi]`` is one of them is *covered* -- the
file and the base together hold nothing live there.  The spans and the base commit go
into the file's sidecar (docs/format.md, "Staging files"); a listing of a snapshot whose
base is that commit seeks past a covered span in the L2 file and in the base tree at
once (lsmstore.staging.reader), while newer L1 files are still merged over it.

The file keeps its point tombstones: point reads, the committer and every other reader
are unaffected, and a span over another base is ignored.  Spans are an optimisation
computed from immutable inputs (the file's records, the base commit's tree), so a crash
anywhere leaves either the sidecar with them or none of the file.

Cost: the file's records are read once more (in a thread) when it holds at least
:data:`MIN_SPAN_TOMBSTONES` tombstones; the base ranges a run overlaps are fetched
only when the ranges inside the run hold at most :data:`MAX_BASE_PER_TOMBSTONE` keys per
tombstone (a run of sparse deletes over a large tree is not worth a span), and the walk
re-seeks the base at the first key a run does not delete, so it is linear in the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from lsmstore.graveler.commit import read_commit
from lsmstore.graveler.metarange import Metarange
from lsmstore.graveler.ranges import RangeInfo
from lsmstore.graveler.source import DirectSource
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.staging.files import decode_sidecar, encode_sidecar
from lsmstore.storage.base import ObjectStore

#: Tombstones a span holds at least: a shorter run is walked by a listing in a few us.
MIN_SPAN_TOMBSTONES = 64
#: A run is checked only if the base ranges lying wholly inside it hold at most this
#: many keys per tombstone of the run.  A span's base keys are all its tombstones, so a
#: run whose ranges hold many more keys has short spans at best; the bound also bounds
#: the base ranges a run holds in memory to about twice the run's own records.
MAX_BASE_PER_TOMBSTONE = 2
#: Base ranges kept parsed between the files of one job (neighbouring files share one).
RANGES_KEPT = 4

#: ``(lo, end)``: the keys ``lo <= k < end``; ``end`` empty: no bound.
Span = tuple[bytes, bytes]


@dataclass(frozen=True, slots=True)
class Run:
    """Consecutive tombstones of a file and the key of the file's next record (b"":
    none)."""

    keys: list[bytes]
    next_key: bytes


def tombstone_runs(sst: SSTReader, min_len: int = MIN_SPAN_TOMBSTONES) -> list[Run]:
    """The maximal runs of consecutive tombstones in ``sst`` holding ``min_len`` or more."""
    runs: list[Run] = []
    run: list[bytes] = []
    for _, (keys, records) in sst.blocks():
        for key, rec in zip(keys, records, strict=True):
            if rec[2] is None:
                run.append(key)
            elif run:
                if len(run) >= min_len:
                    runs.append(Run(run, key))
                run = []
    if len(run) >= min_len:
        runs.append(Run(run, b""))
    return runs


class _BaseKeys:
    """The keys of a few consecutive base ranges; ``after``: the base's first key past
    them (b"": none)."""

    def __init__(self, readers: Sequence[SSTReader], after: bytes = b"") -> None:
        self.readers = list(readers)
        self.last = [r.last_key for r in self.readers]
        self.after = after

    def between(self, lo: bytes, hi: bytes) -> tuple[list[bytes], bytes]:
        """The keys ``lo <= k <= hi`` in order, and the first key past ``hi`` (b"":
        none).  Whole blocks are taken as lists (no Python step per key)."""
        out: list[bytes] = []
        for reader in self.readers[bisect_left(self.last, lo) :]:
            for j, (keys, _records) in reader.blocks(lo):
                out.extend(itertools.islice(keys, j, None) if j else keys)
                if out and out[-1] > hi:
                    cut = bisect_right(out, hi)
                    return out[:cut], out[cut]
        return out, self.after


def _end(*keys: bytes) -> bytes:
    """The smallest of ``keys`` that bound (b"" is no bound; all b"": b"")."""
    bounds = [k for k in keys if k]
    return min(bounds) if bounds else b""


def covered_spans(run: Run, base: _BaseKeys, min_len: int = MIN_SPAN_TOMBSTONES) -> list[Span]:
    """The covered spans of ``run`` (nothing live between its tombstones): ``[lo, end)``
    holding ``min_len`` of its tombstones or more, in which every key of ``base`` is
    one of them; ``end`` is the first key past the span's last tombstone that the file
    or the base holds (b"": neither holds one), so the spans of neighbouring files
    meet when nothing lies between them.

    The base keys the run does not delete cut it: set lookups and bisections, no
    Python step per tombstone."""
    keys = run.keys
    inside, past = base.between(keys[0], keys[-1])
    members = set(keys)
    cuts = [b for b in inside if b not in members]
    spans: list[Span] = []
    first = 0
    for cut in cuts:
        stop = bisect_left(keys, cut, first)
        if stop - first >= min_len:
            spans.append((keys[first], cut))
        first = stop
    if len(keys) - first >= min_len:
        spans.append((keys[first], _end(past, run.next_key)))
    return spans


def _inner_count(ranges: Sequence[RangeInfo], lo: bytes, hi: bytes) -> int:
    return sum(r.count for r in ranges if lo < r.min_key and r.max_key < hi)


class Coverage:
    """Adds covered spans over commit ``base`` to the sidecars of one job's files."""

    def __init__(self, objects: ObjectStore, base: str) -> None:
        self.objects = objects
        self.base = base
        self.source = DirectSource(objects)
        self._metarange: Metarange | None = None
        self._ranges: OrderedDict[str, SSTReader] = OrderedDict()

    async def _mr(self) -> Metarange:
        if self._metarange is None:
            commit = await read_commit(self.objects, self.base)
            self._metarange = await self.source.metarange(commit.metarange_id)
        return self._metarange

    async def _reader(self, range_id: str) -> SSTReader:
        reader = self._ranges.get(range_id)
        if reader is None:
            reader = self._ranges[range_id] = await self.source.reader(range_id)
            while len(self._ranges) > RANGES_KEPT:
                self._ranges.popitem(last=False)
        else:
            self._ranges.move_to_end(range_id)
        return reader

    async def cover(self, sst: bytes, meta: bytes, name: str) -> bytes:
        """``meta`` (the sidecar of ``sst``) with the file's covered spans, or unchanged
        when it has none."""
        if not self.base:
            return meta
        sc = decode_sidecar(meta, name)
        if sc.tombstones < MIN_SPAN_TOMBSTONES:
            return meta
        runs = await asyncio.to_thread(tombstone_runs, SSTReader(sst, name))
        if not runs:
            return meta
        mr = await self._mr()
        spans: list[Span] = []
        for run in runs:
            lo, hi = run.keys[0], run.keys[-1]
            first = mr.index(lo)
            over: list[RangeInfo] = []
            for r in mr.ranges[first:]:
                if r.min_key > hi:
                    break
                over.append(r)
            if _inner_count(over, lo, hi) > MAX_BASE_PER_TOMBSTONE * len(run.keys):
                continue
            later = first + len(over)
            after = mr.ranges[later].min_key if later < len(mr.ranges) else b""
            readers = [await self._reader(r.id) for r in over]
            spans += await asyncio.to_thread(covered_spans, run, _BaseKeys(readers, after))
        if not spans:
            return meta
        return encode_sidecar(dataclasses.replace(sc, base=self.base, covered=tuple(spans)))
