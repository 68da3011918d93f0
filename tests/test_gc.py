"""Garbage collection: the commits retention keeps (against a brute-force model), the
two-mark rule (nothing reachable is ever deleted, including by writers, committers,
branch creation and copies racing the marks), crashed imports, deleted repositories."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import lsmstore
from lsmstore import gc, layout
from lsmstore.gc.mark import data_keys, list_keys
from lsmstore.gc.retention import DAY, Retention, kept_commits
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.graveler.record import Record
from lsmstore.graveler.sst_reader import SSTReader
from lsmstore.objects.entry import AddressType, ObjectEntry, encode_value
from lsmstore.spark import stage
from lsmstore.storage.url import open_object_store
from lsmstore.types import Commit

GRACE = 600.0


# --- retention against a model -------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> tuple[dict[str, Commit], list[tuple[str, float]], float]:
    n = draw(st.integers(1, 25))
    commits: dict[str, Commit] = {}
    ids = [f"{i:064x}" for i in range(1, n + 1)]
    t = 1_000_000
    for i, cid in enumerate(ids):
        t += draw(st.integers(0, 5)) * int(DAY)
        parents = (
            tuple(sorted(set(draw(st.lists(st.sampled_from(ids[:i]), max_size=2))))) if i else ()
        )
        commits[cid] = Commit(EMPTY_METARANGE_ID, parents, "c", "m", t, {}, 2 if parents else 1)
    heads = draw(
        st.lists(
            st.tuples(st.sampled_from(ids), st.sampled_from([0.0, 1.0, 3.0, 10.0])),
            min_size=1,
            max_size=4,
        )
    )
    now = t + draw(st.integers(0, 10)) * DAY
    return commits, heads, now


def model_kept(commits: dict[str, Commit], heads: list[tuple[str, float]], now: float) -> set[str]:
    """Every commit on a path from a head whose commits after the head are all within
    the head's retention."""
    kept: set[str] = set()
    for head, days in heads:
        cutoff = now - days * DAY
        stack = [head]
        seen = {head}
        while stack:
            c = stack.pop()
            kept.add(c)
            for p in commits[c].parents:
                if p not in seen and commits[p].created_at >= cutoff:
                    seen.add(p)
                    stack.append(p)
    return kept


@settings(max_examples=200, deadline=None)
@given(histories())
def test_kept_commits_match_the_model(
    history: tuple[dict[str, Commit], list[tuple[str, float]], float],
) -> None:
    commits, heads, now = history

    async def load(cid: str) -> Commit:
        return commits[cid]

    got = asyncio.run(kept_commits(heads, load, now))
    assert got == model_kept(commits, heads, now)


def test_retention_rules_parse() -> None:
    r = Retention.parse(
        '{"default_retention_days": 7, "branches": [{"branch_id": "main", "retention_days": 30}]}'
    )
    assert (r.days("main"), r.days("dev"), r.days(None)) == (30, 7, 7)
    assert Retention.parse(r.to_json()) == r
    with pytest.raises(lsmstore.InvalidInputError):
        Retention.parse('{"default_retention_days": -1}')
    with pytest.raises(lsmstore.InvalidInputError):
        Retention.parse("[1]")


# --- collection on a real repository ---------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[lsmstore.Store]:
    async with lsmstore.connect(
        f"local://{tmp_path / 'refs'}", batch_interval_ms=2, compaction_in_process="off"
    ) as s:
        yield s


async def two_runs(
    store: lsmstore.Store, repo: str, clock: Clock, retention: Retention, **kw: bool
) -> list[gc.Report]:
    """Two collections a grace period apart: what both find unreachable goes."""
    info = await store.refstore.get_repository(repo)
    objects = open_object_store(info.storage_namespace)
    reports = []
    for _ in range(2):
        reports.append(
            await gc.collect_repository(
                store.refstore, repo, objects, retention, grace_s=GRACE, clock=clock, **kw
            )
        )
        clock.now += GRACE
    return reports


