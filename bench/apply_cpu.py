"""CPU per record of one worker's chunk of a split commit (the range rewrite).

``python -m bench apply_cpu [--records 300000] [--every 100] [--repeat 3]
[--profile] [--peer DIR] [--rounds 3]``

A tree of ``--records`` base records (the commit benchmark's keys and ~110-byte values,
the production range policy) is built in a memory store; then the walk a worker runs
for a chunk (:class:`lsmstore.graveler.apply.Walk` into a :class:`RangeWriter` that
names and encodes each range inline, as ``apply_parallel`` does in its workers) applies
one change per ``--every`` base records (80% updates, 10% deletes, 10% inserts, as
``bench commit``): at 100, what 100k changes onto 10M keys do to every range.  The
CPU seconds of the rewrite (``time.process_time``), best of ``--repeat``, divided by
the base records, is the figure; a digest of the output range IDs is printed beside it
(equal digests: equal trees).

``--peer DIR`` runs the same measurement on the tree at ``DIR`` (e.g. a ``git
archive`` of main) and on this one, alternating, ``--rounds`` times each, each in a
fresh process: an A/B that survives a loaded machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import hashlib
import io
import json
import os
import pstats
import random
import subprocess
import sys
import time
from pathlib import Path


def _key(i: int) -> bytes:
    return b"tables/events/part=%05d/obj-%010d.parquet" % (i // 100_000, i)


def _value(i: int, salt: bytes) -> bytes:
    h = hashlib.sha256(b"%d:%s" % (i, salt)).hexdigest()
    return b'{"etag":"%s","size":%d,"mtime":%d,"class":"STANDARD"}' % (
        h[:32].encode(),
        int(h[32:40], 16),
        1_700_000_000 + int(h[40:46], 16),
    )


async def _measure(records: int, every: int, repeat: int, profile: bool) -> dict[str, object]:
    # imported here: with --peer, these come from the peer's tree
    from lsmstore.graveler import range_encoder
    from lsmstore.graveler.apply import Walk
    from lsmstore.graveler.apply_parallel import _aiter, _InlineEncoder
    from lsmstore.graveler.ranges import RangePolicy, RangeWriter
    from lsmstore.graveler.record import Record
    from lsmstore.graveler.source import DirectSource
    from lsmstore.graveler.tree import TreeCursor
    from lsmstore.storage.memory import MemoryStore

    if hasattr(range_encoder, "worker_startup"):  # as the worker processes do
        range_encoder.worker_startup()
    from lsmstore import gcfreeze

    # a worker runs its chunk with the collector paused (where the tree does so)
    chunk_gc = getattr(gcfreeze, "paused", contextlib.nullcontext)
    policy = RangePolicy()
    sha = hashlib.sha256

    def record(k: bytes, v: bytes) -> Record:
        return Record(k, sha(v).digest(), v)

    store = MemoryStore()
    writer = RangeWriter(store, policy, max_in_flight=2)
    for i in range(records):
        if writer.push(record(_key(i), _value(i, b"base"))):
            await writer.flush()
    ranges = await writer.finish()

    rng = random.Random(7)
    picked = sorted(rng.sample(range(records), records // every))
    changes: list[Record] = []
    for j, i in enumerate(picked):
        kind = j % 10
        if kind == 8:
            changes.append(Record(_key(i), b"", None))
        elif kind == 9:
            changes.append(record(_key(i) + b"-new", _value(i, b"new")))
        else:
            changes.append(record(_key(i), _value(i, b"changed")))
    changes.sort(key=lambda r: r.key)

    best = float("inf")
    digest = ""
    prof = cProfile.Profile() if profile else None
    for _ in range(repeat):
        out = MemoryStore()
        w = RangeWriter(out, policy, max_in_flight=1, encoder=_InlineEncoder())
        base = TreeCursor(DirectSource(store), ranges)
        stream = _aiter(changes)
        walk = Walk(base, len(ranges) - 1, stream, w, policy)
        walk.change = await anext(stream, None)
        if prof:
            prof.enable()
        t0 = time.process_time()
        with chunk_gc():
            async with w:
                await walk.run()
                result = await w.finish()
        cpu = time.process_time() - t0
        if prof:
            prof.disable()
        best = min(best, cpu)
        digest = hashlib.sha256("".join(r.id for r in result).encode()).hexdigest()[:16]
    if prof:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
        print(text.getvalue(), file=sys.stderr)
    return {
        "records": records,
        "changes": len(changes),
        "base_ranges": len(ranges),
        "cpu_s": best,
        "us_per_record": best / records * 1e6,
        "ids": digest,
    }


def _child(tree: str, args: argparse.Namespace) -> dict[str, object]:
    """The measurement in a fresh process importing lsmstore from ``tree``."""
    code = (
        "import sys, json, asyncio, runpy; sys.path.insert(0, sys.argv[1]); "
        "m = runpy.run_path(sys.argv[2]); "
        "print(json.dumps(asyncio.run(m['_measure'](*map(int, sys.argv[3:6]), False))))"
    )
    argv = [str(args.records), str(args.every), str(args.repeat)]
    out = subprocess.run(
        [sys.executable, "-c", code, tree, __file__, *argv],
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
    ).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench apply_cpu", description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--every", type=int, default=100, help="base records per change")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--peer", default="", help="another source tree to compare with")
    parser.add_argument("--rounds", type=int, default=3, help="alternations with --peer")
    args = parser.parse_args(argv)
    if not args.peer:
        r = asyncio.run(_measure(args.records, args.every, args.repeat, args.profile))
        print(
            f"{r['records']:,} base records, {r['changes']:,} changes, {r['base_ranges']} "
            f"ranges: {r['cpu_s']:.2f} s CPU, {r['us_per_record']:.2f} us/record, "
            f"ids {r['ids']} (load {os.getloadavg()[0]:.1f})"
        )
        return 0
    here = str(Path(__file__).resolve().parent.parent)
    peer = str(Path(args.peer).resolve())
    results: dict[str, list[float]] = {"peer": [], "this": []}
    ids: dict[str, set[object]] = {"peer": set(), "this": set()}
    for _ in range(args.rounds):
        for name, tree in (("peer", peer), ("this", here)):
            r = _child(tree, args)
            results[name].append(float(r["us_per_record"]))  # type: ignore[arg-type]
            ids[name].add(r["ids"])
            print(
                f"{name:>4} ({tree}): {r['us_per_record']:.2f} us/record "
                f"(ids {r['ids']}, load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    p, t = min(results["peer"]), min(results["this"])
    print(
        f"best: peer {p:.2f}, this {t:.2f} us/record ({(1 - t / p) * 100:.0f}% less CPU); "
        f"same range IDs: {ids['peer'] == ids['this'] and len(ids['this']) == 1}"
    )
    return 0
