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

With an encoder that has worker processes, a change set touching many ranges is split
by base range across them and the chunks' results are adopted where they agree with
this walk (:mod:`lsmstore.graveler.apply_parallel`): the same tree, on every core.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from itertools import chain

from lsmstore.errors import InvalidInputError
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID, store_metarange
from lsmstore.graveler.range_encoder import RangeEncoder
from lsmstore.graveler.ranges import RECORD_OVERHEAD, RangePolicy, RangeWriter, record_size
from lsmstore.graveler.record import Record, RecordTuple
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
    chunks: int = 0  # chunks applied by worker processes and adopted (apply_parallel)
    resyncs: int = 0  # of which adopted after a re-synchronisation


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


@dataclass(slots=True)
class _Counts:
    added: int = 0
    removed: int = 0
    changed: int = 0

    def totals(self) -> tuple[int, int, int]:
        return self.added, self.removed, self.changed


def _cut_index(
    policy: RangePolicy,
    cum: list[int],
    run: list[RecordTuple],
    lo: int,
    out0: int,
    base0: int,
    trusted: bool,
    last_key: bytes,
) -> int:
    """Where the policy cuts ``run`` (base records): the first index ``j >= lo`` after
    which the output is cut, or ``len(cum)`` when it is not cut in the run.

    ``cum[j]``: the run's estimated size up to record ``j``; the output held ``out0 +
    cum[j]`` after it, the base range ``base0 + cum[j]``.  As :meth:`RangeWriter.push`
    record by record: cut at the first record that brings the output to ``max_bytes``,
    or to ``min_bytes`` at a hash boundary.  Inside a trusted base range, a key past
    ``min_bytes`` (and below ``max_bytes``) of the *base* that is not the range's last
    is no hash boundary (the base would have cut there), so only the keys around that
    stretch are hashed."""
    min_bytes, max_bytes = policy.min_bytes, policy.max_bytes
    at_max = bisect_left(cum, max_bytes - out0, lo)
    at_min = bisect_left(cum, min_bytes - out0, lo, at_max)
    if at_min == at_max:
        return at_max
    candidates: Iterable[int]
    if trusted:
        base_min = bisect_left(cum, min_bytes - base0, at_min, at_max)
        base_max = bisect_left(cum, max_bytes - base0, base_min, at_max)
        last = len(run) - 1
        candidates = chain(
            range(at_min, base_min),
            (last,) if base_min <= last < base_max and run[last][0] == last_key else (),
            range(base_max, at_max),
        )
    else:
        candidates = range(at_min, at_max)
    boundary = policy.is_hash_boundary
    for j in candidates:
        if boundary(run[j][0]):
            return j
    return at_max


