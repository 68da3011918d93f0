"""The lsmstore Spark data source on a local SparkSession: reads equal the client's
listing (committed, staged, prefixed, objects and raw), writes stage a job as one unit,
and a job's failed, duplicated or aborted attempts leave each record once or nothing."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers.spark_env import SparkEnv, spark_env
from hypothesis import given, settings
from hypothesis import strategies as st

import lsmstore
from lsmstore.gc.staging import Sweeper
from lsmstore.graveler.ranges import RangeInfo, RangePolicy, RangeWriter
from lsmstore.graveler.record import Record, default_identity
from lsmstore.graveler.source import DirectSource
from lsmstore.spark import save
from lsmstore.spark.direct import DirectWriter, hash_boundaries, write_ranges
from lsmstore.spark.scan import partition_plan
from lsmstore.spark.source import LsmWriter, Options
from lsmstore.storage.memory import MemoryStore
from lsmstore.storage.url import open_object_store
from lsmstore.testing.compaction import staged_files
from lsmstore.testing.servers import MotoServer, new_bucket
from lsmstore.types import ObjectLink

pytestmark = pytest.mark.timeout(600)

SMALL_RANGES = {"commit_range_min_bytes": 512, "commit_range_max_bytes": 2048}


Env = SparkEnv


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with spark_env(tmp_path, {"partitionBytes": "4096"}, **SMALL_RANGES) as e:
        yield e


def read(spark: Any, url: str, **options: str) -> list[Any]:
    return spark.read.format("lsmstore").options(**options).load(url).collect()


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Spark calls block: run them off the event loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)


async def client_raw(
    branch: lsmstore.Branch | lsmstore.Ref, prefix: str = ""
) -> dict[bytes, bytes]:
    out = {}
    async for e in branch.list(prefix):
        out[e.key] = await branch.get(e.key)
    return out


async def test_raw_read_of_a_branch_with_staged_changes(spark: Any, env: Env) -> None:
    repo = await env.store.get_repository("rep")
    main = repo.branch("main")
    await main.put_many([(f"k{i:04d}", f"v{i}".encode()) for i in range(600)])
    await main.commit("base")
    await main.put_many([(f"k{i:04d}", b"staged") for i in range(0, 600, 7)])
    await main.flush()
    await main.delete_many([f"k{i:04d}" for i in range(3, 600, 11)])
    await main.put("zz-new", b"only staged")
    await main.flush()
    rows = await in_thread(read, spark, "lsm://rep/main", **env.opts(format="raw"))
    got = {bytes(r.key): bytes(r.value) for r in rows}
    assert got == await client_raw(main)
    assert len(rows) == len(got)  # each key once
    plan_parts = (
        spark.read.format("lsmstore")
        .options(**env.opts(format="raw"))
        .load("lsm://rep/main")
        .rdd.getNumPartitions()
    )
    assert plan_parts > 1  # several partitions over several ranges
    # A prefix: the same as the client's prefixed listing.
    rows = await in_thread(read, spark, "lsm://rep/main/k01", **env.opts(format="raw"))
    assert {bytes(r.key): bytes(r.value) for r in rows} == await client_raw(main, "k01")
    # The commit alone (a ref expression other than a bare branch).
    head = (await main.head()).base
    rows = await in_thread(read, spark, f"lsm://rep/{head}", **env.opts(format="raw"))
    assert {bytes(r.key) for r in rows} == {f"k{i:04d}".encode() for i in range(600)}


async def test_objects_read_equals_list_objects(spark: Any, env: Env) -> None:
    repo = await env.store.get_repository("rep")
    main = repo.branch("main")
    await main.upload("docs/a.txt", b"hello", content_type="text/plain", metadata={"x": "1"})
    links = [
        ObjectLink(f"data/{i:03d}.bin", f"{env.ns}/data/ext-{i}", size=i, checksum=f"e{i}")
        for i in range(50)
    ]
    await main.link_many(links)
    await main.commit("objects")
    await main.link_many([ObjectLink("data/007.bin", f"{env.ns}/data/new", size=1, checksum="n")])
    await main.delete_object("data/008.bin")
    await main.put("raw/key", b"a raw value")  # listed as an inline object
    await main.flush()
    rows = await in_thread(read, spark, "lsm://rep/main", **env.opts())
    want = [s async for s in main.list_objects()]
    assert any(s.path == "raw/key" and s.size == 11 for s in want)
    assert [r.path for r in rows] == [s.path for s in want]
    for r, s in zip(rows, want, strict=True):
        assert (r.physical_address, r.size, r.checksum, r.mtime, r.content_type) == (
            s.physical_address,
            s.size,
            s.checksum,
            s.mtime,
            s.content_type,
        )
        assert dict(r.metadata or {}) == s.metadata
    rows = await in_thread(read, spark, "lsm://rep/main/docs/", **env.opts())
    assert [r.path for r in rows] == ["docs/a.txt"]


def write_rows(spark: Any, url: str, rows: list[tuple[str, bytes]], **options: str) -> None:
    df = spark.createDataFrame(rows, "key string, value binary")
    save(df, url, partitions=3, format="raw", **options)


async def test_write_stages_the_job_as_one_group(spark: Any, env: Env) -> None:
    repo = await env.store.get_repository("rep")
    main = repo.branch("main")
    await main.put("k0001", b"old")
    await main.flush()
    before = await main.head()
    rows = [(f"k{i:04d}", f"job-{i}".encode()) for i in range(300)]
    await in_thread(write_rows, spark, "lsm://rep/main", rows, **env.opts())
    after = await main.head()
    assert after.l1[: len(before.l1)] == before.l1
    job_files = after.l1[len(before.l1) :]
    assert len(job_files) >= 2  # one file or more per task, staged together
    assert await client_raw(main) == {k.encode(): v for k, v in rows}  # newer than "old"


async def test_direct_commit(spark: Any, env: Env) -> None:
    repo = await env.store.get_repository("rep")
    main = repo.branch("main")
    await main.put_many([(f"b{i:04d}", b"base") for i in range(200)])
    await main.commit("base")
    await main.put("staged", b"stays staged")
    await main.flush()
    base = (await main.head()).base
    objects = open_object_store(env.ns)
    files_before = await staged_files(objects, "main")
    rows = [(f"k{i:04d}", f"job-{i}".encode()) for i in range(300)]
    await in_thread(write_rows, spark, "lsm://rep/main", rows, **env.opts(commit="direct"))
    head = await main.head()
    assert head.base != base and len(head.l1) == 1  # staged changes stay staged
    commit = await repo.ref(head.base).commit()
    assert commit.parents == (base,)
    got = await client_raw(repo.ref(head.base))
    assert got == {
        **{f"b{i:04d}".encode(): b"base" for i in range(200)},
        **{k.encode(): v for k, v in rows},
    }
    assert await main.get("staged") == b"stays staged"
    # The job's staging files are gone: nothing left for the sweep.
    assert await staged_files(objects, "main") == files_before


def _writer(env: Env) -> LsmWriter:
    return LsmWriter(Options.parse({"path": "lsm://rep/main", "format": "raw", **env.opts()}))


def _rows(keys: range, value: str = "v") -> list[pa.RecordBatch]:
    """One task's input as Spark hands it to the writer: Arrow record batches."""
    return [
        pa.RecordBatch.from_pylist(
            [{"key": f"k{i:04d}", "value": f"{value}{i}".encode()} for i in keys]
        )
    ]


