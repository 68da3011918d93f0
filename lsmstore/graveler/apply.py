"""Apply a sorted stream of changes to a committed tree, reusing untouched ranges.

The base's ranges and the changes are walked together.  A base range is passed to the
output whole -- by ID, without being fetched -- when the output has just been cut, the
next change lies beyond the range, and the range is *closed* (the policy cuts at its
last key; see :mod:`lsmstore.graveler.ranges`).  Any other range is read and its
records merged with the changes: a tombstone drops the key, a change with the base
record's identity keeps the base record, anything else replaces or inserts.

Why "just cut": the output is cut by the same content-defined policy as the base, so
after the touched region it falls back onto the base's boundaries; only once it has cut
exactly where a base range begins does copying that range whole leave the output as if
every record had been written one by one.  Until then base records are copied one by
one.  So when the base was built by this module with the same policy, the result is
the same tree -- the same metarange ID -- as building the new content from scratch, and
the cost is O(changes + entries of touched ranges + number of ranges).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass

from lsmstore.errors import InvalidInputError
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID, store_metarange
from lsmstore.graveler.range_encoder import RangeEncoder
from lsmstore.graveler.ranges import RECORD_OVERHEAD, RangePolicy, RangeWriter, record_size
from lsmstore.graveler.record import Record
from lsmstore.graveler.source import DirectSource, RangeSource
from lsmstore.graveler.tree import TreeCursor
from lsmstore.storage.base import ObjectStore


@dataclass(frozen=True, slots=True)
class ApplyResult:
    metarange_id: str
    ranges_read: int  # base ranges fetched
    ranges_written: int  # new range objects encoded and uploaded
    ranges_reused: int  # output ranges already stored (base ranges, passed whole or rebuilt)
    records_written: int  # records in the uploaded ranges
    added: int = 0  # keys the changes inserted
    removed: int = 0  # keys the changes deleted
    changed: int = 0  # keys whose identity the changes replaced


async def _sorted_changes(
    changes: AsyncIterable[Record] | Iterable[Record],
) -> AsyncIterator[Record]:
    prev: bytes | None = None
    if isinstance(changes, AsyncIterable):
        async for record in changes:
            if not record.key or (prev is not None and record.key <= prev):
                raise _unsorted(record.key, prev)
            prev = record.key
            yield record
    else:
        for record in changes:
            if not record.key or (prev is not None and record.key <= prev):
                raise _unsorted(record.key, prev)
            prev = record.key
            yield record


def _unsorted(key: bytes, prev: bytes | None) -> InvalidInputError:
    if not key:
        return InvalidInputError("changes hold an empty key")
    return InvalidInputError(
        f"changes must have strictly increasing keys: {key!r} follows {prev!r}"
    )


async def apply_changes(
    source: RangeSource,
    store: ObjectStore,
    base_metarange_id: str,
    changes: AsyncIterable[Record] | Iterable[Record],
    policy: RangePolicy,
    *,
    max_in_flight: int = 4,
    known_ranges: Iterable[str] = (),
    encoder: RangeEncoder | None = None,
) -> ApplyResult:
    """Write the tree ``base ⊕ changes`` to ``store``; its metarange ID and counts.

    ``changes`` is one stream of records with strictly increasing keys; ``value is None``
    deletes the key (deleting an absent key is a no-op).  New ranges and the metarange
    are uploaded in create mode; nothing is written when the result equals the base.
    ``known_ranges`` are IDs of ranges known to be stored already (e.g. written by an
    earlier attempt of the same commit): an output range with such an ID is neither
    encoded nor uploaded.  ``encoder`` names and encodes the new ranges (a process pool
    spreads a big rewrite over every core; default: threads); the result is the same.
    Raises :class:`InvalidInputError` for unsorted changes (ranges uploaded until then
    are unreferenced), and whatever the source and store raise.
    """
    base_mr = await source.metarange(base_metarange_id)
    base = TreeCursor(source, base_mr.ranges)
    closed = policy.is_closed
    min_bytes, max_bytes = policy.min_bytes, policy.max_bytes
    base_size = 0
    trusted = False
    added = removed = changed = 0
    stream = _sorted_changes(changes)
    change = await anext(stream, None)
    writer = RangeWriter(
        store,
        policy,
        max_in_flight=max_in_flight,
        existing={r.id for r in base_mr.ranges}.union(known_ranges),
        encoder=encoder,
    )
    push = writer.push
    overhead = RECORD_OVERHEAD
    async with writer:
        while True:
            pos = base.pos
            if change is not None and (pos is None or change.key < pos):
                # The key is not in the base (every base key below pos is behind us).
                if change.value is not None:
                    await writer.add(change)
                    added += 1
                change = await anext(stream, None)
                continue
            if pos is None:
                break
            record = base.record
            if record is None:  # at a base range's header
                info = base.range
                if writer.empty and (
                    change is None or (change.key > info.max_key and closed(info))
                ):
                    await writer.add_range(info)
                    base.skip_range()
                else:
                    await base.enter()
                    base_size = 0
                    # Trust the base's cuts only where they look like this policy's.
                    trusted = closed(info) or base.i == len(base_mr.ranges) - 1
                continue
            # Inside a trusted base range, a key past min_bytes (and below max_bytes) that
            # is not the range's last is no hash boundary: the base would have cut there.
            # Records below the next change are copied in one tight loop.
            last_key = info.max_key
            for record in base.take_below(None if change is None else change.key):
                base_size += (
                    len(record.key) + len(record.identity) + len(record.value or b"") + overhead
                )
                hint = (
                    False
                    if trusted and min_bytes <= base_size < max_bytes and record.key != last_key
                    else None
                )
                if push(record, hint):
                    await writer.flush()
            record = base.record
            if change is None or record is None or change.key != record.key:
                continue  # the change is past this range, or in a gap: the loop's top
            base_size += record_size(record)
            hint = (
                False
                if trusted and min_bytes <= base_size < max_bytes and record.key != last_key
                else None
            )
            if change.value is None:
                removed += 1
            elif change.identity == record.identity:
                await writer.add(record, hint)
            else:
                await writer.add(change, hint)
                changed += 1
            change = await anext(stream, None)
            base.next()
        ranges = await writer.finish()

    if [r.id for r in ranges] == [r.id for r in base_mr.ranges]:
        metarange_id = base_mr.id
    else:
        metarange_id = await store_metarange(store, ranges)
    return ApplyResult(
        metarange_id,
        ranges_read=base.ranges_read,
        ranges_written=writer.ranges_written,
        ranges_reused=writer.ranges_reused,
        records_written=writer.records_written,
        added=added,
        removed=removed,
        changed=changed,
    )


async def write_tree(
    store: ObjectStore, records: AsyncIterable[Record] | Iterable[Record], policy: RangePolicy
) -> str:
    """Build a tree from scratch from records with strictly increasing keys; its metarange
    ID.  Tombstones are dropped (they delete nothing)."""
    result = await apply_changes(DirectSource(store), store, EMPTY_METARANGE_ID, records, policy)
    return result.metarange_id