async def all_readable(repo: lsmstore.Repository, ref: str) -> dict[str, bytes]:
    r = repo.ref(ref)
    out = {}
    async for s in r.list_objects():
        reader = await r.open(s.path)
        out[s.path] = await reader.read()
        await reader.aclose()
    return out


async def test_retention_keeps_heads_and_recent_history(
    store: lsmstore.Store, tmp_path: Path
) -> None:
    repo = await store.create_repository("rep", storage_namespace=(tmp_path / "ns").as_uri())
    main = repo.branch("main")
    await main.upload("a", b"a-1")
    await main.upload("b", b"b-1")
    c1 = (await main.commit("one")).id
    await main.upload("a", b"a-2")
    await main.delete_object("b")
    c2 = (await main.commit("two")).id
    await repo.create_tag("v1", c1)
    dev = await repo.create_branch("dev", source=c1)
    await dev.upload("d", b"dev-only")
    await dev.commit("dev")
    await repo.delete_branch("dev")
    objects = open_object_store((tmp_path / "ns").as_uri())
    data_before = await list_keys(objects, (layout.DATA,))
    clock = Clock()
    clock.now += 30 * DAY  # everything is older than the retention: heads and tags stay
    reports = await two_runs(store, "rep", clock, Retention(default_days=21))
    assert reports[0].deleted_keys == []  # the first mark has no partner yet
    deleted = set(reports[1].deleted_keys)
    # dev's commit and its data are gone; main's head, the tag and their data stay.
    assert deleted
    assert await all_readable(repo, "main") == {"a": b"a-2"}
    assert await all_readable(repo, "v1") == {"a": b"a-1", "b": b"b-1"}
    assert len(data_before - await list_keys(objects, (layout.DATA,))) == 1  # dev's "d"
    assert layout.commit_key(c1) not in deleted and layout.commit_key(c2) not in deleted
    # A dry run reports without deleting.
    await main.upload("x", b"x")
    await main.commit("x came")
    await main.delete_object("x")
    await main.commit("x went")
    clock.now += GRACE
    dry = await two_runs(store, "rep", clock, Retention(default_days=0), dry_run=True)
    assert dry[1].dry_run and dry[1].deleted_keys
    for key in dry[1].deleted_keys:
        assert key in await list_keys(objects)


async def test_history_within_retention_is_kept(store: lsmstore.Store, tmp_path: Path) -> None:
    repo = await store.create_repository("rep", storage_namespace=(tmp_path / "ns").as_uri())
    main = repo.branch("main")
    ids = []
    for i in range(4):
        await main.upload("k", f"v{i}".encode())
        ids.append((await main.commit(f"c{i}")).id)
    clock = Clock()
    await two_runs(store, "rep", clock, Retention(default_days=1))
    for i, cid in enumerate(ids):
        assert await all_readable(repo, cid) == {"k": f"v{i}".encode()}


async def test_crashed_import_files_are_collected(store: lsmstore.Store, tmp_path: Path) -> None:
    ns = (tmp_path / "ns").as_uri()
    await store.create_repository("rep", storage_namespace=ns)
    objects = open_object_store(ns)
    records = [Record(f"k{i}".encode(), b"i", f"v{i}".encode()) for i in range(10)]
    crashed = await stage.write_files(objects, "main", records)  # never staged
    kept = await stage.write_files(objects, "main", [Record(b"z", b"i", b"v")])
    await stage.commit_files(store.refstore, "rep", "main", "job", kept, grace_s=GRACE)
    clock = Clock()
    await two_runs(store, "rep", clock, Retention())
    left = await list_keys(objects, (layout.STAGING,))
    assert not any(f.file_id in k for f in crashed for k in left)
    assert any(kept[0].file_id in k for k in left)
    repo = await store.get_repository("rep")
    assert await repo.branch("main").get("z") == b"v"