async def test_failed_and_speculative_attempts_stage_once(env: Env) -> None:
    """Spark commits one message per task; other attempts' files are never staged and
    the staging sweep collects them after the grace period."""
    repo = await env.store.get_repository("rep")
    main = repo.branch("main")
    w = await in_thread(_writer, env)
    failed = await in_thread(w.write, iter(_rows(range(0, 100))))  # its task then failed
    retried = await in_thread(w.write, iter(_rows(range(0, 100))))
    other = await in_thread(w.write, iter(_rows(range(100, 200))))
    speculative = await in_thread(w.write, iter(_rows(range(100, 200))))  # the loser
    await in_thread(w.commit, [retried, other])
    await in_thread(w.commit, [retried, other])  # a re-sent commit: no-op
    head = await main.head()
    assert set(head.l1) == {f.file_id for m in (retried, other) for f in m.files}
    assert len(await client_raw(main)) == 200
    objects = open_object_store(env.ns)
    strays = {f.file_id for m in (failed, speculative) for f in m.files}
    assert strays <= {f for _, f in await staged_files(objects, "main")}
    clock_now = [0.0]
    import time as _time

    sweeper = Sweeper(60.0, clock=lambda: _time.time() + clock_now[0])
    clock_now[0] = 61
    await sweeper.sweep(env.store.refstore, "rep", objects)
    clock_now[0] = 122
    await sweeper.sweep(env.store.refstore, "rep", objects)
    left = {f for _, f in await staged_files(objects, "main")}
    assert not strays & left and set(head.l1) <= left


