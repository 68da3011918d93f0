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

Addresses become Hadoop paths (:func:`hadoop_path`): ``file://`` as is (a namespace on a
file system every executor mounts), ``s3://bucket/key`` as ``s3a://bucket/key`` (S3A
must reach the bucket: its endpoint and credentials, for instance per bucket with
``spark.hadoop.fs.s3a.bucket.<bucket>.*``); a ``mem://`` namespace has no Hadoop path
(InvalidInputError: read it with ``format("lsmstore")``).

Partition columns: the table writer puts each file's Hive-style partition directories
in its data key too (``data/day=2026-11-28/<id>``, :func:`~lsmstore.layout.table_data_key`),
so Spark finds the values in the physical paths under ``data/`` itself, as in a
directory of its own (constant columns, and its own pruning of files by filters on
them).  Files whose data keys lack them (written through the S3 gateway or the object
API, or with directories too long for a key) take their values from Spark's
``_metadata.file_name`` of each row: a map of the (at most :data:`MAP_MAX_FILES`) file
names to their values, else a broadcast join with a table of them; two such files with
one name but different values cannot be told apart (InvalidInputError).  The DataFrame
is a snapshot of the listing: it reads the files the ref held when it was made.
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


def hadoop_path(address: str) -> str:
    """The Hadoop path of a physical address (module docstring).  Hadoop paths are not
    URIs: the percent-escapes of the address are decoded."""
    parts = urlsplit(address)
    scheme = parts.scheme.lower()
    try:
        path = unquote(parts.path, errors="strict")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{address}: the escapes of its path are not UTF-8") from None
    if scheme == "file":
        return "file://" + path
    if scheme == "s3":
        return f"s3a://{parts.netloc}{path}"
    raise InvalidInputError(
        f"{address}: Spark's Parquet reader has no file system for {scheme}:// "
        'addresses; read the table with format("lsmstore")'
    )


def file_name(address: str) -> str:
    """The last segment of ``address``, as Spark's ``_metadata.file_name`` shows it."""
    return unquote(address.rsplit("/", 1)[-1])


def partition_rows(
    files: Sequence[TableFileRef], columns: Sequence[str]
) -> dict[str, tuple[str | None, ...]]:
    """File name -> its values of ``columns``; InvalidInputError when two files share a
    name but not their values."""
    out: dict[str, tuple[str | None, ...]] = {}
    for f in files:
        values = dict(f.values)
        row = tuple(values.get(c) for c in columns)
        name = file_name(f.address)
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
    if schema is None:
        schema = from_arrow_schema(arrow)
    elif isinstance(schema, str):
        schema = StructType.fromDDL(schema)
    if not plan.files:
        return spark.createDataFrame([], schema)
    columns = [c for c in plan.partition_columns if c in schema.fieldNames()]
    paths = [physical_path(plan, f) for f in plan.files]
    if not columns:
        return spark.read.schema(schema).parquet(*paths)
    if all(in_hive_layout(plan, f) for f in plan.files):
        # Spark finds the partition values in the paths under data/ itself
        root = hadoop_path(plan.base) + layout.DATA
        df = spark.read.schema(schema).option("basePath", root).parquet(*paths)
        return df.select(*(F.col(_quoted(n)) for n in schema.fieldNames()))
    data = StructType([f for f in schema.fields if f.name not in columns])
    df = spark.read.schema(data).parquet(*paths)
    by_name = partition_rows(plan.files, columns)
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
        df = df.withColumn(key, name).join(F.broadcast(table), key)
        for col in columns:
            df = df.withColumn(col, F.col(col).cast(types[col]))
    return df.select(*(F.col(_quoted(n)) for n in schema.fieldNames()))


def physical_path(plan: TablePlan, f: TableFileRef) -> str:
    """The Hadoop path of ``f``'s data: an address in the namespace is its base (a URI)
    and the key as it is."""
    if f.address.startswith(plan.base):
        return hadoop_path(plan.base) + f.address[len(plan.base) :]
    return hadoop_path(f.address)


def in_hive_layout(plan: TablePlan, f: TableFileRef) -> bool:
    """Whether ``f``'s data key holds its partition directories, all of the table's
    partition columns in order (:func:`~lsmstore.layout.table_data_key`)."""
    root = plan.base + layout.DATA
    if not f.address.startswith(root) or [c for c, _ in f.values] != list(plan.partition_columns):
        return False
    logical, _, _ = f.path.rpartition("/")
    physical, _, _ = f.address[len(root) :].rpartition("/")
    return logical == physical and all("=" in seg for seg in logical.split("/"))


def _quoted(name: str) -> str:
    """``name`` as one identifier in a column expression or DDL (dots and all)."""
    return "`" + name.replace("`", "``") + "`"
