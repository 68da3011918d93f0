"""The Spark jobs on a local session: an inventory import (staged as one unit, or one
commit; racing writers and a compactor on the same branch), an export to Parquet, and
garbage collection with range reads on executors."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lsmstore
from lsmstore import layout
from lsmstore.compaction.job import CompactionJob
from lsmstore.gc.retention import Retention
from lsmstore.spark import export, jobs
from lsmstore.storage.url import open_object_store
from lsmstore.testing.compaction import make_config
from lsmstore.testing.servers import MotoServer, new_bucket

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[lsmstore.Store]:
    async with lsmstore.connect(
        f"local://{tmp_path / 'refs'}", batch_interval_ms=2, compaction_in_process="off"
    ) as s:
        yield s


def write_inventory(path: Path, n: int, *, csv: bool = False) -> list[dict[str, Any]]:
    """An S3-inventory-shaped file: bucket, key, size, last_modified_date, e_tag."""
    t0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    rows = [
        {
            "bucket": "src",
            "key": f"logs/{i:05d}.json",
            "size": 100 + i,
            "last_modified_date": t0 + datetime.timedelta(seconds=i),
            "e_tag": f"etag{i}",
        }
        for i in range(n)
    ]
    table = pa.Table.from_pylist(rows)
    if csv:
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, str(path))
    else:
        pq.write_table(table, str(path))
    return rows


async def listing(ref: lsmstore.Branch | lsmstore.Ref) -> dict[str, Any]:
    return {s.path: s async for s in ref.list_objects()}


async def test_import_as_one_unit_and_as_one_commit(
    spark: Any, store: lsmstore.Store, tmp_path: Path
) -> None:
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    inv = tmp_path / "inventory.parquet"
    rows = await asyncio.to_thread(write_inventory, inv, 500)
    opts = {"refstore": f"local://{tmp_path / 'refs'}"}
    n = await asyncio.to_thread(
        jobs.import_inventory,
        spark,
        "lsm://rep/main",
        [str(inv)],
        address_prefix=f"{ns}/data/imported/",
        partitions=3,
        options=opts,
    )
    assert n == 500
    got = await listing(repo.branch("main"))
    assert sorted(got) == [r["key"] for r in rows]
    first = got["logs/00000.json"]
    assert (first.size, first.checksum, first.physical_address, first.mtime) == (
        100,
        "etag0",
        f"{ns}/data/imported/logs/00000.json",
        int(rows[0]["last_modified_date"].timestamp()),
    )
    head = await repo.branch("main").head()
    assert len(head.l1) >= 1 and not head.l2
    # The same inventory as CSV, with a path prefix, committed directly.
    csv = tmp_path / "inventory.csv"
    await asyncio.to_thread(write_inventory, csv, 50, csv=True)
    await asyncio.to_thread(
        jobs.import_inventory,
        spark,
        "lsm://rep/main",
        [str(csv)],
        fmt="csv",
        address_prefix=f"{ns}/data/imported/",
        path_prefix="csv/",
        commit_message="import from csv",
        options=opts,
    )
    head2 = await repo.branch("main").head()
    assert head2.base != head.base and head2.l1 == head.l1
    committed = await listing(repo.ref(head2.base))
    assert sorted(committed) == [f"csv/logs/{i:05d}.json" for i in range(50)]
    commit = await repo.ref(head2.base).commit()
    assert commit.message == "import from csv"


async def test_import_racing_writers_and_a_compactor(
    spark: Any, store: lsmstore.Store, tmp_path: Path
) -> None:
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    main = repo.branch("main")
    inv = tmp_path / "inventory.parquet"
    await asyncio.to_thread(write_inventory, inv, 400)
    objects = open_object_store(ns)
    done = asyncio.Event()
    written: dict[str, bytes] = {}

    async def writer() -> None:
        i = 0
        while not done.is_set():
            path = f"live/{i:04d}"
            await main.upload(path, f"w{i}".encode())
            written[path] = f"w{i}".encode()
            i += 1
            await asyncio.sleep(0.005)

    async def compactor() -> None:
        cfg = make_config(compaction_grace_s=600)
        while not done.is_set():
            await CompactionJob(store.refstore, objects, "rep", "main", cfg).run()
            await asyncio.sleep(0.05)

    async def importer() -> None:
        try:
            await asyncio.to_thread(
                jobs.import_inventory,
                spark,
                "lsm://rep/main",
                [str(inv)],
                address_prefix=f"{ns}/data/imported/",
                partitions=4,
                options={"refstore": f"local://{tmp_path / 'refs'}"},
            )
        finally:
            done.set()

    await asyncio.gather(writer(), compactor(), importer())
    await main.flush()
    got = await listing(main)
    assert {p for p in got if p.startswith("logs/")} == {f"logs/{i:05d}.json" for i in range(400)}
    assert {p for p in got if p.startswith("live/")} == set(written)
    for p, data in written.items():
        reader = await main.open(p)
        assert await reader.read() == data
        await reader.aclose()


async def test_export_to_parquet(spark: Any, store: lsmstore.Store, tmp_path: Path) -> None:
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    main = repo.branch("main")
    for i in range(30):
        await main.upload(f"d/{i:02d}", f"x{i}".encode(), metadata={"n": str(i)})
    await main.commit("data")
    await main.upload("d/99", b"staged")
    await main.flush()
    out = tmp_path / "export"
    opts = {"refstore": f"local://{tmp_path / 'refs'}"}
    n = await asyncio.to_thread(jobs.export, spark, "lsm://rep/main/d/", str(out), options=opts)
    assert n == 31
    table = await asyncio.to_thread(pq.read_table, str(out))
    rows = sorted(table.to_pylist(), key=lambda r: r["path"])
    want = [s async for s in main.list_objects("d/")]
    assert [r["path"] for r in rows] == [s.path for s in want]
    assert [r["physical_address"] for r in rows] == [s.physical_address for s in want]
    assert dict(rows[3]["metadata"]) == {"n": "3"}
    # the tasks wrote the parts themselves, then the driver the _SUCCESS marker
    names = sorted(p.name for p in out.iterdir())
    assert names[0] == "_SUCCESS" and all(
        n.startswith("part-") and n.endswith(".snappy.parquet") for n in names[1:]
    )
    # an output that holds anything is refused, as Spark's errorifexists refuses it
    with pytest.raises(lsmstore.InvalidInputError, match="exists"):
        await asyncio.to_thread(jobs.export, spark, "lsm://rep/main/d/", out.as_uri(), options=opts)


async def test_a_failed_export_leaves_no_parts_and_one_exporter_claims_an_output(
    spark: Any, store: lsmstore.Store, tmp_path: Path
) -> None:
    ns = (tmp_path / "ns").as_uri()
    main = (await store.create_repository("rep", storage_namespace=ns)).branch("main")
    for i in range(40):
        await main.upload(f"d/{i:02d}", b"x")
    await main.flush()
    objects = open_object_store(ns)
    try:  # the staged files' data is gone (their sidecars stay): the tasks fail
        async for meta in objects.list(layout.staging_prefix("main")):
            if meta.key.endswith(".sst"):
                await objects.delete(meta.key)
    finally:
        await objects.aclose()
    out = tmp_path / "out"
    opts = {"refstore": f"local://{tmp_path / 'refs'}", "minPartitions": "2"}
    with pytest.raises(Exception, match=r"(?s)stage failure.*not found"):  # in the tasks
        await asyncio.to_thread(jobs.export, spark, "lsm://rep/main/d/", str(out), options=opts)
    # the job claimed the output, then its tasks failed: neither parts nor the claim
    assert not out.exists() or not list(out.iterdir())
    # two exporters of one output: one claims it, the other is refused
    target = out.as_uri()
    results = await asyncio.gather(
        export._claim(target, "a"), export._claim(target, "b"), return_exceptions=True
    )
    assert sorted(type(r).__name__ for r in results) == ["InvalidInputError", "NoneType"]
    assert [p.name for p in out.iterdir()] == [export.CLAIM]


def test_paths_without_a_scheme_are_on_hadoops_default_file_system(tmp_path: Path) -> None:
    assert export.direct_target(str(tmp_path / "o")) == (tmp_path / "o").as_uri()
    assert export.direct_target(str(tmp_path / "o"), "hdfs://nn:8020") is None
    assert export.direct_target("s3://b/o?endpoint_url=http://127.0.0.1:9") is not None
    for output in ("s3a://b/o", "hdfs://nn/o", "gs://b/o"):
        assert export.direct_target(output) is None


async def test_export_to_an_s3_url(
    spark: Any, store: lsmstore.Store, tmp_path: Path, moto: MotoServer
) -> None:
    """An ``s3://`` output is written by the tasks through the S3 object store; an
    empty prefix still gets a file with the schema."""
    ns = (tmp_path / "ns").as_uri()
    main = (await store.create_repository("rep", storage_namespace=ns)).branch("main")
    for i in range(120):
        await main.upload(f"k/{i:03d}", b"v")
    bucket = await new_bucket(moto.endpoint)
    opts = {"refstore": f"local://{tmp_path / 'refs'}", "minPartitions": "3"}
    target = f"s3://{bucket}/export?endpoint_url={moto.endpoint}"
    n = await asyncio.to_thread(jobs.export, spark, "lsm://rep/main/k/", target, options=opts)
    assert n == 120
    empty = f"s3://{bucket}/empty?endpoint_url={moto.endpoint}"
    assert (
        await asyncio.to_thread(jobs.export, spark, "lsm://rep/main/none/", empty, options=opts)
        == 0
    )
    out = open_object_store(f"s3://{bucket}?endpoint_url={moto.endpoint}")
    try:
        keys = [m.key async for m in out.list("")]
        paths = []
        for key in keys:
            if key.endswith(".parquet"):
                table = pq.read_table(pa.BufferReader(await out.get(key)))
                if key.startswith("export/"):
                    paths += table.column("path").to_pylist()
                else:
                    assert table.num_rows == 0 and "physical_address" in table.column_names
    finally:
        await out.aclose()
    assert sorted(paths) == [f"k/{i:03d}" for i in range(120)]
    assert {"export/_SUCCESS", "empty/_SUCCESS"} <= set(keys)


async def test_gc_job_reads_ranges_on_executors(
    spark: Any, store: lsmstore.Store, tmp_path: Path
) -> None:
    ns = (tmp_path / "ns").as_uri()
    repo = await store.create_repository("rep", storage_namespace=ns)
    main = repo.branch("main")
    await main.upload("a", b"1")
    await main.commit("one")
    await main.upload("a", b"2")
    await main.commit("two")
    url = f"local://{tmp_path / 'refs'}"
    report = await asyncio.to_thread(
        jobs.garbage_collect, spark, url, Retention(default_days=0), grace_s=1.0, dry_run=True
    )
    assert not report["errors"]
    (r,) = report["reports"]
    assert r["repo"] == "rep" and r["dry_run"] and r["previous_mark"] is None
    await asyncio.sleep(1.1)  # the grace period of this run is one (real) second
    report = await asyncio.to_thread(
        jobs.garbage_collect, spark, url, Retention(default_days=0), grace_s=1.0, dry_run=False
    )
    (r,) = report["reports"]
    assert r["deleted"].get("data") == 1  # "a" = b"1", referenced by the old commit only
    reader = await main.open("a")
    assert await reader.read() == b"2"
    json.dumps(report)  # the summary the CLI prints
