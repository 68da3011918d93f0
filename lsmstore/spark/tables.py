"""Tables: a DataFrame as Parquet objects under a prefix of a branch, written as one unit.

``format("lsmstore").option("format", "parquet")`` (docs/spark.md, "Tables")::

    df.write.format("lsmstore").option("format", "parquet").option("partitionBy", "day")
      .mode("overwrite").save("lsm://repo/main/tables/events/")
    spark.read.format("lsmstore").option("format", "parquet")
      .option("partitionFilter", "day=2026-11-28").load("lsm://repo/main/tables/events/")

**Writes.**  Each task turns its Arrow record batches into Parquet files (pyarrow),
one file per Hive-style partition directory (``day=2026-11-28/``) and per
``fileBytes`` of Arrow data, uploads each as a fresh ``data/<directory><id>`` object of
the repository's storage namespace (the partition directories in the physical key too,
:func:`~lsmstore.layout.table_data_key`: Spark's own reader finds the values there,
:mod:`lsmstore.spark.native_read`) and reports the files (:class:`TableFile`: path in the
table, address, size, MD5, rows) -- no entry is staged by a task.  The driver's
``commit()`` turns all of them into object entries (and, in ``overwrite`` mode, into
tombstones of every object the branch holds under the table's prefix at that moment),
writes them as staging files and appends those with one ``append_l1_group``
(:mod:`lsmstore.spark.stage`): a reader sees the whole table version or none of it.

Crash table:

==============================================  ===========================================
crash or failure                                leaves
==============================================  ===========================================
a task, after uploading some files              ``data/`` objects no entry names: orphans
                                                the GC job deletes (two marks a grace
                                                period apart); a retried or speculative
                                                attempt writes files of its own
the job fails or is aborted (``abort()``)       the files the tasks reported are deleted;
                                                those of failed attempts are orphans
the driver before the group append              data objects and staging files of the job,
                                                unreferenced: the GC job and the staging
                                                sweep delete them
the driver after it (answer lost)               the table version is visible; a re-sent
                                                commit stages nothing twice (group id)
==============================================  ===========================================

The job must commit within half the staging grace period (``graceSeconds``) of its
first task's start, or nothing is staged (:func:`~lsmstore.spark.stage.check_job_age`):
the GC job may already hold older unreferenced data as a candidate.

An overwrite deletes what the branch holds under the prefix when the driver commits;
a write into the same prefix that lands between that listing and the group append
survives it (writers of one prefix are not serialised; use a transaction branch,
:mod:`lsmstore.spark.transaction`, for a pipeline).  The deleted entries' data stays
while a commit references it; data only the staging held becomes an orphan for the GC
job.

**Reads.**  The driver lists the Parquet objects under the prefix of the ref (a branch
with its staged writes, a tag, a commit; :mod:`lsmstore.spark.scan`), keeps the files
whose Hive-style partition values match ``partitionFilter`` (files of other partitions
are never opened), and infers the schema from the first file's footer plus the
partition columns (integers when every value is one, else strings).  Files are packed
into input partitions of Spark's split size, balanced over the cores (:func:`group_files`);
executors read the data objects from the namespace themselves.
Names starting with ``_`` or ``.`` (``_SUCCESS``, ``_committed_...``) and objects not
ending in ``.parquet`` are not table files.
"""

from __future__ import annotations

import hashlib
import heapq
import io
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from lsmstore import layout
from lsmstore.errors import CorruptFileError, InvalidInputError
from lsmstore.graveler.record import Record
from lsmstore.namespace import location_of
from lsmstore.objects.addresses import Location as DataLocation
from lsmstore.objects.addresses import Namespace
from lsmstore.refstore.names import check_ref_name
from lsmstore.refstore.url import open_refstore
from lsmstore.spark import rows, scan, stage
from lsmstore.spark.location import Location
from lsmstore.staging.files import new_file_id
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.storage.url import open_object_store

