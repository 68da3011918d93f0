"""The differences between two committed trees, key by key.

Both trees' ranges are walked together.  When both walks stand at the start of ranges
with equal IDs, those ranges hold the same records and are skipped without being read;
other ranges are read only when the walk reaches them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from lsmstore.graveler.source import RangeSource
from lsmstore.graveler.tree import TreeCursor
from lsmstore.types import Change


async def diff_trees(source: RangeSource, left_id: str, right_id: str) -> AsyncIterator[Change]:
    """The changes that turn tree ``left_id`` into tree ``right_id``, in key order."""
    if left_id == right_id:
        return
    left = TreeCursor(source, (await source.metarange(left_id)).ranges)
    right = TreeCursor(source, (await source.metarange(right_id)).ranges)
    while True:
        lpos, rpos = left.pos, right.pos
        if lpos is None and rpos is None:
            return
        lrec, rrec = left.record, right.record
        if lrec is None and rrec is None and lpos is not None and rpos is not None:
            if left.range.id == right.range.id:
                left.skip_range()
                right.skip_range()
                continue
        if lrec is None and lpos is not None and (rpos is None or lpos <= rpos):
            await left.enter()
            continue
        if rrec is None and rpos is not None and (lpos is None or rpos <= lpos):
            await right.enter()
            continue
        # Every cursor still at a header starts after the other's current record.
        if rrec is None or (lrec is not None and lrec.key < rrec.key):
            assert lrec is not None
            yield Change(lrec.key, "removed", lrec, None)
            left.next()
        elif lrec is None or rrec.key < lrec.key:
            yield Change(rrec.key, "added", None, rrec)
            right.next()
        else:
            if lrec.identity != rrec.identity:
                yield Change(lrec.key, "changed", lrec, rrec)
            left.next()
            right.next()
