"""A real Spark cluster: a standalone master and one worker on loopback run the import
and export jobs submitted with spark-submit."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lsmstore
import lsmstore.spark.__main__ as app
from lsmstore.testing.spark import StandaloneCluster

pytestmark = pytest.mark.timeout(900)


def _summary(proc: object) -> dict[str, object]:
    out = proc.stdout.decode()  # type: ignore[attr-defined]
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert lines, f"no summary; stderr:\n{proc.stderr.decode()[-4000:]}"  # type: ignore[attr-defined]
    return json.loads(lines[-1])  # type: ignore[no-any-return]


async def test_import_and_export_with_spark_submit(tmp_path: Path) -> None:
    refstore = f"local://{tmp_path / 'refs'}"
    ns = (tmp_path / "ns").as_uri()
    async with lsmstore.connect(refstore, compaction_in_process="off") as store:
        repo = await store.create_repository("rep", storage_namespace=ns)
    inv = tmp_path / "inventory.parquet"
    rows = [{"key": f"k/{i:04d}", "size": i, "e_tag": f"e{i}"} for i in range(200)]
    await asyncio.to_thread(pq.write_table, pa.Table.from_pylist(rows), str(inv))
    cluster = StandaloneCluster(str(tmp_path))
    await asyncio.to_thread(cluster.start)
    try:
        common = ["--refstore", refstore]
        imported = await asyncio.to_thread(
            cluster.submit,
            app.__file__,
            [
                *common,
                "import",
                "lsm://rep/main",
                str(inv),
                "--address-prefix",
                f"{ns}/data/",
                "--commit",
                "inventory",
            ],
        )
        assert imported.returncode == 0, imported.stderr.decode()[-4000:]
        assert _summary(imported)["entries"] == 200
        out = tmp_path / "export"
        exported = await asyncio.to_thread(
            cluster.submit, app.__file__, [*common, "export", "lsm://rep/main", str(out)]
        )
        assert exported.returncode == 0, exported.stderr.decode()[-4000:]
        assert _summary(exported)["records"] == 200
    finally:
        await asyncio.to_thread(cluster.stop)
    table = await asyncio.to_thread(pq.read_table, str(out))
    assert sorted(table.column("path").to_pylist()) == [r["key"] for r in rows]
    async with lsmstore.connect(refstore, compaction_in_process="off") as store:
        repo = await store.get_repository("rep")
        head = await repo.branch("main").head()
        assert head.l1 == ()  # committed directly
        assert (await repo.ref(head.base).commit()).message == "inventory"


async def test_table_write_survives_a_killed_executor(tmp_path: Path) -> None:
    """A table job on the standalone cluster whose executor JVM is killed mid-write
    retries on a new executor and lands whole, once; the table reads back."""
    refstore = f"local://{tmp_path / 'refs'}"
    ns = (tmp_path / "ns").as_uri()
    async with lsmstore.connect(refstore, compaction_in_process="off") as store:
        await store.create_repository("rep", storage_namespace=ns)
    cluster = StandaloneCluster(str(tmp_path))
    await asyncio.to_thread(cluster.start)
    marker = tmp_path / "killed"
    app_file = Path(__file__).parent / "helpers" / "table_app.py"
    try:
        proc = await asyncio.to_thread(
            cluster.submit, str(app_file), [refstore, "lsm://rep/main/tables/t/", str(marker)]
        )
    finally:
        await asyncio.to_thread(cluster.stop)
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    assert _summary(proc) == {
        "rows_equal": True,
        "pruned": 250,
        "read_table_equal": True,
        "read_table_pruned": 250,
        "killed": True,
    }
    async with lsmstore.connect(refstore, compaction_in_process="off") as store:
        main = (await store.get_repository("rep")).branch("main")
        head = await main.head()
        assert len(head.l1) == 1  # one group append
        listed = [s.path async for s in main.list_objects("tables/t/")]
        assert {p.split("/")[2] for p in listed} == {"p=0", "p=1", "p=2", "p=3"}