async def test_staging_of_a_deleted_repository(store: lsmstore.Store, tmp_path: Path) -> None:
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    await repo.branch("main").put("k", b"v")
    await repo.branch("main").flush()
    objects = open_object_store(ns)
    clock = Clock()
    first = await gc.collect_all(store.refstore, lambda _: Retention(), grace_s=GRACE, clock=clock)
    assert not first.errors
    await store.delete_repository("rep")
    assert await list_keys(objects, (layout.STAGING,))
    for _ in range(2):
        clock.now += GRACE
        result = await gc.collect_all(
            store.refstore, lambda _: Retention(), grace_s=GRACE, clock=clock
        )
        assert not result.errors
    assert await list_keys(objects, (layout.STAGING,)) == set()
    assert await store.refstore.list_records(gc.NAMESPACES) == []


# --- racing the marks ----------------------------------------------------------------------


async def _upload_data(objects: lsmstore.ObjectStore, name: str) -> str:  # type: ignore[name-defined]
    key = f"{layout.DATA}{name}"
    await objects.put(key, b"payload")
    return key


def _entry_record(path: str, key: str) -> Record:
    identity, value = encode_value(
        ObjectEntry(key, AddressType.RELATIVE, 7, "etag", int(time.time()))
    )
    return Record(path.encode(), identity, value)


async def test_writers_committers_and_copies_racing_the_marks(
    store: lsmstore.Store, tmp_path: Path
) -> None:
    """Each racer at its worst point: between the two marks, an upload gets staged, a
    written commit gets its branch, an old commit gets a new branch, a deleted object's
    address gets copied.  Nothing any of them made live is deleted."""
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    objects = open_object_store(ns)
    main = repo.branch("main")
    await main.upload("old", b"old data")
    old_commit = (await main.commit("old")).id
    await main.upload("gone", b"copied later")
    await main.commit("gone")
    src_stats = await main.stat_object("gone")
    await main.delete_object("gone")
    await main.upload("old", b"newer")
    await main.commit("delete gone, replace old")  # old_commit is now out of retention
    # A writer uploaded data and a staging file, not appended yet.
    data_key = await _upload_data(objects, "pending-upload")
    pending = await stage.write_files(objects, "main", [_entry_record("pending", data_key)])
    clock = Clock()
    clock.now += 30 * DAY
    retention = Retention(default_days=21)
    info = await store.refstore.get_repository("rep")
    mark1 = await gc.mark_repository(store.refstore, info, objects, retention, clock=clock)
    await gc.collect(objects, mark1, grace_s=GRACE, clock=clock)
    assert data_key in mark1.candidates
    assert layout.commit_key(old_commit) in mark1.candidates
    # Between the marks: the racers finish what they started before the first mark.
    await stage.commit_files(store.refstore, "rep", "main", "up", pending, grace_s=1e9)
    await repo.create_branch("rescue", source=old_commit)
    await main.link(
        "copy-of-gone", src_stats.physical_address, size=src_stats.size, checksum=src_stats.checksum
    )
    await main.flush()
    clock.now += GRACE
    mark2 = await gc.mark_repository(store.refstore, info, objects, retention, clock=clock)
    report = await gc.collect(objects, mark2, grace_s=GRACE, clock=clock)
    assert report.previous_mark == mark1.mark_id
    assert await all_readable(repo, "rescue") == {"old": b"old data"}
    got = await all_readable(repo, "main")
    assert got["copy-of-gone"] == b"copied later" and got["old"] == b"newer"
    assert await objects.get(data_key) == b"payload"