#: Default bound on the Arrow bytes of one partition directory a task buffers before it
#: writes them as one Parquet file.
TABLE_FILE_BYTES = 128 * 1024 * 1024
#: The partition value of a null (Hive's).
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
SUFFIX = ".parquet"
#: Rows per Arrow batch a table read hands to Spark.
READ_BATCH_ROWS = 65536
#: Bytes read from the end of a Parquet file for its schema (a footer usually fits; a
#: longer one takes a second read), and the longest footer read.
FOOTER_READ_BYTES = 64 * 1024
FOOTER_MAX_BYTES = 64 * 1024 * 1024
_MAGIC = b"PAR1"
#: Characters Hive escapes in a partition value (``%XX``), besides controls and ``%``.
_HIVE_ESCAPE = set("\"#%'*/:=?\\\x7f{[]^")


def _escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPE or ord(c) < 32 else c for c in value)


def table_prefix(loc: Location) -> bytes:
    """The table's key prefix, ending in ``/``; InvalidInputError for none (a table is
    a prefix of the branch, never all of it)."""
    if not loc.prefix.strip(b"/"):
        raise InvalidInputError(
            f"{loc}: a table names a prefix of the ref: lsm://<repository>/<ref>/<table>/"
        )
    return loc.prefix if loc.prefix.endswith(b"/") else loc.prefix + b"/"


def parse_columns(text: str | None) -> tuple[str, ...]:
    """``"a, b"`` -> ``("a", "b")`` (the ``partitionBy`` option)."""
    cols = tuple(c.strip() for c in (text or "").split(",") if c.strip())
    if len(set(cols)) != len(cols):
        raise InvalidInputError(f"partitionBy names a column twice: {text!r}")
    return cols


def parse_filter(text: str | None) -> dict[str, frozenset[str]]:
    """The ``partitionFilter`` option: ``"day=2026-11-28,2026-11-29;region=eu"`` -> the
    allowed values of each partition column (a file is read when each of its named
    columns has one of them)."""
    out: dict[str, frozenset[str]] = {}
    for part in (text or "").split(";"):
        if not part.strip():
            continue
        col, eq, values = part.partition("=")
        col = col.strip()
        if not eq or not col:
            raise InvalidInputError(f"partitionFilter: expected col=v1,v2;col2=v3, got {part!r}")
        if col in out:
            raise InvalidInputError(f"partitionFilter names {col!r} twice")
        out[col] = frozenset(v.strip() for v in values.split(","))
    return out


def partition_dir(columns: Sequence[str], values: Sequence[Any]) -> str:
    """``a=1/b=x/``: the Hive-style directory of one partition (nulls and empty strings
    as Hive's null, as Spark's writer makes them: Spark's reader refuses ``a=/``)."""
    parts = []
    for col, v in zip(columns, values, strict=True):
        text = HIVE_NULL if v is None or v == "" else _escape(v if isinstance(v, str) else _text(v))
        parts.append(f"{_escape(col)}={text}/")
    return "".join(parts)


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def partition_values(rel_path: str) -> dict[str, str | None]:
    """The ``col=value`` directories of a path inside a table."""
    out: dict[str, str | None] = {}
    for seg in rel_path.split("/")[:-1]:
        col, eq, value = seg.partition("=")
        if eq and col:
            out[unquote(col)] = None if value == HIVE_NULL else unquote(value)
    return out


def is_table_file(rel_path: str) -> bool:
    name = rel_path.rsplit("/", 1)[-1]
    return name.endswith(SUFFIX) and not name.startswith(("_", "."))


# --- writes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableFile:
    """One Parquet object a task uploaded (not staged)."""

    path: str  # relative to the table's prefix
    address: str  # full URI of its data
    size: int
    checksum: str  # MD5 hex
    rows: int


@dataclass
class TableMessage(WriterCommitMessage):
    """What a task wrote, and when it started."""

    files: list[TableFile]
    started: float


#: Rows of a column :func:`dictionary_columns` looks at, and the share of distinct values
#: in them up to which the column is dictionary-encoded.
DICTIONARY_SAMPLE_ROWS = 8192
DICTIONARY_MAX_DISTINCT = 0.5


