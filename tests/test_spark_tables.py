"""Parquet tables through the lsmstore data source on a local SparkSession: rows written
equal rows read (Spark, and pandas through ``lsm://``), a table version lands as one
group append (append, overwrite, two writers of one branch), partition pruning opens only
the matching files, and failed, killed or aborted jobs leave nothing visible and their
files to the GC job."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from helpers.spark_env import SparkEnv, collect_twice, spark_env
from hypothesis import given
from hypothesis import strategies as st

import lsmstore
from lsmstore import layout
from lsmstore.objects.addresses import Location
from lsmstore.spark import register, tables
from lsmstore.spark.source import Options
from lsmstore.storage.url import open_object_store

pytestmark = pytest.mark.timeout(600)

GRACE = 600.0


Env = SparkEnv


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with spark_env(tmp_path, {"format": "parquet"}) as e:
        yield e


def frame(spark: Any, n: int, tag: str = "v1", parts: int = 3) -> Any:
    return spark.range(n, numPartitions=parts).selectExpr(
        "id", "cast(id % 3 as int) as p", f"concat('{tag}-', cast(id as string)) as s"
    )


def write(df: Any, url: str, mode: str = "append", **options: str) -> None:
    register(df.sparkSession)  # this thread's active session knows the source
    df.write.format("lsmstore").options(**options).mode(mode).save(url)


def read(spark: Any, url: str, **options: str) -> list[tuple[Any, ...]]:
    register(spark)
    df = spark.read.format("lsmstore").options(**options).load(url)
    return sorted(tuple(r[c] for c in ("id", "p", "s")) for r in df.collect())


def want(n: int, tag: str = "v1") -> list[tuple[Any, ...]]:
    return [(i, i % 3, f"{tag}-{i}") for i in range(n)]


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kwargs)


async def paths(branch: lsmstore.Branch | lsmstore.Ref, prefix: str) -> list[str]:
    return [s.path async for s in branch.list_objects(prefix)]


async def data_objects(env: Env) -> set[str]:
    objects = open_object_store(env.ns)
    try:
        return {m.key async for m in objects.list(layout.DATA)}
    finally:
        await objects.aclose()


async def test_round_trip_partitioned_by_spark_and_pandas(spark: Any, env: Env) -> None:
    main = (await env.store.get_repository("rep")).branch("main")
    before = await main.head()
    url = "lsm://rep/main/tables/t/"
    await in_thread(write, frame(spark, 600), url, **env.opts(partitionBy="p"))
    listed = await paths(main, "tables/t/")
    assert listed and all(p.endswith(".parquet") for p in listed)
    assert {p.split("/")[2] for p in listed} == {"p=0", "p=1", "p=2"}  # Hive-style
    after = await main.head()
    assert len(after.l1) == len(before.l1) + 1  # one group append, one staging file
    assert await in_thread(read, spark, url, **env.opts()) == want(600)
    # pandas through the fsspec filesystem: the same rows (p from the directories)
    df = await in_thread(
        pd.read_parquet, "lsm://rep/main/tables/t/", storage_options={"refstore": env.refstore_url}
    )
    got = sorted((int(i), int(p), s) for i, p, s in zip(df["id"], df["p"], df["s"], strict=True))
    assert got == want(600)
    # A commit of the branch reads the same; so does an unpartitioned table.
    commit = await main.commit("table t")
    at_commit = f"lsm://rep/{commit.id}/tables/t/"
    assert await in_thread(read, spark, at_commit, **env.opts()) == want(600)
    await in_thread(write, frame(spark, 50), "lsm://rep/main/tables/flat", **env.opts())
    assert await in_thread(read, spark, "lsm://rep/main/tables/flat/", **env.opts()) == want(50)
    assert all("=" not in p for p in await paths(main, "tables/flat/"))


async def test_overwrite_replaces_the_prefix_in_one_append(spark: Any, env: Env) -> None:
    main = (await env.store.get_repository("rep")).branch("main")
    url = "lsm://rep/main/tables/t/"
    await in_thread(write, frame(spark, 300, "old"), url, **env.opts(partitionBy="p"))
    await main.upload("tables/other/keep.txt", b"another table")
    old = await paths(main, "tables/t/")
    await main.commit("v1")  # old files committed: their data stays for the commit
    before = await main.head()
    await in_thread(write, frame(spark, 120, "new"), url, "overwrite", **env.opts(partitionBy="p"))
    after = await main.head()
    assert len(after.l1) == len(before.l1) + 1  # deletes and new entries: one staging file
    assert await in_thread(read, spark, url, **env.opts()) == want(120, "new")
    assert not set(old) & set(await paths(main, "tables/t/"))
    assert await paths(main, "tables/other/") == ["tables/other/keep.txt"]
    assert await in_thread(read, spark, f"lsm://rep/{before.base}/tables/t/", **env.opts()) == want(
        300, "old"
    )


async def test_partition_pruning_opens_only_matching_files(spark: Any, env: Env) -> None:
    main = (await env.store.get_repository("rep")).branch("main")
    url = "lsm://rep/main/tables/t/"
    await in_thread(write, frame(spark, 300), url, **env.opts(partitionBy="p"))
    stats = [s async for s in main.list_objects("tables/t/")]
    # The data of every file outside p=1 is removed from the namespace: a read that
    # opened one of them would fail.
    objects = open_object_store(env.ns)
    try:
        for s in stats:
            if "/p=1/" not in s.path:
                await objects.delete(s.physical_address.removeprefix(objects.url + "/"))
    finally:
        await objects.aclose()
    matching = {s.path for s in stats if "/p=1/" in s.path}
    opts = Options.parse({"path": url, **env.opts(partitionFilter="p=1")})
    plan = await tables.plan_table(opts)
    assert {"tables/t/" + f.path for f in plan.files} == matching
    rows = await in_thread(read, spark, url, **env.opts(partitionFilter="p=1"))
    assert rows == [r for r in want(300) if r[1] == 1]
    with pytest.raises(Exception, match=r"ObjectNotFound|not found"):
        await in_thread(read, spark, url, **env.opts())
    with pytest.raises(Exception, match="not partition columns"):
        await in_thread(read, spark, url, **env.opts(partitionFilter="q=1"))


async def test_two_concurrent_writes_to_one_branch_both_land_whole(spark: Any, env: Env) -> None:
    main = (await env.store.get_repository("rep")).branch("main")
    errors: list[BaseException] = []

    def job(name: str, n: int) -> None:
        try:
            write(frame(spark, n, name), f"lsm://rep/main/tables/{name}/", **env.opts())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=job, args=(n, k)) for n, k in (("a", 400), ("b", 250))]
    await in_thread(lambda: [t.start() for t in threads] and [t.join() for t in threads])
    assert not errors
    assert await in_thread(read, spark, "lsm://rep/main/tables/a/", **env.opts()) == want(400, "a")
    assert await in_thread(read, spark, "lsm://rep/main/tables/b/", **env.opts()) == want(250, "b")
    assert len((await main.head()).l1) == 2


def _failing(marker: str | None, kill: bool) -> Any:
    """A UDF failing (or killing its Python worker) on row 150: once when ``marker``
    names a file to create, else always."""

    def fn(i: int) -> int:
        if i == 150 and (marker is None or not os.path.exists(marker)):
            if marker is not None:
                Path(marker).write_text("failed once")
            if kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("this partition fails")
        return i

    return fn


@pytest.mark.parametrize("kill", [False, True], ids=["task-fails", "worker-killed"])
async def test_failed_job_leaves_nothing_and_its_files_to_gc(
    spark: Any, env: Env, kill: bool
) -> None:
    from pyspark.sql import functions as F

    main = (await env.store.get_repository("rep")).branch("main")
    await main.upload("tables/t/keep.parquet", b"not replaced")
    await main.commit("base")
    before = await main.head()
    fail = F.udf(_failing(None, kill), "long")
    df = frame(spark, 300).withColumn("id", fail("id"))
    url = "lsm://rep/main/tables/t/"
    with pytest.raises(Exception, match=r"fails|crashed|EOF|exited|Python worker"):
        await in_thread(write, df, url, "overwrite", **env.opts(partitionBy="p"))
    assert await main.head() == before
    assert await paths(main, "tables/t/") == ["tables/t/keep.parquet"]
    await collect_twice(env)  # the failed attempts' uploads are orphans
    kept = [s async for s in main.list_objects("tables/t/")]
    assert await data_objects(env) == {
        s.physical_address.removeprefix(open_object_store(env.ns).url + "/") for s in kept
    }
    # Failing once: the retried task's files land, whole.
    marker = str(env.tmp / f"failed-once-{kill}")
    once = F.udf(_failing(marker, kill), "long")
    await in_thread(
        write, frame(spark, 300).withColumn("id", once("id")), url, "overwrite", **env.opts()
    )
    assert await asyncio.to_thread(Path(marker).exists)
    assert await in_thread(read, spark, url, **env.opts()) == want(300)
    await collect_twice(env)  # the failed attempt's files go, the table's stay
    assert await in_thread(read, spark, url, **env.opts()) == want(300)


async def test_aborted_job_deletes_its_files(spark: Any, env: Env) -> None:
    main = (await env.store.get_repository("rep")).branch("main")
    before = await main.head()
    opts = Options.parse({"path": "lsm://rep/main/tables/t/", **env.opts(partitionBy="p")})
    w = await in_thread(tables.TableWriter, opts, False)
    batch = pa.RecordBatch.from_pydict({"id": list(range(10)), "p": [i % 2 for i in range(10)]})
    done = await in_thread(w.write, iter([batch]))
    assert len(done.files) == 2 and len(await data_objects(env)) == 2
    await in_thread(w.abort, [done, None])
    assert await main.head() == before and not await data_objects(env)
    # A commit of a job older than half the grace period stages nothing.
    late = await in_thread(w.write, iter([batch]))
    late.started -= opts.grace_s
    with pytest.raises(lsmstore.LsmError, match="grace"):
        await in_thread(w.commit, [late])
    assert await main.head() == before and not await data_objects(env)


async def test_bad_table_writes_are_refused(spark: Any, env: Env) -> None:
    df = frame(spark, 10)
    with pytest.raises(Exception, match="names a prefix"):
        await in_thread(write, df, "lsm://rep/main", **env.opts())
    with pytest.raises(Exception, match="lacks"):
        await in_thread(write, df, "lsm://rep/main/t/", **env.opts(partitionBy="nope"))
    with pytest.raises(Exception, match="staged"):
        await in_thread(write, df, "lsm://rep/main/t/", **env.opts(commit="direct"))
    with pytest.raises(Exception, match="no Parquet files"):
        await in_thread(read, spark, "lsm://rep/main/empty/", **env.opts())
    assert await data_objects(env) == set()


@given(
    st.lists(
        st.one_of(st.none(), st.text(min_size=1, max_size=12), st.integers(-5, 10**12)),
        min_size=1,
        max_size=3,
    )
)
def test_partition_directories_round_trip(values: list[Any]) -> None:
    cols = [f"c{i}" for i in range(len(values))]
    rel = tables.partition_dir(cols, values) + "part-0.parquet"
    got = tables.partition_values(rel)
    want = {c: None if v is None or v == "" else str(v) for c, v in zip(cols, values, strict=True)}
    assert got == want  # "" is Hive's null, as Spark writes it
    assert rel.count("/") == len(values)  # a value never adds a directory


def test_partition_values_typed_as_spark_casts_them() -> None:
    assert tables._partition_type(["1", "-20", None]) == pa.int64()
    for odd in ("1_000", " 1", "+1", "1.0", str(2**63), ""):
        assert tables._partition_type(["1", odd]) == pa.string(), odd
    assert tables._partition_type([None]) == pa.string()


def test_partition_filter_option() -> None:
    assert tables.parse_filter("day=1,2; region = eu") == {
        "day": frozenset({"1", "2"}),
        "region": frozenset({"eu"}),
    }
    for bad in ("day", "=1", "a=1;a=2"):
        with pytest.raises(lsmstore.InvalidInputError):
            tables.parse_filter(bad)
    with pytest.raises(lsmstore.InvalidInputError):
        tables.parse_columns("a,a")


async def test_transaction_merges_validated_jobs_or_leaves_the_target(spark: Any, env: Env) -> None:
    from lsmstore.spark import transaction

    repo = await env.store.get_repository("rep")
    main = repo.branch("main")
    await main.upload("readme.txt", b"base")
    await main.commit("base")
    seen: dict[str, Any] = {}

    def validate(tx: Any) -> None:
        seen["a"] = read(spark, tx.uri("tables/a/"), **env.opts())
        if len(seen["a"]) != 300:
            raise ValueError("table a is incomplete")

    def pipeline(rows: int, on_failure: str) -> str:
        with transaction(
            "lsm://rep/main", refstore=env.refstore_url, validate=validate, on_failure=on_failure
        ) as tx:
            write(frame(spark, rows, "a"), tx.uri("tables/a/"), **env.opts(partitionBy="p"))
            write(frame(spark, 20, "b"), tx.uri("tables/b/"), **env.opts())
            seen["branch"] = tx.branch
        return str(tx.commit_id)

    before = await main.head()
    with pytest.raises(ValueError, match="incomplete"):
        await in_thread(pipeline, 10, "keep")
    assert await main.head() == before
    kept = seen["branch"]
    assert kept in await repo.list_branches()  # left for inspection, with its tables
    assert len(await paths(repo.branch(kept), "tables/b/")) > 0
    await repo.delete_branch(kept)

    def broken() -> None:
        with transaction("lsm://rep/main", refstore=env.refstore_url) as tx:
            write(frame(spark, 5), tx.uri("tables/a/"), **env.opts())
            seen["branch"] = tx.branch
            raise RuntimeError("the next job failed")

    with pytest.raises(RuntimeError, match="next job"):
        await in_thread(broken)
    assert await main.head() == before
    assert seen["branch"] not in await repo.list_branches()  # deleted by default

    merge = await in_thread(pipeline, 300, "keep")
    assert seen["a"] == want(300, "a")
    head = await main.head()
    assert head.base == merge and head.l1 == ()
    assert (await repo.ref(merge).commit()).parents[0] == before.base
    assert await in_thread(read, spark, "lsm://rep/main/tables/a/", **env.opts()) == want(300, "a")
    assert await in_thread(read, spark, "lsm://rep/main/tables/b/", **env.opts()) == want(20, "b")
    assert await repo.list_branches() == ["main"]


def test_files_are_grouped_into_balanced_partitions_of_sparks_split_size() -> None:
    mib = 1024 * 1024
    files = [tables.TableFileRef(f"f{i}", f"a{i}", size, (), Location(f"a{i}")) for i, size in
             enumerate([100 * mib, 30 * mib, 30 * mib, 1, 1, 1])]  # fmt: skip
    groups = tables.group_files(files, 128 * mib, 2)
    assert sorted(f.path for g in groups for f in g) == sorted(f.path for f in files)
    assert all(sum(f.size + tables.OPEN_COST for f in g) <= 128 * mib for g in groups if len(g) > 1)
    assert [len(g) for g in tables.group_files(files, 128 * mib, 1)] == [1, 5]  # 104 / 80 MiB
    assert len(tables.group_files(files[3:], 128 * mib, 1)) == 1  # small files: one task
    assert tables.group_files([], 128 * mib, 2) == []
    # 32 small files on 2 cores: 16 + 16 (first fit: 14 + 14 + 4, a third task alone)
    small = [tables.TableFileRef(f"s{i}", "b", 800_000 + i, (), Location("b")) for i in range(32)]
    assert [len(g) for g in tables.group_files(small, 128 * mib, 2)] == [16, 16]
    # more than one wave: a multiple of the cores, no partition past the bound
    big = [tables.TableFileRef(f"b{i}", "c", 60 * mib, (), Location("c")) for i in range(5)]
    groups = tables.group_files(big, 128 * mib, 2)
    assert len(groups) == 4 and sorted(len(g) for g in groups) == [1, 1, 1, 2]
    assert all(sum(f.size + tables.OPEN_COST for f in g) <= 128 * mib for g in groups)


def test_rows_split_by_partition_values_nulls_included() -> None:
    t = pa.table({"id": [1, 2, 3, 4, 5], "p": ["a", None, "a", None, "b/c"], "q": [1, 1, 1, 1, 2]})
    got = {d: part.column("id").to_pylist() for d, part in tables.split_partitions(t, ["p", "q"])}
    assert got == {
        "p=a/q=1/": [1, 3],
        "p=__HIVE_DEFAULT_PARTITION__/q=1/": [2, 4],
        "p=b%2Fc/q=2/": [5],
    }
    assert all(part.column_names == ["id"] for _, part in tables.split_partitions(t, ["p", "q"]))
    with pytest.raises(lsmstore.InvalidInputError, match="every column"):
        list(tables.split_partitions(t.select(["p"]), ["p"]))


def test_dictionaries_for_columns_with_few_distinct_values_only() -> None:
    """A column gets a dictionary when at most half of its sampled values are distinct;
    the written file's mostly unique columns hold no dictionary page at all."""
    import io

    import pyarrow.parquet as pq

    n = 3 * tables.DICTIONARY_SAMPLE_ROWS
    t = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "s": [f"value-{i:08d}" for i in range(n)],
            "day": [f"2026-11-{i % 28 + 1:02d}" for i in range(n)],
            "half": [i // 2 for i in range(n)],  # exactly half distinct
            "flag": [i % 2 == 0 for i in range(n)],
            "tags": [[i % 3] for i in range(n)],
        }
    )
    assert tables.dictionary_columns(t) == ["day", "half"]
    assert tables.dictionary_columns(t.slice(0, 0)) == []
    meta = pq.ParquetFile(io.BytesIO(tables._encode(t))).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(6)}
    assert "RLE_DICTIONARY" in encodings["day"] and "RLE_DICTIONARY" in encodings["half"]
    assert not {"RLE_DICTIONARY", "PLAIN_DICTIONARY"} & {*encodings["id"], *encodings["s"]}