async def test_concurrent_writers_compactor_and_committer_lose_nothing(tmp_path: Path) -> None:
    """Writers (uploads, overwrites, deletes), compactions and commits run while the
    collector marks and sweeps again and again with retention 0 (only heads are kept).
    The one assumption of the rule is kept by construction: an operation finishes before
    the mark one grace period after the one it started under (marks are half a grace
    apart here).  In the end every object of the branch reads back its last value."""
    from lsmstore.compaction.job import CompactionJob
    from lsmstore.testing.compaction import make_config

    async with lsmstore.connect(
        f"local://{tmp_path / 'refs'}", batch_interval_ms=2, compaction_in_process="off"
    ) as store:
        ns = (tmp_path / "ns").as_uri()
        repo = await store.create_repository("rep", storage_namespace=ns)
        main = repo.branch("main")
        objects = open_object_store(ns)
        clock = Clock()
        epoch = [0]
        inflight: dict[int, int] = {}
        changed = asyncio.Event()
        stop = asyncio.Event()
        model: dict[str, bytes] = {}

        class op:
            async def __aenter__(self) -> None:
                self.e = epoch[0]
                inflight[self.e] = inflight.get(self.e, 0) + 1

            async def __aexit__(self, *exc: object) -> None:
                inflight[self.e] -= 1
                changed.set()

        async def writer(w: int) -> None:
            i = 0
            while not stop.is_set():
                path = f"w{w}/{i % 7}"
                async with op():
                    if i % 5 == 4:
                        await main.delete_objects([path])
                        model.pop(path, None)
                    else:
                        data = f"{w}-{i}".encode()
                        await main.upload(path, data)
                        model[path] = data
                i += 1
                await asyncio.sleep(0)

        async def committer() -> None:
            while not stop.is_set():
                async with op():
                    try:
                        await main.commit("tick")
                    except lsmstore.NothingToCommitError:
                        pass
                await asyncio.sleep(0.01)

        async def compactor() -> None:
            cfg = make_config(compaction_grace_s=GRACE)
            while not stop.is_set():
                async with op():
                    await CompactionJob(store.refstore, objects, "rep", "main", cfg).run()
                await asyncio.sleep(0.01)

        deleted = 0

        async def collector() -> None:
            nonlocal deleted
            for _ in range(8):
                while inflight.get(epoch[0] - 1, 0):  # ops of two marks ago are done
                    changed.clear()
                    await changed.wait()
                report = await gc.collect_repository(
                    store.refstore,
                    "rep",
                    objects,
                    Retention(default_days=0),
                    grace_s=GRACE,
                    clock=clock,
                )
                deleted += len(report.deleted_keys)
                clock.now += GRACE / 2
                epoch[0] += 1
                await asyncio.sleep(0.05)
            stop.set()

        await asyncio.gather(writer(0), writer(1), committer(), compactor(), collector())
        await main.flush()
        assert deleted > 0  # the collector did delete things while the others ran
        assert await all_readable(repo, "main") == model
        with contextlib.suppress(lsmstore.NothingToCommitError):  # all committed already
            await main.commit("final")
        assert await all_readable(repo, "main") == model


# --- the whole collector against a model of reachability -------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(["a", "b", "c"]), st.integers(0, 9)),
        st.tuples(st.just("delete"), st.sampled_from(["a", "b", "c"]), st.just(0)),
        st.tuples(st.just("commit"), st.just(""), st.integers(0, 5)),  # days pass first
        st.tuples(st.just("branch"), st.sampled_from(["x", "y"]), st.integers(0, 99)),
        st.tuples(st.just("drop"), st.sampled_from(["x", "y"]), st.just(0)),
        st.tuples(st.just("tag"), st.sampled_from(["t1", "t2"]), st.integers(0, 99)),
    ),
    max_size=14,
)