def dictionary_columns(table: pa.Table) -> list[str]:
    """The top-level columns worth dictionary-encoding: those whose first
    :data:`DICTIONARY_SAMPLE_ROWS` values hold at most :data:`DICTIONARY_MAX_DISTINCT`
    distinct ones.

    pyarrow tries a dictionary for every column and, when it outgrows its page, falls
    back to plain encoding for the rest of the column, keeping the pages already
    written as dictionary pages: a column of mostly unique values costs twice the
    encoding time and reads slower in Spark's vectorised reader, which decodes
    through the dictionary.  Spark's own writer re-encodes such a first page plainly;
    this sample decides up front.  Booleans (run-length encoded anyway) and nested
    columns get no dictionary."""
    out = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        kind = column.type
        if pa.types.is_boolean(kind) or pa.types.is_nested(kind) or len(column) == 0:
            continue
        sample = column.slice(0, DICTIONARY_SAMPLE_ROWS)
        try:
            distinct = pc.count_distinct(sample, mode="all").as_py()
        except pa.ArrowNotImplementedError:
            continue
        if distinct <= DICTIONARY_MAX_DISTINCT * len(sample):
            out.append(name)
    return out


def _encode(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()  # Arrow's own buffer: no Python call per write
    pq.write_table(table, sink, compression="snappy", use_dictionary=dictionary_columns(table))
    data: bytes = sink.getvalue().to_pybytes()
    return data


def split_partitions(table: pa.Table, columns: Sequence[str]) -> Iterator[tuple[str, pa.Table]]:
    """``(directory, rows without the partition columns)`` of each partition value in
    ``table``."""
    if not columns:
        yield "", table
        return
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise InvalidInputError(
            f"partitionBy names columns the DataFrame lacks: {missing} (has {table.column_names})"
        )
    data = table.drop_columns(list(columns))
    if len(data.column_names) == 0:
        raise InvalidInputError("partitionBy names every column: no data column is left")
    # One integer per row naming its combination of values (dictionary codes, nulls
    # encoded too), the rows ordered by it, and the runs of equal codes cut as slices:
    # no Python step per row.
    code = np.zeros(table.num_rows, np.int64)
    for col in columns:
        encoded = pc.dictionary_encode(table.column(col).combine_chunks(), null_encoding="encode")
        code = code * (len(encoded.dictionary) + 1) + encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(code, kind="stable")
    ordered = data.take(pa.array(order))
    keys = table.select(list(columns)).take(pa.array(order))
    starts = [0, *(np.flatnonzero(np.diff(code[order])) + 1).tolist()]
    ends = [*starts[1:], table.num_rows]
    for start, end in zip(starts, ends, strict=True):
        values = [keys.column(c)[start].as_py() for c in columns]
        yield partition_dir(columns, values), ordered.slice(start, end - start)


class TableFiles:
    """One task's buffered partitions and the files it uploaded."""

    def __init__(
        self, objects: ObjectStore, base: str, columns: Sequence[str], file_bytes: int, task: int
    ) -> None:
        self.objects = objects
        self.base = base  # the namespace's full URI, ending in "/"
        self.columns = tuple(columns)
        self.file_bytes = max(1, file_bytes)
        self.task = task
        self.buffers: dict[str, list[pa.Table]] = {}
        self.sizes: dict[str, int] = {}
        self.files: list[TableFile] = []

    async def add(self, batch: pa.RecordBatch) -> None:
        for directory, part in split_partitions(pa.Table.from_batches([batch]), self.columns):
            self.buffers.setdefault(directory, []).append(part)
            self.sizes[directory] = self.sizes.get(directory, 0) + part.nbytes
            if self.sizes[directory] >= self.file_bytes:
                await self._flush(directory)

    async def finish(self) -> list[TableFile]:
        for directory in list(self.buffers):
            await self._flush(directory)
        return self.files

    async def _flush(self, directory: str) -> None:
        parts = self.buffers.pop(directory)
        self.sizes.pop(directory, None)
        table = pa.concat_tables(parts)
        data = _encode(table)
        fid = new_file_id()
        key = layout.table_data_key(directory, fid)
        await self.objects.put(key, data, PutMode.CREATE)
        name = f"{directory}part-{self.task:05d}-{fid}{SUFFIX}"
        self.files.append(
            TableFile(name, self.base + key, len(data), hashlib.md5(data).hexdigest(), len(table))
        )


def _task_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def table_records(
    prefix: bytes, files: Iterable[TableFile], ns: Namespace, mtime: int
) -> list[Record]:
    """The object entries of the files at ``prefix`` + their paths."""
    listed = list(files)
    if not listed:
        return []
    prefix_text = prefix.decode("utf-8")
    batch = pa.RecordBatch.from_pydict(
        {
            "path": [prefix_text + f.path for f in listed],
            "physical_address": [f.address for f in listed],
            "size": pa.array([f.size for f in listed], pa.int64()),
            "checksum": [f.checksum for f in listed],
        }
    )
    return list(rows.record_writer("objects", ns, mtime)(batch))


async def list_table(
    refstore: Any, objects: ObjectStore, repo: str, ref: str, prefix: bytes, ns: Namespace
) -> list[tuple[str, str, int]]:
    """``(path, physical address, size)`` of every object under ``prefix`` on ``ref``."""
    plan = await scan.plan_scan(refstore, objects, repo, ref, prefix=prefix)
    out: list[tuple[str, str, int]] = []
    for part in plan.partitions:
        async for chunk in scan.scan_partition_chunks(objects, part, rows.BATCH_ROWS):
            chunk = [r for r in chunk if r[0].startswith(prefix)]
            if not chunk:
                continue
            batch = rows.object_batch(chunk, ns)
            out += zip(
                batch.column("path").to_pylist(),
                batch.column("physical_address").to_pylist(),
                batch.column("size").to_pylist(),
                strict=True,
            )
    return out


class TableWriter(DataSourceArrowWriter):
    """Tasks upload Parquet files; ``commit()`` stages their entries as one group
    (module docstring)."""

    def __init__(self, opts: Any, overwrite: bool) -> None:
        from lsmstore.spark.source import _repository, run

        self.opts = opts
        self.overwrite = overwrite
        loc: Location = opts.location
        check_ref_name(loc.ref)  # writes go to a branch, by name
        self.prefix = table_prefix(loc)
        self.group_id = new_file_id()
        self.started = int(time.time())
        info = run(_repository(opts))
        self.namespace = info.namespace
        self.metadata = info.metadata
        self.repository_id = info.uid

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from lsmstore.spark.source import run

        return run(self._write(iterator, _task_id()))

    async def _write(self, iterator: Iterator[pa.RecordBatch], task: int) -> TableMessage:
        started = time.time()
        objects = open_object_store(self.namespace)
        try:
            ns = rows.namespace_of(objects.url, self.namespace, self.metadata)
            opts = self.opts
            files = TableFiles(objects, ns.base, opts.partition_by, opts.table_bytes, task)
            try:
                for batch in iterator:
                    await files.add(batch)
                return TableMessage(await files.finish(), started)
            except BaseException:
                await _delete_data(objects, ns, files.files)
                raise
        finally:
            await objects.aclose()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from lsmstore.spark.source import run

        msgs = [m for m in messages if isinstance(m, TableMessage)]
        run(self._commit(msgs))

    async def _commit(self, msgs: list[TableMessage]) -> None:
        loc = self.opts.location
        files = [f for m in msgs for f in m.files]
        objects = open_object_store(self.namespace)
        try:
            ns = rows.namespace_of(objects.url, self.namespace, self.metadata)
            async with open_refstore(self.opts.refstore) as refstore:
                try:
                    stage.check_job_age(
                        str(loc),
                        min((m.started for m in msgs), default=time.time()),
                        time.time(),
                        self.opts.grace_s,
                    )
                    records = await self._records(refstore, objects, ns, files)
                    if not records:
                        return
                    written = await stage.write_files(
                        objects, loc.ref, records, file_bytes=self.opts.file_bytes
                    )
                except BaseException:
                    await _delete_data(objects, ns, files)
                    raise
                await stage.commit_or_discard(
                    refstore,
                    objects,
                    loc.repo,
                    loc.ref,
                    self.group_id,
                    written,
                    grace_s=self.opts.grace_s,
                    repository_id=self.repository_id,
                    discard_also=lambda: _delete_data(objects, ns, files),
                )
        finally:
            await objects.aclose()

    async def _records(
        self, refstore: Any, objects: ObjectStore, ns: Namespace, files: list[TableFile]
    ) -> list[Record]:
        """The job's entries and, for an overwrite, tombstones of the other objects
        under the prefix now; sorted."""
        loc = self.opts.location
        records = table_records(self.prefix, files, ns, self.started)
        if self.overwrite:
            new = {r.key for r in records}
            old = await list_table(refstore, objects, loc.repo, loc.ref, self.prefix, ns)
            for path, _, _ in old:
                key = path.encode("utf-8")
                if key not in new:
                    records.append(Record(key, b"", None))
        return stage.sorted_unique(records)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        from lsmstore.spark.source import run

        files = [f for m in messages if isinstance(m, TableMessage) for f in m.files]
        run(self._abort(files))

    async def _abort(self, files: list[TableFile]) -> None:
        objects = open_object_store(self.namespace)
        try:
            ns = rows.namespace_of(objects.url, self.namespace, self.metadata)
            await _delete_data(objects, ns, files)
        finally:
            await objects.aclose()


async def _delete_data(objects: ObjectStore, ns: Namespace, files: Iterable[TableFile]) -> None:
    """Delete the data objects of files that will not be staged (absent ones are fine)."""
    for f in files:
        if f.address.startswith(ns.base):
            await objects.delete(f.address[len(ns.base) :])


# --- reads ---------------------------------------------------------------------------------


#: A file's cost when grouping files into input partitions, besides its bytes (Spark's
#: ``spark.sql.files.openCostInBytes``).
OPEN_COST = 4 * 1024 * 1024


@dataclass(frozen=True)
class TableFileRef:
    """One Parquet object of a table: its path in the table, address, size and
    partition values."""

    path: str
    address: str
    size: int
    values: tuple[tuple[str, str | None], ...]
    #: where the data is, by the namespace's read rules (:meth:`Namespace.locate`)
    location: DataLocation


@dataclass(frozen=True)
class TablePart:
    """Parquet objects one task reads."""

    index: int
    namespace: str
    files: tuple[TableFileRef, ...]


class _Partition(InputPartition):
    def __init__(self, part: TablePart) -> None:
        super().__init__(part.index)
        self.part = part


@dataclass(frozen=True)
class TablePlan:
    namespace: str
    base: str
    files: tuple[TableFileRef, ...]
    partition_columns: tuple[str, ...]


def group_files(
    files: Sequence[TableFileRef], max_bytes: int, parallelism: int
) -> list[tuple[TableFileRef, ...]]:
    """Files packed into input partitions: the split size is Spark's for a Parquet
    directory, ``min(max_bytes, max(OPEN_COST, total / parallelism))``, each file
    counting its bytes plus ``OPEN_COST``; the number of partitions is what that split
    size makes, rounded up to a multiple of ``parallelism`` (every wave of tasks keeps
    every core busy: Spark's first fit makes e.g. 14 + 14 + 4 files of 32 small ones,
    the last task running alone); largest files first, each into the least loaded
    partition (a new one where that would pass ``max_bytes``)."""
    if not files:
        return []
    cores = max(1, parallelism)
    total = sum(f.size + OPEN_COST for f in files)
    split = min(max_bytes, max(OPEN_COST, total // cores))
    count = -(-total // max(1, split))
    if count > cores:
        count = -(-count // cores) * cores
    count = max(1, min(count, len(files)))
    groups: list[list[TableFileRef]] = [[] for _ in range(count)]
    loads = [(0, i) for i in range(count)]  # a heap of (bytes, group)
    for f in sorted(files, key=lambda f: -f.size):
        cost = f.size + OPEN_COST
        load, i = loads[0]
        if groups[i] and load + cost > max_bytes:
            groups.append([f])
            heapq.heappush(loads, (cost, len(groups) - 1))
            continue
        groups[i].append(f)
        heapq.heapreplace(loads, (load + cost, i))
    return [tuple(g) for g in groups if g]


async def plan_table(opts: Any) -> TablePlan:
    """The table's Parquet objects on the ref, pruned by ``partitionFilter``."""
    loc: Location = opts.location
    prefix = table_prefix(loc)
    async with open_refstore(opts.refstore) as refstore:
        info = await refstore.get_repository(loc.repo)
        location = location_of(info)
        objects = open_object_store(location)
        try:
            ns = rows.namespace_of(objects.url, location, dict(info.metadata))
            listed = await list_table(refstore, objects, loc.repo, loc.ref, prefix, ns)
        finally:
            await objects.aclose()
    plen = len(prefix.decode("utf-8"))
    files: list[TableFileRef] = []
    columns: dict[str, None] = {}
    for path, address, size in listed:
        rel = path[plen:]
        if not is_table_file(rel):
            continue
        values = partition_values(rel)
        columns.update(dict.fromkeys(values))
        # entries from raw writes and staged files are unchecked: reads keep to the
        # places a link may name (CorruptFileError otherwise)
        where = ns.locate_address(address, path)
        files.append(TableFileRef(rel, address, size, tuple(values.items()), where))
    wanted = opts.partition_filter
    unknown = set(wanted) - set(columns)
    if unknown and files:
        raise InvalidInputError(
            f"partitionFilter names columns that are not partition columns of {loc}: "
            f"{sorted(unknown)} (partition columns: {list(columns)})"
        )
    kept = tuple(
        f for f in files if all(dict(f.values).get(c) in allowed for c, allowed in wanted.items())
    )
    return TablePlan(location, ns.base, kept, tuple(columns))


#: A partition value read as an integer: what Spark casts to a long (no ``_``, no
#: spaces, no ``+``).
_INTEGER = re.compile(r"-?[0-9]{1,19}")


def _partition_type(values: Iterable[str | None]) -> pa.DataType:
    present = [v for v in values if v is not None]
    for v in present:
        if not _INTEGER.fullmatch(v) or not -(2**63) <= int(v) < 2**63:
            return pa.string()
    return pa.int64() if present else pa.string()


def _store_of(namespace: str, f: TableFileRef) -> tuple[ObjectStore, str]:
    """The object store holding ``f``'s data (the namespace's, or the store of a linked
    object outside it) and the key there."""
    return open_object_store(f.location.store_url or namespace), f.location.key


async def _read_object(namespace: str, f: TableFileRef) -> bytes:
    objects, key = _store_of(namespace, f)
    try:
        return await objects.get(key)
    finally:
        await objects.aclose()


async def read_footer(namespace: str, f: TableFileRef) -> bytes:
    """The schema part of a Parquet file: its footer (metadata, the metadata's length,
    ``PAR1``) after a ``PAR1``, which pyarrow reads as a file without row groups' data.
    One ranged read of the last :data:`FOOTER_READ_BYTES` (a second when the footer is
    longer); CorruptFileError when the tail is not a Parquet footer or claims more than
    the file or :data:`FOOTER_MAX_BYTES`."""
    objects, key = _store_of(namespace, f)
    try:
        tail = await objects.get_range(key, max(0, f.size - FOOTER_READ_BYTES), f.size)
        if len(tail) < 12 or tail[-4:] != _MAGIC:
            raise CorruptFileError(f.address, "not a Parquet file: no footer")
        length = int.from_bytes(tail[-8:-4], "little")
        if length + 12 > f.size or length > FOOTER_MAX_BYTES:
            raise CorruptFileError(
                f.address, f"a Parquet footer of {length} bytes in a file of {f.size}"
            )
        if length + 8 > len(tail):
            tail = await objects.get_range(key, f.size - length - 8, f.size)
        return _MAGIC + tail[len(tail) - length - 8 :]
    finally:
        await objects.aclose()


def arrow_schema(plan: TablePlan, first: bytes | None) -> pa.Schema:
    """The table's schema: the first file's columns (``first``: that file, or its
    :func:`read_footer`), then the partition columns."""
    fields: list[pa.Field] = []
    if first is not None:
        try:
            fields = list(pq.read_schema(io.BytesIO(first)))
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptFileError(plan.files[0].address, f"not a Parquet file: {e}") from None
    names = {f.name for f in fields}
    for col in plan.partition_columns:
        if col not in names:
            types = _partition_type(dict(f.values).get(col) for f in plan.files)
            fields.append(pa.field(col, types))
    return pa.schema(fields)


async def plan_with_schema(opts: Any, *, need_schema: bool = True) -> tuple[TablePlan, pa.Schema]:
    """The table's plan and, when ``need_schema``, its Arrow schema (:func:`arrow_schema`
    of the first file's footer; InvalidInputError when the prefix holds no Parquet file:
    give ``.schema(...)``).  Without ``need_schema`` the schema has the partition
    columns alone."""
    plan = await plan_table(opts)
    if not need_schema:
        return plan, arrow_schema(plan, None)
    if not plan.files:
        raise InvalidInputError(
            f"{opts.location}: no Parquet files to infer a schema from; "
            "give the schema with .schema(...)"
        )
    return plan, arrow_schema(plan, await read_footer(plan.namespace, plan.files[0]))


def infer_schema(opts: Any) -> StructType:
    """The Spark schema of the table ``opts`` names (:func:`plan_with_schema`)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from lsmstore.spark.source import run

    schema: StructType = from_arrow_schema(run(plan_with_schema(opts))[1])
    return schema


class TableReader(DataSourceReader):
    def __init__(self, opts: Any, schema: StructType) -> None:
        from pyspark import SparkContext
        from pyspark.sql.pandas.types import to_arrow_schema

        from lsmstore.spark.source import run

        self.plan = run(plan_table(opts))
        self.schema = to_arrow_schema(schema)
        sc = SparkContext._active_spark_context
        self.parallelism = max(opts.min_partitions, sc.defaultParallelism if sc else 1)
        self.max_bytes = opts.partition_bytes

    def partitions(self) -> list[InputPartition]:
        groups = group_files(self.plan.files, self.max_bytes, self.parallelism)
        return [_Partition(TablePart(i, self.plan.namespace, g)) for i, g in enumerate(groups)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's files in order, each fetched while the one before is
        decoded (a thread fetches one file ahead: two files in memory at most)."""
        assert isinstance(partition, _Partition)
        part: TablePart = partition.part
        from lsmstore.spark.source import run

        def fetch(f: TableFileRef) -> bytes:
            return run(_read_object(part.namespace, f))

        with ThreadPoolExecutor(1, thread_name_prefix="lsm-table-fetch") as pool:
            ahead = [pool.submit(fetch, f) for f in part.files[:1]]
            for i, f in enumerate(part.files):
                data = ahead.pop().result()
                ahead += [pool.submit(fetch, g) for g in part.files[i + 1 : i + 2]]
                yield from self._read_file(f, data)

    def _read_file(self, f: TableFileRef, data: bytes) -> Iterator[pa.RecordBatch]:
        try:
            # One task per core: the file is decoded on the task's thread alone.
            table = pq.read_table(pa.BufferReader(data), use_threads=False)
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptFileError(f.address, f"not a Parquet file: {e}") from None
        values = dict(f.values)
        columns = []
        for field in self.schema:
            if field.name in table.column_names:
                columns.append(table.column(field.name).cast(field.type))
            elif field.name in values:
                v = values[field.name]
                value = pa.repeat(pa.scalar(v, pa.string()), table.num_rows)
                columns.append(value.cast(field.type))
            else:  # a column later files added: null here
                columns.append(pa.nulls(table.num_rows, field.type))
        out = pa.Table.from_arrays(columns, schema=self.schema)
        yield from out.to_batches(max_chunksize=READ_BATCH_ROWS)


__all__ = [
    "TableFile",
    "TableMessage",
    "TableReader",
    "TableWriter",
    "infer_schema",
    "parse_columns",
    "parse_filter",
    "partition_dir",
    "partition_values",
]