async def test_direct_commit_attempts_aborts_and_base_overlap(env: Env) -> None:
    """Direct writes: each task writes committed ranges; only the ranges of the
    messages Spark commits enter the tree (a failed attempt wrote other records), job
    keys replace the base's, an aborted or overlapping job changes nothing."""
    repo = await env.store.get_repository("rep")
    main = repo.branch("main")
    await main.put_many([(f"k{i:04d}", b"base") for i in range(0, 400, 2)])
    await main.commit("base")
    before = await main.head()

    def direct_writer() -> DirectWriter:
        opts = {"path": "lsm://rep/main", "format": "raw", "commit": "direct", **env.opts()}
        return DirectWriter(Options.parse(opts))

    aborted = await in_thread(direct_writer)
    done = await in_thread(aborted.write, iter(_rows(range(0, 100))))
    await in_thread(aborted.abort, [done, None])
    assert await main.head() == before
    w = await in_thread(direct_writer)
    failed = await in_thread(w.write, iter(_rows(range(0, 60), "partial")))  # then failed
    retried = await in_thread(w.write, iter(_rows(range(0, 100))))
    other = await in_thread(w.write, iter(_rows(range(100, 200))))
    speculative = await in_thread(w.write, iter(_rows(range(100, 200))))  # the loser
    overlapping = await in_thread(w.write, iter(_rows(range(150, 250))))
    with pytest.raises(lsmstore.InvalidInputError, match="overlap"):
        await in_thread(w.commit, [retried, other, overlapping])
    assert await main.head() == before
    await in_thread(w.commit, [retried, other])
    head = await main.head()
    commit = await repo.ref(head.base).commit()
    assert commit.parents == (before.base,)
    assert await client_raw(repo.ref(head.base)) == {
        **{f"k{i:04d}".encode(): b"base" for i in range(0, 400, 2)},
        **{f"k{i:04d}".encode(): f"v{i}".encode() for i in range(200)},
    }
    assert speculative.ranges == other.ranges  # content-addressed: the same objects
    tree = await DirectSource(open_object_store(env.ns)).metarange(commit.metarange_id)
    assert not {r.id for r in failed.ranges} & {r.id for r in tree.ranges}


async def test_aborted_job_leaves_nothing(env: Env) -> None:
    repo = await env.store.get_repository("rep")
    main = repo.branch("main")
    before = await main.head()
    w = await in_thread(_writer, env)
    done = await in_thread(w.write, iter(_rows(range(0, 100))))
    await in_thread(w.abort, [done, None])
    assert await main.head() == before
    objects = open_object_store(env.ns)
    assert await staged_files(objects, "main") == {("L1", f) for f in before.l1}


async def test_overlapping_tasks_are_refused_and_cleaned(env: Env) -> None:
    repo = await env.store.get_repository("rep")
    main = repo.branch("main")
    before = await main.head()
    w = await in_thread(_writer, env)
    a = await in_thread(w.write, iter(_rows(range(0, 100))))
    b = await in_thread(w.write, iter(_rows(range(50, 150))))
    with pytest.raises(lsmstore.InvalidInputError, match="overlap"):
        await in_thread(w.commit, [a, b])
    assert await main.head() == before
    objects = open_object_store(env.ns)
    assert await staged_files(objects, "main") == {("L1", f) for f in before.l1}
    with pytest.raises(lsmstore.InvalidInputError, match="twice"):
        await in_thread(w.write, iter(_rows(range(0, 3)) + _rows(range(2, 3))))


def _fail_once(marker: str) -> Any:
    def fn(key: str) -> str:
        p = Path(marker)
        if key == "k0150" and not p.exists():
            p.write_text("failed once")
            raise RuntimeError("injected task failure")
        return key

    return fn


async def test_a_task_failing_once_is_retried_end_to_end(spark: Any, env: Env) -> None:
    from pyspark.sql import functions as F

    marker = str(env.tmp / "failed-once")
    fail = F.udf(_fail_once(marker), "string")

    def job() -> None:
        df = spark.createDataFrame(
            [(f"k{i:04d}", f"v{i}".encode()) for i in range(300)], "key string, value binary"
        )
        save(
            df.withColumn("key", fail("key")),
            "lsm://rep/main",
            partitions=3,
            format="raw",
            **env.opts(),
        )

    await in_thread(job)
    assert await asyncio.to_thread(Path(marker).exists)
    repo = await env.store.get_repository("rep")
    got = await client_raw(repo.branch("main"))
    assert got == {f"k{i:04d}".encode(): f"v{i}".encode() for i in range(300)}


