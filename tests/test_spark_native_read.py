"""Tables read by Spark's own Parquet reader (``lsmstore.spark.read_table``): the rows
the data source wrote, at a branch and at a commit, partition values from the Hive-style
directories of the data keys (or by map and by join for files without them), pruning
by ``partitionFilter``, schemas given or inferred, and the refusals (no file system
for the address, ambiguous file names, nothing to infer a schema from)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.spark_env import SparkEnv, collect_twice, spark_env

import lsmstore
from lsmstore import layout
from lsmstore.errors import InvalidInputError
from lsmstore.objects.addresses import Location
from lsmstore.objects.entry import AddressType, ObjectEntry, encode_value
from lsmstore.spark import native_read, read_table, register
from lsmstore.spark.tables import TableFileRef
from lsmstore.storage.url import open_object_store

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[SparkEnv]:
    async with spark_env(tmp_path, {"format": "parquet"}) as e:
        yield e


def frame(spark: Any, n: int) -> Any:
    return spark.range(n, numPartitions=3).selectExpr(
        "id",
        "cast(id % 3 as int) as p",
        "if(id % 2 = 0, 'even', 'odd') as `q.r`",
        "concat('v-', cast(id as string)) as s",
    )


def want(n: int) -> list[tuple[Any, ...]]:
    return [(i, i % 3, "even" if i % 2 == 0 else "odd", f"v-{i}") for i in range(n)]


def write(df: Any, url: str, **options: str) -> None:
    register(df.sparkSession)
    df.write.format("lsmstore").options(**options).mode("append").save(url)


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "p", "`q.r`", "s").collect())


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kwargs)


async def test_spark_finds_the_partition_values_in_the_data_keys(spark: Any, env: SparkEnv) -> None:
    url = "lsm://rep/main/tables/t/"
    await in_thread(write, frame(spark, 600), url, **env.opts(partitionBy="p,q.r"))
    df = await in_thread(read_table, spark, url, refstore=env.refstore_url)
    # the partition columns come after the data columns, typed from their values
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("id", "bigint"),
        ("s", "string"),
        ("p", "bigint"),
        ("q.r", "string"),
    ]
    assert await in_thread(rows, df) == want(600)
    # Spark reads the data objects themselves, whose keys hold the partition directories
    files = await in_thread(df.inputFiles)
    assert len(files) == 18 and all("/ns/data/p=" in f and "/q.r=" in f for f in files)
    plan = await in_thread(_plan, df.where("p = 1"))
    assert "_metadata" not in plan and "PartitionFilters: [isnotnull(p" in plan
    assert await in_thread(lambda: df.where("p = 1 and `q.r` = 'odd'").count()) == 100
    assert await in_thread(lambda: df.select("s").count()) == 600


async def test_files_without_directories_in_their_keys_by_map_and_by_join(
    spark: Any, env: SparkEnv, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Table files uploaded through the object API (``data/<id>`` keys): the values
    come from each row's file name."""
    main = (await env.store.get_repository("rep")).branch("main")
    for p in range(3):
        local = str(tmp_path / f"p{p}.parquet")
        table = pa.table({"id": [i for i in range(90) if i % 3 == p], "s": ["x"] * 30})
        pq.write_table(table, local)
        data = await asyncio.to_thread(Path(local).read_bytes)
        await main.upload(f"tables/u/p={p}/part-0.parquet", data)
    url = "lsm://rep/main/tables/u/"
    df = await in_thread(read_table, spark, url, refstore=env.refstore_url)
    assert "_metadata" in await in_thread(_plan, df)
    got = await in_thread(lambda: sorted(tuple(r) for r in df.collect()))
    assert got == [(i, "x", i % 3) for i in range(90)]
    # more files than the map takes: the values come from a broadcast join
    monkeypatch.setattr(native_read, "MAP_MAX_FILES", 1)
    joined = await in_thread(read_table, spark, url, refstore=env.refstore_url)
    assert "BroadcastHashJoin" in await in_thread(_plan, joined)
    assert await in_thread(lambda: sorted(tuple(r) for r in joined.collect())) == got
    assert await in_thread(lambda: joined.where("p = 2").count()) == 30


