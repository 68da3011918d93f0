"""The ``lsmstore`` Spark data source (PySpark >= 4.0 Python Data Source API).

::

    spark.dataSource.register(LsmDataSource)        # or lsmstore.spark.register(spark)
    df = spark.read.format("lsmstore").load("lsm://repo/main/some/prefix")
    df.write.format("lsmstore").mode("append").save("lsm://repo/main")

Options (all strings): ``refstore`` (RefStore URL; default: the lsmstore configuration,
``LSMSTORE_REFSTORE``), ``format`` (``objects`` | ``raw``, :mod:`lsmstore.spark.rows`;
``parquet``: tables of Parquet objects, :mod:`lsmstore.spark.tables`, with the options
``partitionBy``, ``partitionFilter`` and ``tableFileBytes``),
``partitionBytes`` (read partition target, default 64 MiB of committed data),
``minPartitions`` (reads: smaller partitions when the target makes fewer, default 1),
``fileBytes`` (written staging file target, default 64 MiB), ``commit`` (``staging``:
one group append, the default; ``direct``: a commit onto the branch's base,
:mod:`lsmstore.spark.direct`), ``message`` (the commit message of a direct commit),
``graceSeconds`` (the staging grace period, default ``compaction_grace_s``).

Reads: one input partition per group of committed ranges (:mod:`lsmstore.spark.scan`);
executors read the files themselves.  Writes: each task sorts its rows, writes staging
files and returns their ids; ``commit()`` stages all of them with one
``append_l1_group`` (:mod:`lsmstore.spark.stage`) -- a reader sees the whole job or
nothing; ``abort()`` deletes the files the tasks reported.  Files of failed or
speculative attempts that no message names are orphans for the staging sweep.  The rows
of different tasks must not overlap in key: :func:`lsmstore.spark.save` range-partitions
and sorts them first.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from lsmstore.config import load_config
from lsmstore.errors import InvalidInputError
from lsmstore.gcfreeze import paused
from lsmstore.graveler.record import Record
from lsmstore.namespace import location_of
from lsmstore.refstore.names import check_ref_name
from lsmstore.refstore.url import open_refstore
from lsmstore.spark import rows, scan, stage, tables
from lsmstore.spark.location import Location, parse_location
from lsmstore.staging.files import new_file_id
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store

log = logging.getLogger(__name__)
T = TypeVar("T")
NAME = "lsmstore"
#: The ``format`` option of Parquet tables (:mod:`lsmstore.spark.tables`).
TABLE_FORMAT = "parquet"


def run(coro: Awaitable[T]) -> T:
    """Run a coroutine to completion from synchronous Spark code (in a fresh thread when
    the caller already runs an event loop)."""

    async def main() -> T:
        return await coro

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(("ok", asyncio.run(main())))
        except BaseException as e:
            box.append(("error", e))

    t = threading.Thread(target=target)
    t.start()
    t.join()
    kind, value = box[0]
    if kind == "error":
        raise value
    return value  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Options:
    location: Location
    refstore: str
    mode: rows.Mode
    partition_bytes: int
    min_partitions: int
    file_bytes: int
    commit: str
    message: str
    grace_s: float
    table: bool = False  # format "parquet": Parquet objects under a prefix (tables.py)
    partition_by: tuple[str, ...] = ()
    partition_filter: dict[str, frozenset[str]] = field(default_factory=dict)
    table_bytes: int = tables.TABLE_FILE_BYTES

    @classmethod
    def parse(cls, options: dict[str, str]) -> Options:
        opts = {k.lower(): v for k, v in options.items()}
        path = opts.get("path")
        if not path:
            raise InvalidInputError("no lsm://<repository>/<ref> given to load() or save()")
        cfg = load_config()
        commit = opts.get("commit", "staging")
        if commit not in ("staging", "direct"):
            raise InvalidInputError(f"commit must be 'staging' or 'direct', not {commit!r}")
        fmt = opts.get("format", "objects")
        table = fmt == TABLE_FORMAT
        try:
            return cls(
                parse_location(path),
                opts.get("refstore") or cfg.refstore_url,
                "objects" if table else rows.check_mode(fmt),
                int(opts.get("partitionbytes", scan.PARTITION_BYTES)),
                int(opts.get("minpartitions", 1)),
                int(opts.get("filebytes", stage.FILE_BYTES)),
                commit,
                opts.get("message", "Spark write"),
                float(opts.get("graceseconds", cfg.compaction_grace_s)),
                table,
                tables.parse_columns(opts.get("partitionby")),
                tables.parse_filter(opts.get("partitionfilter")),
                int(opts.get("tablefilebytes", tables.TABLE_FILE_BYTES)),
            )
        except ValueError as e:
            raise InvalidInputError(f"bad lsmstore option: {e}") from None


class LsmDataSource(DataSource):
    """``format("lsmstore")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str | StructType:
        opts = Options.parse(self.options)
        if opts.table:
            return tables.infer_schema(opts)
        return rows.schema(opts.mode)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = Options.parse(self.options)
        if opts.table:
            return tables.TableReader(opts, schema)
        return LsmReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts = Options.parse(self.options)
        if opts.table:
            if opts.commit != "staging":
                raise InvalidInputError("a Parquet table write is staged (commit='staging')")
            return tables.TableWriter(opts, overwrite)
        if overwrite:
            raise InvalidInputError(
                "lsmstore writes of entries append (mode('append')); overwrite is for "
                "format 'parquet'"
            )
        if opts.commit == "direct":
            from lsmstore.spark.direct import DirectWriter

            return DirectWriter(opts)
        return LsmWriter(opts)