async def test_a_failing_job_is_aborted_end_to_end(spark: Any, env: Env) -> None:
    from pyspark.sql import functions as F

    def always(key: str) -> str:
        if key == "k0250":
            raise RuntimeError("this partition always fails")
        return key

    fail = F.udf(always, "string")
    repo = await env.store.get_repository("rep")
    main = repo.branch("main")
    before = await main.head()

    def job() -> None:
        df = spark.createDataFrame(
            [(f"k{i:04d}", b"x") for i in range(300)], "key string, value binary"
        )
        save(
            df.withColumn("key", fail("key")),
            "lsm://rep/main",
            partitions=3,
            format="raw",
            **env.opts(),
        )

    with pytest.raises(Exception, match="always fails"):
        await in_thread(job)
    assert await main.head() == before
    objects = open_object_store(env.ns)
    assert await staged_files(objects, "main") == {("L1", f) for f in before.l1}


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=70), max_size=300),
    st.integers(min_value=1, max_value=9),
)
def test_hash_boundaries_equal_the_policy(keys: list[bytes], raggedness: int) -> None:
    policy = RangePolicy(raggedness=raggedness)
    assert hash_boundaries(keys, raggedness) == [policy.is_hash_boundary(k) for k in keys]


async def test_task_ranges_equal_the_range_writer() -> None:
    """A task's ranges (vectorised boundary hashes) are the ones RangeWriter cuts alone,
    for keys up to the longest allowed."""
    policy = RangePolicy(min_bytes=2_000, max_bytes=20_000, raggedness=5)
    keys = sorted({f"k/{i * 7919 % 100_003:06d}".encode() * (1 + i % 40) for i in range(3000)})
    records = [Record(k, default_identity(k), k[::-1]) for k in keys]
    got = await write_ranges(MemoryStore(), records, policy)
    async with RangeWriter(MemoryStore(), policy) as w:
        for r in records:
            await w.add(r)
        want = await w.finish()
    assert got == want and len(got) > 3


def test_min_partitions_splits_a_small_plan() -> None:
    ranges = [RangeInfo(f"r{i:02d}", b"k%02d0" % i, b"k%02d9" % i, 10, 100) for i in range(16)]
    one, _ = partition_plan("file:///ns", ranges, (), partition_bytes=1 << 20)
    assert [p.ranges for p in one] == [tuple(r.id for r in ranges)]
    parts, count = partition_plan(
        "file:///ns", ranges, (), partition_bytes=1 << 20, min_partitions=4
    )
    assert count == 160 and [len(p.ranges) for p in parts] == [4, 4, 4, 4]
    assert parts[0].lo is None and parts[-1].hi is None
    assert all(a.hi == b.lo for a, b in itertools.pairwise(parts))


async def test_s3_namespace_write_direct_commit_and_read(
    spark: Any, moto: MotoServer, tmp_path: Path
) -> None:
    """On an s3:// namespace (moto over HTTP) the tasks read and write the namespace
    themselves: a staged write, a direct commit, and reads of both equal the client's."""
    bucket = await new_bucket(moto.endpoint)
    refs = f"local://{tmp_path / 'refs'}"
    async with lsmstore.connect(refs, batch_interval_ms=2, compaction_in_process="off") as store:
        ns = f"s3://{bucket}/repo?endpoint_url={moto.endpoint}"
        repo = await store.create_repository("rep", storage_namespace=ns)
        main = repo.branch("main")
        opts = {"refstore": refs, "partitionBytes": "4096"}
        staged = [(f"s{i:04d}", f"staged-{i}".encode()) for i in range(200)]
        await in_thread(write_rows, spark, "lsm://rep/main", staged, **opts)
        direct = [(f"d{i:04d}", f"direct-{i}".encode()) for i in range(200)]
        await in_thread(write_rows, spark, "lsm://rep/main", direct, **opts, commit="direct")
        head = await main.head()
        assert await client_raw(repo.ref(head.base)) == {k.encode(): v for k, v in direct}
        rows = await in_thread(read, spark, "lsm://rep/main", **opts, format="raw")
        assert {bytes(r.key): bytes(r.value) for r in rows} == {
            k.encode(): v for k, v in staged + direct
        }
        rows = await in_thread(read, spark, "lsm://rep/main/d01", **opts, format="raw")
        assert sorted(bytes(r.key) for r in rows) == [f"d01{i:02d}".encode() for i in range(100)]