async def test_schema_comes_from_the_footer_alone(tmp_path: Path) -> None:
    """The schema is read from a file's footer (one ranged read, two for a footer
    longer than the first read), never the whole file; a tail that is not a Parquet
    footer, or one claiming more than the file, is a CorruptFileError."""
    import io

    import pyarrow.parquet as pq

    from lsmstore.errors import CorruptFileError

    ns = (tmp_path / "ns").as_uri()
    objects = open_object_store(ns)

    def table_file(path: str, key: str, size: int) -> tables.TableFileRef:
        return tables.TableFileRef(path, f"{ns}/{key}", size, (), Location(key))

    narrow = pa.table({"id": pa.array(range(200_000)), "s": ["x" * 20] * 200_000})
    wide = pa.table({f"column_{i:04d}": pa.array([i], pa.int64()) for i in range(2000)})

    def parquet(table: pa.Table) -> bytes:
        buf = io.BytesIO()
        pq.write_table(table, buf)
        return buf.getvalue()

    try:
        for name, table in (("narrow", narrow), ("wide", wide)):
            data = parquet(table)
            await objects.put(f"data/{name}", data)
            ref = table_file(f"{name}.parquet", f"data/{name}", len(data))
            footer = await tables.read_footer(ns, ref)
            assert pq.read_schema(io.BytesIO(footer)) == table.schema
            assert len(footer) < len(data)
        wide_footer = int.from_bytes(parquet(wide)[-8:-4], "little")
        assert wide_footer > tables.FOOTER_READ_BYTES  # the second read was needed
        await objects.put("data/text", b"not parquet at all")
        bad = [table_file("t.parquet", "data/text", 18)]
        claims = b"x" * 100 + (10_000).to_bytes(4, "little") + b"PAR1"
        await objects.put("data/claims", claims)
        bad.append(table_file("c.parquet", "data/claims", len(claims)))
        for ref in bad:
            with pytest.raises(CorruptFileError):
                await tables.read_footer(ns, ref)
    finally:
        await objects.aclose()
