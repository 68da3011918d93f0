"""Tables read by Spark's own Parquet reader: :func:`read_table`.

::

    df = lsmstore.spark.read_table(spark, "lsm://repo/main/tables/events/",
                                   partitionFilter="day=2026-11-28")

The driver plans the read as the data source does (:func:`~lsmstore.spark.tables.plan_table`:
the Parquet objects under the prefix of a branch with its staged writes, a tag or a
commit, pruned by ``partitionFilter``; the schema from the first file's footer), then
hands the files' **physical addresses** to ``spark.read.parquet``: Spark's vectorised
reader reads only the columns a query uses, straight from the storage namespace, with no
row crossing from Python to the JVM.  ``format("lsmstore")`` reads the same rows through
Python workers; it needs no Hadoop file system for the namespace.

Each file's data is first located by the namespace's read rules (its key in the
namespace, or under an allowed external prefix; anything else is a CorruptFileError, as
for any read), then becomes a Hadoop path (:func:`physical_path`): the store's root --
a ``file://`` namespace as a path with its escapes decoded (on a file system every
executor mounts), ``s3://bucket/prefix`` as ``s3a://bucket/prefix`` (S3A must reach the
bucket: its endpoint and credentials, for instance per bucket with
``spark.hadoop.fs.s3a.bucket.<bucket>.*``) -- and the key as it is; a ``mem://``
namespace has no Hadoop path (InvalidInputError: read it with ``format("lsmstore")``).

Partition columns: the table writer puts each file's Hive-style partition directories
in its data key too where they are plain (``data/day=2026-11-28/<id>``,
:func:`~lsmstore.layout.table_data_key`), so Spark finds the values in the physical
paths under ``data/`` itself, as in a directory of its own (constant columns, and its
own pruning of files by filters on them).  When any file's key lacks them (values with
capitals, escapes or nulls; files written through the S3 gateway or the object API)
the values come from Spark's ``_metadata.file_name`` of each row: a map of the (at
most :data:`MAP_MAX_FILES`) file names to their values, else a broadcast join with a
table of them; two such files with one name but different values cannot be told apart
(InvalidInputError).  The DataFrame is a snapshot of the listing: it reads the files
the ref held when it was made, which an overwrite's later GC may delete.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from lsmstore import layout
from lsmstore.errors import InvalidInputError
from lsmstore.spark.tables import TableFileRef, TablePlan

#: Up to this many files the partition values come from a map literal (looked up per
#: row by a scan of its keys); past it, from a broadcast join.
MAP_MAX_FILES = 64


def hadoop_root(store_url: str) -> str:
    """The Hadoop path of the root of a store (a storage namespace, or the root a
    linked object's location names), ending in ``/``.  Hadoop paths are not URIs: a
    ``file://`` URL's escapes are decoded; S3 keys are kept as they are."""
    parts = urlsplit(store_url)
    scheme = parts.scheme.lower()
    if scheme == "file":
        try:
            path = unquote(parts.path, errors="strict")
        except UnicodeDecodeError:
            raise InvalidInputError(f"{store_url}: its escapes are not UTF-8") from None
        return "file://" + path.rstrip("/") + "/"
    if scheme == "s3":
        return f"s3a://{parts.netloc}{parts.path.rstrip('/')}/"
    raise InvalidInputError(
        f"{store_url}: Spark's Parquet reader has no file system for {scheme}:// "
        'addresses; read the table with format("lsmstore")'
    )


def physical_path(plan: TablePlan, f: TableFileRef) -> str:
    """The Hadoop path of ``f``'s data: the root of its store and its key, by the
    namespace's read rules (``f.location``)."""
    return hadoop_root(f.location.store_url or plan.base) + f.location.key


def partition_rows(
    names: Sequence[str], files: Sequence[TableFileRef], columns: Sequence[str]
) -> dict[str, tuple[str | None, ...]]:
    """File name (``names[i]`` of ``files[i]``, as Spark's ``_metadata.file_name`` shows
    it) -> its values of ``columns``; InvalidInputError when two files share a name but
    not their values."""
    out: dict[str, tuple[str | None, ...]] = {}
    for name, f in zip(names, files, strict=True):
        values = dict(f.values)
        row = tuple(values.get(c) for c in columns)
        if out.setdefault(name, row) != row:
            raise InvalidInputError(
                f"two files of the table are named {name!r} with different partition "
                'values; read the table with format("lsmstore")'
            )
    return out


def read_table(spark: Any, url: str, *, schema: Any = None, **options: str) -> Any:
    """The table at ``url`` (``lsm://repo/ref/prefix/``) as a DataFrame read by Spark's
    Parquet reader (module docstring).  ``options`` are the data source's
    (``refstore``, ``partitionFilter``); ``schema`` a ``StructType`` or DDL string, else
    the first file's columns and the partition columns.  InvalidInputError when the
    prefix holds no Parquet file and no schema is given."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructType

    from lsmstore.spark.source import Options, run
    from lsmstore.spark.tables import plan_with_schema

    opts = Options.parse({**options, "format": "parquet", "path": url})
    plan, arrow = run(plan_with_schema(opts, need_schema=schema is None))
    try:
        if schema is None:
            schema = from_arrow_schema(arrow)
        elif isinstance(schema, str):
            schema = StructType.fromDDL(schema)
    except Exception as e:  # PySpark's parse and type errors are no LsmError
        raise InvalidInputError(f"{url}: bad schema: {e}") from None
    if not isinstance(schema, StructType):
        raise InvalidInputError(f"schema must be a StructType or a DDL string, not {schema!r}")
    if not plan.files:
        return spark.createDataFrame([], schema)
    columns = [c for c in plan.partition_columns if c in schema.fieldNames()]
    paths = [physical_path(plan, f) for f in plan.files]
    if not columns:
        return spark.read.schema(schema).parquet(*paths)
    if all(in_hive_layout(plan, f) for f in plan.files):
        # Spark finds the partition values in the paths under data/ itself
        root = hadoop_root(plan.base) + layout.DATA
        df = spark.read.schema(schema).option("basePath", root).parquet(*paths)
        return df.select(*(F.col(_quoted(n)) for n in schema.fieldNames()))
    data = StructType([f for f in schema.fields if f.name not in columns])
    df = spark.read.schema(data).parquet(*paths)
    by_name = partition_rows([p.rsplit("/", 1)[-1] for p in paths], plan.files, columns)
    types = {f.name: f.dataType for f in schema.fields}
    name = F.col("_metadata.file_name")
    if len(by_name) <= MAP_MAX_FILES:
        for i, col in enumerate(columns):
            pairs = [F.lit(x) for n, row in by_name.items() for x in (n, row[i])]
            value = F.element_at(F.create_map(*pairs), name)
            df = df.withColumn(col, value.cast(types[col]))
    else:
        key = "_lsm_file_name"
        table = spark.createDataFrame(
            [(n, *row) for n, row in by_name.items()],
            StructType.fromDDL(", ".join(f"{_quoted(c)} string" for c in (key, *columns))),
        )
        df = df.withColumn(key, name).join(F.broadcast(table), key, "left")
        for col in columns:
            df = df.withColumn(col, F.col(col).cast(types[col]))
    return df.select(*(F.col(_quoted(n)) for n in schema.fieldNames()))


def in_hive_layout(plan: TablePlan, f: TableFileRef) -> bool:
    """Whether ``f``'s data key in the namespace holds its partition directories, all of
    the table's partition columns in order, as :func:`~lsmstore.layout.table_data_key`
    writes them (nothing escaped, so Spark reads the values as they are)."""
    if f.location.store_url is not None or [c for c, _ in f.values] != list(plan.partition_columns):
        return False
    logical, _, _ = f.path.rpartition("/")
    key = f.location.key
    if not key.startswith(layout.DATA):
        return False
    physical, _, _ = key[len(layout.DATA) :].rpartition("/")
    return logical == physical and layout.TABLE_DIRS.fullmatch(logical + "/") is not None


def _quoted(name: str) -> str:
    """``name`` as one identifier in a column expression or DDL (dots and all)."""
    return "`" + name.replace("`", "``") + "`"