# --- reads ---------------------------------------------------------------------------------


class _Partition(InputPartition):
    def __init__(self, part: scan.ScanPartition) -> None:
        super().__init__(part.index)
        self.part = part


@dataclass(frozen=True)
class _RepoInfo:
    namespace: str
    metadata: dict[str, str]
    uid: str = ""  # the repository's id: the commit is refused if it was re-created


async def plan_read(opts: Options) -> tuple[scan.ScanPlan, dict[str, str]]:
    """The scan plan of a read of entries and the repository's metadata."""
    async with open_refstore(opts.refstore) as refstore:
        info = await refstore.get_repository(opts.location.repo)
        objects = open_object_store(location_of(info))
        try:
            plan = await scan.plan_scan(
                refstore,
                objects,
                opts.location.repo,
                opts.location.ref,
                prefix=opts.location.prefix,
                partition_bytes=opts.partition_bytes,
                min_partitions=opts.min_partitions,
            )
        finally:
            await objects.aclose()
        return plan, dict(info.metadata)


class LsmReader(DataSourceReader):
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.plan, self.metadata = run(plan_read(opts))

    def partitions(self) -> list[InputPartition]:
        return [_Partition(p) for p in self.plan.partitions]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Partition)
        part: scan.ScanPartition = partition.part
        with paused():  # see write()
            return iter(run(_read(part, self.opts.mode, self.metadata)))


async def _read(
    part: scan.ScanPartition, mode: rows.Mode, metadata: dict[str, str]
) -> list[pa.RecordBatch]:
    return [batch async for batch in read_batches(part, mode, metadata)]


async def read_batches(
    part: scan.ScanPartition, mode: rows.Mode, metadata: dict[str, str]
) -> AsyncIterator[pa.RecordBatch]:
    """The partition's rows as Arrow record batches of up to ``rows.BATCH_ROWS``."""
    async with open_object_store(part.namespace) as objects:
        to_batch = rows.batch_reader(mode, rows.namespace_of(objects.url, part.namespace, metadata))
        async for chunk in scan.scan_partition_chunks(objects, part, rows.BATCH_ROWS):
            yield to_batch(chunk)


# --- writes --------------------------------------------------------------------------------


@dataclass
class FilesMessage(WriterCommitMessage):
    """What a task wrote: its staging files (not staged yet)."""

    files: list[stage.WrittenFile]


class LsmWriter(DataSourceArrowWriter):
    """Tasks write staging files; the driver stages them as one group.  Rows arrive as
    Arrow record batches (:mod:`lsmstore.spark.rows`)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        check_ref_name(opts.location.ref)  # writes go to a branch, by name
        if opts.location.prefix:
            raise InvalidInputError(f"{opts.location}: a write names a branch, not a prefix")
        self.group_id = new_file_id()
        self.started = int(time.time())
        info = run(_repository(opts))
        self.namespace = info.namespace
        self.metadata = info.metadata
        self.repository_id = info.uid

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        # A task holds its records (a million, by default) while it sorts and encodes
        # them: each full collection of the cyclic collector would walk all of them,
        # 1.7 us a record in all (BENCHMARKS.md, Spark).  They make no cycles; the
        # collector runs again when the task is done.
        with paused():
            return run(self._write(iterator))

    async def _write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        objects = open_object_store(self.namespace)
        try:
            ns = rows.namespace_of(objects.url, self.namespace, self.metadata)
            to_record = rows.record_writer(self.opts.mode, ns, self.started)
            records = stage.sorted_unique(itertools.chain.from_iterable(map(to_record, iterator)))
            return await self._store(objects, records)
        finally:
            await objects.aclose()

    async def _store(self, objects: ObjectStore, records: list[Record]) -> WriterCommitMessage:
        """One task's sorted, unique records -> what it reports to ``commit()``."""
        return FilesMessage(
            await stage.write_files(
                objects, self.opts.location.ref, records, file_bytes=self.opts.file_bytes
            )
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [f for m in messages if isinstance(m, FilesMessage) for f in m.files]
        run(self._commit(files))

    async def _commit(self, files: list[stage.WrittenFile]) -> None:
        loc = self.opts.location
        objects = open_object_store(self.namespace)
        try:
            async with open_refstore(self.opts.refstore) as refstore:
                await stage.commit_or_discard(
                    refstore,
                    objects,
                    loc.repo,
                    loc.ref,
                    self.group_id,
                    files,
                    grace_s=self.opts.grace_s,
                    repository_id=self.repository_id,
                )
        finally:
            await objects.aclose()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [f for m in messages if isinstance(m, FilesMessage) for f in m.files]
        run(self._discard(files))

    async def _discard(self, files: list[stage.WrittenFile]) -> None:
        objects = open_object_store(self.namespace)
        try:
            await stage.discard_files(objects, self.opts.location.ref, files)
        finally:
            await objects.aclose()


async def _repository(opts: Options) -> _RepoInfo:
    async with open_refstore(opts.refstore) as refstore:
        info = await refstore.get_repository(opts.location.repo)
        ref = await refstore.get_ref(opts.location.repo, opts.location.ref)
        if not ref.is_branch:
            raise InvalidInputError(f"{opts.location}: writes go to a branch, not a tag")
        return _RepoInfo(location_of(info), dict(info.metadata), info.uid)