def _plan(df: Any) -> str:
    text: str = df._jdf.queryExecution().executedPlan().toString()
    return text


async def test_a_commit_a_filter_and_a_given_schema(spark: Any, env: SparkEnv) -> None:
    main = (await env.store.get_repository("rep")).branch("main")
    url = "lsm://rep/main/tables/t/"
    await in_thread(write, frame(spark, 300), url, **env.opts(partitionBy="p"))
    commit = await main.commit("table t")
    # the data of p=0 and p=2 is gone: a read that opened one of their files would fail
    objects = open_object_store(env.ns)
    try:
        async for s in main.list_objects("tables/t/"):
            if "/p=1/" not in s.path:
                await objects.delete(s.physical_address.removeprefix(objects.url + "/"))
    finally:
        await objects.aclose()
    at_commit = f"lsm://rep/{commit.id}/tables/t/"
    pruned = await in_thread(
        read_table, spark, at_commit, refstore=env.refstore_url, partitionFilter="p=1"
    )
    assert await in_thread(rows, pruned) == [r for r in want(300) if r[1] == 1]
    # a schema given: the partition column typed as asked, the columns in its order
    typed = await in_thread(
        read_table,
        spark,
        at_commit,
        schema="p string, s string, id long, `q.r` string",
        refstore=env.refstore_url,
        partitionFilter="p=1",
    )
    assert typed.columns == ["p", "s", "id", "q.r"]
    got = await in_thread(lambda: sorted(tuple(r) for r in typed.collect()))
    assert got == sorted(
        ("1", f"v-{i}", i, "even" if i % 2 == 0 else "odd") for i in range(1, 300, 3)
    )


async def test_empty_prefixes_and_refusals(spark: Any, env: SparkEnv) -> None:
    empty = "lsm://rep/main/tables/none/"
    with pytest.raises(InvalidInputError, match="no Parquet files"):
        await in_thread(read_table, spark, empty, refstore=env.refstore_url)
    df = await in_thread(
        read_table, spark, empty, schema="id long, s string", refstore=env.refstore_url
    )
    assert df.columns == ["id", "s"] and await in_thread(df.count) == 0
    with pytest.raises(InvalidInputError, match="names a prefix"):
        await in_thread(read_table, spark, "lsm://rep/main", refstore=env.refstore_url)
    with pytest.raises(InvalidInputError, match="bad schema"):
        await in_thread(read_table, spark, empty, schema="id lon g,", refstore=env.refstore_url)


def test_data_keys_carry_plain_partition_directories_only() -> None:
    fid = "001a223cb846a0a36ca1f0d1d009a"
    assert layout.table_data_key("day=2026-11-28/q.r=x_1/", fid) == (
        f"data/day=2026-11-28/q.r=x_1/{fid}"
    )
    for directory in (
        "",  # unpartitioned
        "p=A/",  # a case-insensitive file system would merge it with p=a/
        "P=a/",
        "p=a%3Ab/",  # a file:// namespace reads escapes in addresses
        "p=é/",  # a normalising file system may rename it
        "p=/",  # Spark refuses an empty value
        ".lsm-tmp.x=1/",  # the local store's temporary names
        "_p=1/",  # names Spark hides
        "p=__HIVE_DEFAULT_PARTITION__/",
        "p=" + "x" * 200 + "/",  # past MAX_TABLE_DIRS_BYTES
    ):
        assert layout.table_data_key(directory, fid) == f"data/{fid}", directory


def test_store_roots_become_hadoop_paths() -> None:
    root = native_read.hadoop_root
    assert root("file:///tmp/a%20b/ns") == "file:///tmp/a b/ns/"
    assert root("file:///") == "file:///"
    # S3 keys are kept as they are: S3A maps the path back to the same key
    assert root("s3://bkt/pre%3Dfix") == "s3a://bkt/pre%3Dfix/"
    assert root("S3://bkt?endpoint_url=http://127.0.0.1:9") == "s3a://bkt/"
    for url in ("mem://ns", "gs://b/k", "https://h/k"):
        with pytest.raises(InvalidInputError, match='format\\("lsmstore"\\)'):
            root(url)
    with pytest.raises(InvalidInputError):
        root("file:///tmp/%ff")  # not UTF-8