class Walk:
    """The merge of a base cursor and a change stream into a :class:`RangeWriter`.

    ``on_cut`` (optional) is called each time the output is cut (a range ends, the
    writer is empty) and at each base range's header; when it returns True it has moved
    :attr:`base` and :attr:`change` (a speculative result was adopted:
    :mod:`lsmstore.graveler.apply_parallel`) and the walk goes on from there.
    ``tree_last``: the index in ``base`` of the tree's last range (-1 when the cursor
    holds a chunk that does not end the tree).
    """

    __slots__ = ("base", "change", "counts", "on_cut", "policy", "stream", "tree_last", "writer")

    def __init__(
        self,
        base: TreeCursor,
        tree_last: int,
        stream: AsyncIterator[Record],
        writer: RangeWriter,
        policy: RangePolicy,
        on_cut: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.base = base
        self.tree_last = tree_last
        self.stream = stream
        self.change: Record | None = None
        self.writer = writer
        self.policy = policy
        self.counts = _Counts()
        self.on_cut = on_cut

    async def run(self) -> None:
        base, writer, policy, counts = self.base, self.writer, self.policy, self.counts
        stream, on_cut = self.stream, self.on_cut
        closed = policy.is_closed
        min_bytes, max_bytes = policy.min_bytes, policy.max_bytes
        base_size = 0
        trusted = False
        push = writer.push
        overhead = RECORD_OVERHEAD
        change = self.change
        info = None
        while True:
            pos = base.pos
            if change is not None and (pos is None or change.key < pos):
                # The key is not in the base (every base key below pos is behind us).
                cut = False
                if change.value is not None:
                    counts.added += 1
                    cut = push(change)
                change = await anext(stream, None)
                if cut:
                    await writer.flush()
                    if on_cut is not None:
                        self.change = change
                        if await on_cut():
                            change = self.change
                continue
            if pos is None:
                break
            record = base.record
            if record is None:  # at a base range's header
                if on_cut is not None:
                    self.change = change
                    if await on_cut():
                        change = self.change
                        continue
                info = base.range
                if writer.empty and (
                    change is None or (change.key > info.max_key and closed(info))
                ):
                    await writer.add_range(info)
                    base.skip_range()
                    if on_cut is not None:
                        self.change = change
                        if await on_cut():
                            change = self.change
                else:
                    await base.enter()
                    base_size = 0
                    # Trust the base's cuts only where they look like this policy's.
                    trusted = closed(info) or base.i == self.tree_last
                continue
            assert info is not None
            # The base records below the next change are copied a run at a time: sized
            # in one loop, appended as a slice, and cut where _cut_index finds the
            # policy cuts (most runs are seen at once not to be cut anywhere).
            last_key = info.max_key
            adopted = False
            stop = None if change is None else change.key
            while True:
                run = base.take_run(stop)
                if not run:
                    break
                cum = []  # the run's estimated size up to each record
                total = 0
                for key, identity, value in run:  # never a tombstone: the cursor checks
                    total += len(key) + len(identity) + len(value) + overhead  # type: ignore[arg-type]
                    cum.append(total)
                out0 = writer.size
                if out0 + total < min_bytes or (
                    # trusted, and the base range is past min_bytes and below max_bytes
                    # all along the run (and the run ends before the range): no key of
                    # it is a hash boundary, and no record brings the output to max_bytes
                    trusted
                    and out0 + total < max_bytes
                    and min_bytes <= base_size + cum[0]
                    and base_size + total < max_bytes
                    and run[-1][0] != last_key
                ):
                    writer.extend(run, total)
                    base_size += total
                    base.next()
                    continue
                n = len(run)
                lo = 0
                while lo < n:
                    c = _cut_index(policy, cum, run, lo, out0, base_size, trusted, last_key)
                    done = cum[lo - 1] if lo else 0
                    if c == n:
                        writer.extend(run[lo:] if lo else run, cum[-1] - done)
                        break
                    writer.extend(run[lo : c + 1], cum[c] - done)
                    writer.cut()
                    await writer.flush()
                    if on_cut is not None:
                        self.change = change
                        if await on_cut():
                            change = self.change
                            adopted = True
                            break
                    lo = c + 1
                    out0 = -cum[c]
                if adopted:
                    break
                base_size += total
                base.next()
            if adopted:
                continue
            record = base.record
            if change is None or record is None or change.key != record.key:
                continue  # the change is past this range, or in a gap: the loop's top
            base_size += record_size(record)
            hint = (
                False
                if trusted and min_bytes <= base_size < max_bytes and record.key != last_key
                else None
            )
            cut = False
            if change.value is None:
                counts.removed += 1
            elif change.identity == record.identity:
                cut = push(record, hint)
            else:
                counts.changed += 1
                cut = push(change, hint)
            change = await anext(stream, None)
            base.next()
            if cut:
                await writer.flush()
                if on_cut is not None:
                    self.change = change
                    if await on_cut():
                        change = self.change
        self.change = change


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
    encoded nor uploaded.  ``encoder`` names and encodes the new ranges; with worker
    processes, a change set that touches many ranges is also split by range across
    them (:mod:`lsmstore.graveler.apply_parallel`).  The result is the same either way.
    Raises :class:`InvalidInputError` for unsorted changes (ranges uploaded until then
    are unreferenced), and whatever the source and store raise.
    """
    base_mr = await source.metarange(base_metarange_id)
    existing = {r.id for r in base_mr.ranges}.union(known_ranges)
    stream = _sorted_changes(changes)
    plan = None
    if encoder is not None and encoder.processes and len(base_mr.ranges) >= 2:
        from lsmstore.graveler.apply_parallel import plan_parallel

        stream, plan = await plan_parallel(stream, base_mr.ranges, policy, encoder, store, existing)
    writer = RangeWriter(
        store,
        policy,
        max_in_flight=max_in_flight,
        existing=existing,
        encoder=encoder if plan is None else RangeEncoder(0),
    )
    base = TreeCursor(source, base_mr.ranges)
    walk = Walk(base, len(base_mr.ranges) - 1, stream, writer, policy)
    walk.change = await anext(stream, None)
    ranges_read = chunks = resyncs = 0
    async with writer:
        if plan is not None:
            async with plan:
                walk.on_cut = partial(plan.on_cut, walk)
                await plan.start(walk)
                await walk.run()
                ranges_read = plan.ranges_read
                chunks, resyncs = plan.adopted + plan.resynced, plan.resynced
        else:
            await walk.run()
        ranges = await writer.finish()

    if [r.id for r in ranges] == [r.id for r in base_mr.ranges]:
        metarange_id = base_mr.id
    else:
        metarange_id = await store_metarange(store, ranges)
    counts = walk.counts
    return ApplyResult(
        metarange_id,
        ranges_read=base.ranges_read + ranges_read,
        ranges_written=writer.ranges_written,
        ranges_reused=writer.ranges_reused,
        records_written=writer.records_written,
        added=counts.added,
        removed=counts.removed,
        changed=counts.changed,
        chunks=chunks,
        resyncs=resyncs,
    )


async def write_tree(
    store: ObjectStore, records: AsyncIterable[Record] | Iterable[Record], policy: RangePolicy
) -> str:
    """Build a tree from scratch from records with strictly increasing keys; its metarange
    ID.  Tombstones are dropped (they delete nothing)."""
    result = await apply_changes(DirectSource(store), store, EMPTY_METARANGE_ID, records, policy)
    return result.metarange_id
