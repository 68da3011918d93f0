"""Export of a ref's entries to a Parquet dataset the tasks write themselves.

``jobs.export`` to a local directory (a path or ``file://``) or an ``s3://`` object-store
URL (the forms :func:`~lsmstore.storage.url.open_object_store` takes) runs here: the
driver plans the scan as the data source's read does (one input partition per group of
committed ranges, staged writes merged in), and each task turns its partition's records
into Arrow batches and writes them with pyarrow as one Parquet file,
``part-<partition>-<job>.snappy.parquet``, through the object store -- no row crosses
from a Python worker to the JVM, which for an export through Spark's own writer was half
of the job's CPU (BENCHMARKS.md).  The driver then writes an empty ``_SUCCESS``, as
Spark's writer does.  Other outputs (``s3a://``, ``hdfs://``...) go through Spark's
writer (:func:`lsmstore.spark.jobs.export`).

An output that holds any object is refused (InvalidInputError), as Spark's
``errorifexists`` refuses an existing path, and the exporter claims it with an
``_EXPORTING`` object only one can create (a second export to it is refused until the
first is done).  A retried or speculative task writes the same key with the same rows
(the partition's records are fixed by the plan).  A job that fails deletes the parts it
wrote and its claim; a driver that dies mid-job leaves its parts and the claim, and no
``_SUCCESS``: delete the output before exporting to it again.  A file's columns are
dictionary-encoded as a table's are (:func:`~lsmstore.spark.tables.dictionary_columns`,
from its first batch).  Exports of a table's rows (option ``format`` ``parquet``) go
through Spark's writer.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from lsmstore.errors import InvalidInputError, ObjectExistsError
from lsmstore.gcfreeze import paused
from lsmstore.spark import rows, scan
from lsmstore.storage.base import PutMode
from lsmstore.storage.url import open_object_store

SUCCESS = "_SUCCESS"
#: Created (if absent) by the exporter that writes an output, deleted when it is done:
#: a second export to the same output is refused.  Readers skip ``_`` names.
CLAIM = "_EXPORTING"


def direct_target(output: str, default_fs: str = "file:///") -> str | None:
    """The object-store URL the tasks write ``output`` through, or None when Spark's
    writer must write it (a Hadoop file system's URL).  A path without a scheme is on
    Hadoop's default file system (``fs.defaultFS``): local only when that is
    ``file:``."""
    scheme = urlsplit(output).scheme.lower()
    if not scheme:
        if urlsplit(default_fs).scheme.lower() != "file":
            return None
        return Path(output).resolve().as_uri()
    if scheme in ("file", "s3"):
        return output
    return None


def export_direct(spark: Any, opts: Any, target: str) -> int:
    """Write the entries ``opts`` names to ``target`` (module docstring); the number of
    records written.  A job that fails deletes the parts it wrote."""
    from lsmstore.spark.source import plan_read, run

    plan, metadata = run(plan_read(opts))
    job = secrets.token_hex(8)
    run(_claim(target, job))
    parts = [(target, job, part, opts.mode, metadata) for part in plan.partitions]
    try:
        counts = [0]
        if parts:
            sc = spark.sparkContext
            counts = sc.parallelize(parts, len(parts)).map(_write_part).collect()
        else:  # nothing to read: one file with the schema alone, as Spark's writer leaves
            run(_put(target, _part_key(0, job), _empty(opts.mode)))
        run(_put(target, SUCCESS, b""))
    except BaseException:
        run(_clean(target, job))
        raise
    run(_clean(target, None))
    return int(sum(counts))


def _part_key(index: int, job: str) -> str:
    return f"part-{index:05d}-{job}.snappy.parquet"


def _empty(mode: rows.Mode) -> bytes:
    sink = pa.BufferOutputStream()
    pq.ParquetWriter(sink, rows.arrow_schema(mode)).close()
    data: bytes = sink.getvalue().to_pybytes()
    return data


async def _claim(target: str, job: str) -> None:
    """Refuse an output that holds anything, then claim it for ``job`` with a
    :data:`CLAIM` object only one exporter can create."""
    async with open_object_store(target) as out:
        async for meta in out.list(""):
            raise InvalidInputError(f"export output {target} exists (holds {meta.key!r})")
        try:
            await out.put(CLAIM, job.encode(), PutMode.CREATE)
        except ObjectExistsError:
            raise InvalidInputError(f"export output {target} is being written") from None


async def _clean(target: str, job: str | None) -> None:
    """Delete the claim on ``target`` and, for a failed ``job``, the parts it wrote."""
    async with open_object_store(target) as out:
        if job is not None:
            async for meta in out.list("part-"):
                if meta.key.endswith(f"-{job}.snappy.parquet"):
                    await out.delete(meta.key)
        await out.delete(CLAIM)


async def _put(target: str, key: str, data: bytes) -> None:
    async with open_object_store(target) as out:
        await out.put(key, data, PutMode.OVERWRITE)


def _write_part(task: tuple[str, str, scan.ScanPartition, rows.Mode, dict[str, str]]) -> int:
    from lsmstore.spark.source import run

    with paused():  # the task's records make no cycles (LsmWriter.write)
        return run(_write(*task))


async def _write(
    target: str, job: str, part: scan.ScanPartition, mode: rows.Mode, metadata: dict[str, str]
) -> int:
    """One partition's entries as one Parquet file, columns dictionary-encoded as the
    first batch suggests; the number of records."""
    from lsmstore.spark.source import read_batches
    from lsmstore.spark.tables import dictionary_columns

    sink = pa.BufferOutputStream()
    writer: pq.ParquetWriter | None = None
    n = 0
    async for batch in read_batches(part, mode, metadata):
        if writer is None:
            chosen = dictionary_columns(pa.Table.from_batches([batch]))
            writer = pq.ParquetWriter(
                sink, batch.schema, compression="snappy", use_dictionary=chosen
            )
        writer.write_batch(batch)
        n += batch.num_rows
    if writer is None:
        data = _empty(mode)
    else:
        writer.close()
        data = sink.getvalue().to_pybytes()
    await _put(target, _part_key(part.index, job), data)
    return n