def test_one_name_with_two_partition_values_is_refused() -> None:
    def ref(p: str) -> TableFileRef:
        return TableFileRef(f"p={p}/x.parquet", "a", 1, (("p", p),), Location("k"))

    names = ["part.parquet", "part.parquet"]
    same = native_read.partition_rows(names, [ref("1"), ref("1")], ["p"])
    assert same == {"part.parquet": ("1",)}
    with pytest.raises(InvalidInputError, match="different partition values"):
        native_read.partition_rows(names, [ref("1"), ref("2")], ["p"])


async def test_values_that_need_escapes_capitals_empty_and_null(spark: Any, env: SparkEnv) -> None:
    """Partition values a data key cannot carry as they are: those files keep flat
    ``data/<id>`` keys, every reader gets the values from the table's paths, and the
    GC job keeps every file's data."""
    values = ["a b:c/d%e", "Upper", "", None, "plain", "é"]
    df = spark.createDataFrame(
        [(i, values[i % len(values)]) for i in range(60)], "id long, v string"
    )
    url = "lsm://rep/main/tables/e/"
    await in_thread(write, df, url, **env.opts(partitionBy="v"))
    main = (await env.store.get_repository("rep")).branch("main")
    stats = [s async for s in main.list_objects("tables/e/")]
    plain = {s.physical_address for s in stats if "/v=plain/" in s.path}
    assert plain and all("/ns/data/v=plain/" in a for a in plain)
    assert all("/ns/data/v=" not in s.physical_address for s in stats if "/v=plain/" not in s.path)
    # "" and null are one partition in Hive's layout (__HIVE_DEFAULT_PARTITION__)
    want_rows = sorted((i, values[i % len(values)] or None) for i in range(60))

    def both() -> tuple[list[Any], list[Any]]:
        native = read_table(spark, url, refstore=env.refstore_url)
        source = spark.read.format("lsmstore").options(**env.opts()).load(url)
        return (
            sorted((r.id, r.v) for r in native.collect()),
            sorted((r.id, r.v) for r in source.collect()),
        )

    assert await in_thread(both) == (want_rows, want_rows)
    await collect_twice(env)
    assert await in_thread(both) == (want_rows, want_rows)


async def test_addresses_outside_the_namespace_are_not_read(spark: Any, env: SparkEnv) -> None:
    """An entry written raw may name any address; a table read keeps to the places a
    link may name, as every read does."""
    main = (await env.store.get_repository("rep")).branch("main")
    outside = ObjectEntry("file:///etc/hostname", AddressType.FULL, 10, "e" * 32, 0)
    identity, value = encode_value(outside)
    await main.put("tables/x/p=1/part.parquet", value, identity=identity)
    await main.flush()
    url = "lsm://rep/main/tables/x/"
    for read in (
        lambda: read_table(spark, url, refstore=env.refstore_url),
        lambda: spark.read.format("lsmstore").options(**env.opts()).load(url).collect(),
    ):
        with pytest.raises(Exception, match="unreadable physical address"):
            await in_thread(read)


async def test_the_store_api_and_read_table_agree(spark: Any, env: SparkEnv) -> None:
    """Every file read_table hands to Spark is the physical address of an object the
    ref lists under the table's prefix."""
    url = "lsm://rep/main/tables/t/"
    await in_thread(write, frame(spark, 90), url, **env.opts(partitionBy="p"))
    main: lsmstore.Branch = (await env.store.get_repository("rep")).branch("main")
    listed = {s.physical_address async for s in main.list_objects("tables/t/")}
    df = await in_thread(read_table, spark, url, refstore=env.refstore_url)
    assert set(await in_thread(df.inputFiles)) == listed
