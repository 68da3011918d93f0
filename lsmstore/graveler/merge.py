"""Three-way merge of committed trees (the lakeFS data model's merge table).

Per key, with ``b``, ``d``, ``s`` the base, destination and source records (each absent
or present; two are *equal* when both are absent or both present with one identity):

=====================  ==========================================
case                   result
=====================  ==========================================
``d == s``             ``d`` (unchanged, or changed identically)
``d == b``             ``s`` (only the source changed, added or deleted)
``s == b``             ``d`` (only the destination changed)
otherwise              conflict: changed differently on both sides, added
                       differently, or changed on one side and deleted on the other
=====================  ==========================================

A conflict takes ``s`` under ``"source-wins"`` and ``d`` under ``"dest-wins"`` (absent
means deleted).  Without a strategy the merge writes no metarange and raises
:class:`MergeConflictError` listing the first conflicting keys (up to ``max_conflicts``).

Range shortcuts, taken without reading the ranges: destination and source ranges with
equal IDs; equal bounds where one side's range is the base range (take the other); a
range on one side over which the other side has no keys, which either the base does not
overlap (added: take it) or the base holds identically (deleted on the other side: drop
it).  Whole ranges go to the output only when it has just been cut and the range is
closed (or nothing follows it), as in :mod:`lsmstore.graveler.apply`, so merged trees
stay canonical.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

from lsmstore.errors import InvalidInputError, MergeConflictError
from lsmstore.graveler.metarange import Metarange, store_metarange
from lsmstore.graveler.range_encoder import RangeEncoder
from lsmstore.graveler.ranges import RangeInfo, RangePolicy, RangeWriter
from lsmstore.graveler.record import Record
from lsmstore.graveler.source import RangeSource
from lsmstore.graveler.tree import TreeCursor
from lsmstore.storage.base import ObjectStore
from lsmstore.types import STRATEGIES, Strategy

MAX_CONFLICTS = 1000


@dataclass(frozen=True, slots=True)
class MergeResult:
    metarange_id: str
    ranges_read: int  # ranges fetched from the three trees
    ranges_written: int  # new range objects uploaded
    ranges_reused: int  # output ranges already stored
    records_written: int  # records in the uploaded ranges
    conflicts_resolved: int  # conflicting keys settled by the strategy


class _Base(enum.Enum):
    NONE = "no base key in the interval"
    SAME = "the base range is the given range"
    OTHER = "the base holds other keys there"


def _same(x: Record | None, y: Record | None) -> bool:
    if x is None or y is None:
        return x is y
    return x.identity == y.identity


class _Merger:
    def __init__(
        self,
        source: RangeSource,
        base: Metarange,
        dest: Metarange,
        src: Metarange,
        writer: RangeWriter,
        policy: RangePolicy,
        strategy: Strategy | None,
        max_conflicts: int,
    ) -> None:
        self.base = TreeCursor(source, base.ranges)
        self.dest = TreeCursor(source, dest.ranges)
        self.src = TreeCursor(source, src.ranges)
        self.writer = writer
        self.policy = policy
        self.strategy = strategy
        self.max_conflicts = max_conflicts
        self.conflicts: list[bytes] = []
        self.resolved = 0

    def _can_take(self, info: RangeInfo, last: bool) -> bool:
        """Whether ``info`` may go to the output whole (``last``: nothing follows it)."""
        # After a conflict nothing is written: any range can be "taken" (skipped).
        return bool(self.conflicts) or (self.writer.empty and (last or self.policy.is_closed(info)))

    def _both_last(self) -> bool:
        dest, src = self.dest, self.src
        return dest.i + 1 >= len(dest.ranges) and src.i + 1 >= len(src.ranges)

    async def _take(self, info: RangeInfo) -> None:
        if not self.conflicts:
            await self.writer.add_range(info)

    async def _write(self, record: Record | None) -> None:
        if record is not None and not self.conflicts:
            await self.writer.add(record)

    def _classify_base(self, info: RangeInfo) -> _Base:
        """What the base holds in ``[info.min_key, info.max_key]`` (reads nothing)."""
        base = self.base
        base.skip_to(info.min_key)
        pos = base.pos
        if pos is None or pos > info.max_key:
            return _Base.NONE
        if base.record is None and base.range.id == info.id:
            return _Base.SAME
        return _Base.OTHER

    async def _one_side_range(self, side: TreeCursor, other: TreeCursor) -> bool:
        """``side`` stands at a range over which the other side has no keys: settle it
        whole if the base allows; False when it must be entered."""
        info = side.range
        kind = self._classify_base(info)
        if kind is _Base.SAME:  # unchanged here, deleted on the other side
            side.skip_range()
            self.base.skip_range()
            return True
        last = side.i + 1 == len(side.ranges) and not other.valid
        if kind is _Base.NONE and self._can_take(info, last):  # added on this side only
            await self._take(info)
            side.skip_range()
            return True
        return False

    async def _headers(self) -> bool:
        """Range-level steps; False when the next step is a key."""
        dest, src = self.dest, self.src
        dpos, spos = dest.pos, src.pos
        d_head = dest.record is None and dpos is not None
        s_head = src.record is None and spos is not None
        if d_head and s_head:
            d, s = dest.range, src.range
            if d.id == s.id and self._can_take(d, self._both_last()):
                await self._take(d)
                dest.skip_range()
                src.skip_range()
                return True
            if d.id != s.id and d.min_key == s.min_key and d.max_key == s.max_key:
                kind = self._classify_base(d)
                if kind is not _Base.NONE and self.base.record is None:
                    b = self.base.range.id
                    take = s if b == d.id else d if b == s.id else None
                    if take is not None and self._can_take(take, self._both_last()):
                        await self._take(take)
                        dest.skip_range()
                        src.skip_range()
                        return True
        if s_head and (dpos is None or src.range.max_key < dpos):
            if await self._one_side_range(src, dest):
                return True
        if d_head and (spos is None or dest.range.max_key < spos):
            if await self._one_side_range(dest, src):
                return True
        if d_head and (spos is None or (dpos is not None and dpos <= spos)):
            await dest.enter()
            return True
        if s_head and (dpos is None or (spos is not None and spos <= dpos)):
            await src.enter()
            return True
        return False

    async def _key(self) -> None:
        """Merge the smallest key under the two cursors (at least one is inside a range)."""
        drec, srec = self.dest.record, self.src.record
        if drec is not None and (srec is None or drec.key <= srec.key):
            key = drec.key
        else:
            assert srec is not None
            key = srec.key
        d = drec if drec is not None and drec.key == key else None
        s = srec if srec is not None and srec.key == key else None
        if d is not None and s is not None and d.identity == s.identity:
            await self._write(d)
        else:
            b = await self.base.lookup(key)
            if _same(d, b):
                await self._write(s)
            elif _same(s, b):
                await self._write(d)
            elif self.strategy == "source-wins":
                self.resolved += 1
                await self._write(s)
            elif self.strategy == "dest-wins":
                self.resolved += 1
                await self._write(d)
            else:
                self.conflicts.append(key)
        if d is not None:
            self.dest.next()
        if s is not None:
            self.src.next()

    async def run(self) -> None:
        while self.dest.valid or self.src.valid:
            if len(self.conflicts) >= self.max_conflicts:
                return
            if not await self._headers():
                await self._key()

    @property
    def ranges_read(self) -> int:
        return self.base.ranges_read + self.dest.ranges_read + self.src.ranges_read


async def merge_trees(
    source: RangeSource,
    store: ObjectStore,
    base_id: str,
    dest_id: str,
    source_id: str,
    *,
    strategy: Strategy | None = None,
    policy: RangePolicy,
    max_in_flight: int = 4,
    max_conflicts: int = MAX_CONFLICTS,
    encoder: RangeEncoder | None = None,
) -> MergeResult:
    """Merge tree ``source_id`` into tree ``dest_id`` given their common ancestor
    ``base_id`` (EMPTY_METARANGE_ID when they have none); the merged tree's ID.

    Raises :class:`MergeConflictError` (``keys``: the first ``max_conflicts`` conflicting
    keys, in key order) when conflicts remain and no strategy resolves them;
    :class:`InvalidInputError` for an unknown strategy.
    """
    if strategy not in STRATEGIES:
        raise InvalidInputError(
            f"unknown merge strategy {strategy!r}: expected None, 'source-wins' or 'dest-wins'"
        )
    if max_conflicts < 1:
        raise InvalidInputError(f"max_conflicts must be >= 1, got {max_conflicts}")
    if source_id in (base_id, dest_id):
        return MergeResult(dest_id, 0, 0, 0, 0, 0)  # nothing to bring over
    if dest_id == base_id:
        return MergeResult(source_id, 0, 0, 0, 0, 0)  # fast-forward
    base, dest, src = await asyncio.gather(
        source.metarange(base_id), source.metarange(dest_id), source.metarange(source_id)
    )
    existing = {r.id for tree in (base, dest, src) for r in tree.ranges}
    writer = RangeWriter(
        store, policy, max_in_flight=max_in_flight, existing=existing, encoder=encoder
    )
    merger = _Merger(source, base, dest, src, writer, policy, strategy, max_conflicts)
    async with writer:
        await merger.run()
        if merger.conflicts:
            await writer.abort()
            keys = merger.conflicts
            more = " or more" if len(keys) >= max_conflicts else ""
            raise MergeConflictError(
                f"merging {source_id} into {dest_id}: {len(keys)}{more} conflicting keys, "
                f"first {keys[0]!r}",
                keys=keys,
            )
        ranges = await writer.finish()
    ids = [r.id for r in ranges]
    if ids == [r.id for r in dest.ranges]:
        metarange_id = dest.id
    elif ids == [r.id for r in src.ranges]:
        metarange_id = src.id
    else:
        metarange_id = await store_metarange(store, ranges)
    return MergeResult(
        metarange_id,
        ranges_read=merger.ranges_read,
        ranges_written=writer.ranges_written,
        ranges_reused=writer.ranges_reused,
        records_written=writer.records_written,
        conflicts_resolved=merger.resolved,
    )