async def _run_model(ops: list[tuple[str, str, int]], days: float, root: Path) -> None:
    """Run ``ops`` on a repository, collect twice with retention ``days``; every commit
    the model keeps reads back whole, every branch reads back its staged state, and
    every data object no kept commit or staging names is gone."""
    from lsmstore.config import load_config

    clock = Clock()
    store = lsmstore.Store(
        load_config(f"local://{root / 'refs'}", batch_interval_ms=2, compaction_in_process="off"),
        clock=clock,
    )
    async with store:
        ns = (root / "ns").as_uri()
        repo = await store.create_repository("rep", storage_namespace=ns)
        main = repo.branch("main")
        commits: dict[str, dict[str, bytes]] = {}
        staged: dict[str, bytes] = {}
        for i, (op, arg, n) in enumerate(ops):
            if op == "put":
                staged[arg] = f"{arg}{n}-{i}".encode()
                await main.upload(arg, staged[arg])
            elif op == "delete" and arg in staged:
                del staged[arg]
                await main.delete_object(arg)
            elif op == "commit":
                clock.now += n * DAY
                try:
                    c = await main.commit(f"c{i}")
                except lsmstore.NothingToCommitError:
                    continue
                commits[c.id] = dict(staged)
            elif op in ("branch", "tag") and commits:
                target = sorted(commits)[n % len(commits)]
                try:
                    if op == "branch":
                        await repo.create_branch(arg, source=target)
                    else:
                        await repo.create_tag(arg, target)
                except lsmstore.RefExistsError:
                    pass
            elif op == "drop":
                try:
                    await repo.delete_branch(arg)
                except lsmstore.NotFoundError:
                    pass
        await main.flush()
        clock.now += 1.0
        # The model: heads of branches (their retention) and tags (the default).
        heads = [(r.base, days) for _, r in await store.refstore.list_refs("rep")]
        graph: dict[str, Commit] = {}
        todo = [*commits, *(h for h, _ in heads)]
        while todo:
            cid = todo.pop()
            if cid not in graph:
                graph[cid] = await repo.ref(cid).commit()
                todo.extend(graph[cid].parents)
        kept = model_kept(graph, heads, clock.now)
        objects = open_object_store(ns)
        for _ in range(2):
            await gc.collect_repository(
                store.refstore,
                "rep",
                objects,
                Retention(default_days=days),
                grace_s=GRACE,
                clock=clock,
            )
            clock.now += GRACE
        for cid in kept & set(commits):
            assert await all_readable(repo, cid) == commits[cid]
        assert await all_readable(repo, "main") == staged
        live_data = set()
        for cid in kept:
            async for s in repo.ref(cid).list_objects():
                live_data.add(s.physical_address)
        async for s in main.list_objects():
            live_data.add(s.physical_address)
        # Entries a staging file still holds, shadowed by a newer one or not, stay
        # until a compaction drops them (a reader of an older ref value may need them).
        shadowed = set()
        for name, ref in await store.refstore.list_refs("rep"):
            for level, ids in (("L1", ref.l1), ("L2", ref.l2)):
                for fid in ids:
                    key = layout.staging_key(name, level, fid, ".sst")  # type: ignore[arg-type]
                    sst = SSTReader(await objects.get(key), key)
                    shadowed |= {f"{ns}/{k}" for k in data_keys((r.key, r.value) for r in sst)}
        left = {f"{ns}/{k}" for k in await list_keys(objects, (layout.DATA,))}
        assert live_data <= left  # nothing reachable lost
        assert left <= live_data | shadowed  # nothing else kept


@settings(max_examples=10, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(ops=OPS, days=st.sampled_from([0.0, 2.0, 30.0]))
def test_collector_matches_a_model_of_reachability(
    ops: list[tuple[str, str, int]], days: float, tmp_path_factory: pytest.TempPathFactory
) -> None:
    asyncio.run(_run_model(ops, days, tmp_path_factory.mktemp("gc-model")))


async def test_data_candidate_records_are_collected_after_their_data(
    store: lsmstore.Store, tmp_path: Path
) -> None:
    """The objects layer records replaced staged data (``_lsm/gc-data/``); a collection
    deletes that data when unreachable, and the records with it, keeping live data."""
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    main = repo.branch("main")
    await main.upload("p", b"v1")
    await main.upload("p", b"v2")  # replaces a staged entry: v1's data is recorded
    await main.upload("q", b"q")
    await main.delete_object("q")  # a staged object deleted: recorded
    await main.commit("p")
    objects = open_object_store(ns)
    assert len(await list_keys(objects, (layout.DATA_GC,))) == 2
    assert len(await list_keys(objects, (layout.DATA,))) == 3
    reports = await two_runs(store, "rep", Clock(), Retention())
    assert reports[1].deleted["data"] == 2 and reports[1].deleted["data-records"] == 2
    assert await list_keys(objects, (layout.DATA_GC,)) == set()
    assert await all_readable(repo, "main") == {"p": b"v2"}
    assert len(await list_keys(objects, (layout.DATA,))) == 1
