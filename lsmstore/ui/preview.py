"""The first rows of an object, for a person looking at it: text, CSV or Parquet.

:func:`preview` reads as little as it can: the first :data:`TEXT_BYTES` bytes of a text
or CSV object (one ranged read); of a Parquet object its footer, then the row groups
holding the first ``rows`` rows, through ranged reads of at most :data:`PARQUET_BYTES`
bytes in all (a footer or first row group larger than that is refused with
:class:`~lsmstore.errors.InvalidInputError`, nothing more is read).  pyarrow parses the
Parquet file in a worker thread; its reads come back to the event loop, which does them.

The format is chosen by the path's extension, then the content type: ``.parquet`` /
``application/vnd.apache.parquet``; ``.csv``/``.tsv`` / ``text/csv``; other ``text/*``,
JSON, XML, YAML, Markdown and plain names as text.  Anything else is ``binary``:
no rows, only its size.  Values are returned as JSON scalars (``None``, numbers,
booleans, strings; other Parquet values as their string form, cut to
:data:`CELL_CHARS` characters).
"""

from __future__ import annotations

import asyncio
import csv
import io
from dataclasses import dataclass, field
from typing import Any, Literal

from lsmstore.errors import CorruptFileError, InvalidInputError, LsmError, UnavailableError
from lsmstore.objects.reader import ObjectReader

Format = Literal["parquet", "csv", "text", "binary"]

#: Bytes of a text or CSV object read for its preview.
TEXT_BYTES = 64 * 1024
#: Bytes a Parquet preview may read in all (footer and first row groups).
PARQUET_BYTES = 32 * 1024 * 1024
#: Rows returned at most (a request asks for fewer with ``rows``).
MAX_ROWS = 200
DEFAULT_ROWS = 50
#: Columns of a wide table returned at most.
MAX_COLUMNS = 100
#: Characters of one cell returned at most.
CELL_CHARS = 500
#: Seconds one ranged read of a Parquet preview may take (the worker thread waits for
#: the event loop to do it).
READ_TIMEOUT_S = 60.0

_TEXT_EXTENSIONS = (
    ".txt", ".md", ".json", ".jsonl", ".ndjson", ".xml", ".yaml", ".yml", ".toml", ".log",
    ".py", ".sql", ".html", ".ini", ".cfg", ".conf", ".sh", ".js", ".css",
)  # fmt: skip
_TEXT_TYPES = ("application/json", "application/xml", "application/x-ndjson", "application/yaml")


@dataclass(slots=True)
class Preview:
    format: Format
    size: int
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    text: str = ""
    #: More rows (or text) follow those returned.
    truncated: bool = False
    #: Parquet: the file's row count, row groups and schema (``name: type`` strings).
    total_rows: int | None = None
    row_groups: int | None = None
    schema: list[str] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": self.format,
            "size_bytes": self.size,
            "columns": self.columns,
            "rows": self.rows,
            "text": self.text,
            "truncated": self.truncated,
        }
        if self.format == "parquet":
            out.update(total_rows=self.total_rows, row_groups=self.row_groups, schema=self.schema)
        return out


def format_of(path: str, content_type: str) -> Format:
    name = path.rsplit("/", 1)[-1].lower()
    ctype = content_type.split(";", 1)[0].strip().lower()
    if name.endswith(".parquet") or ctype == "application/vnd.apache.parquet":
        return "parquet"
    if name.endswith((".csv", ".tsv")) or ctype in ("text/csv", "text/tab-separated-values"):
        return "csv"
    if name.endswith(_TEXT_EXTENSIONS) or ctype.startswith("text/") or ctype in _TEXT_TYPES:
        return "text"
    return "binary"


async def preview(reader: ObjectReader, rows: int = DEFAULT_ROWS) -> Preview:
    """The preview of the object ``reader`` reads (module docstring); ``rows`` is
    bounded to :data:`MAX_ROWS`.  CorruptFileError for a Parquet file pyarrow cannot
    read, InvalidInputError when its footer or first rows exceed :data:`PARQUET_BYTES`."""
    rows = max(1, min(rows, MAX_ROWS))
    s = reader.stats
    kind = format_of(s.path, s.content_type)
    if kind == "parquet":
        return await _parquet(reader, rows)
    if kind == "binary":
        return Preview("binary", s.size)
    data = await reader.read(0, TEXT_BYTES)
    cut = len(data) < s.size
    text = _decode(data, cut)
    if kind == "text":
        return Preview("text", s.size, text=text, truncated=cut)
    dialect: type[csv.Dialect] = csv.excel_tab if s.path.lower().endswith(".tsv") else csv.excel
    parsed: list[list[Any]] = []
    try:  # quoted fields may hold line breaks: the reader sees the text whole
        for row in csv.reader(io.StringIO(text, newline=""), dialect):
            parsed.append([_cell(v) for v in row])
            if len(parsed) > rows + 2:
                break
    except csv.Error:  # not CSV after all: shown as text
        return Preview("text", s.size, text=text, truncated=cut)
    if cut and len(parsed) <= rows + 2 and parsed:
        parsed.pop()  # the last row may be cut short
    header = parsed[0] if parsed else []
    body = parsed[1 : rows + 1]
    return Preview(
        "csv", s.size, columns=[str(c) for c in header], rows=body,
        truncated=cut or len(parsed) > rows + 1,
    )  # fmt: skip


def _decode(data: bytes, cut: bool) -> str:
    """UTF-8 text of ``data``; a character cut at the end of a partial read is dropped,
    other invalid bytes are replaced."""
    if cut:
        for back in range(min(3, len(data)) + 1):
            try:
                return data[: len(data) - back].decode("utf-8")
            except UnicodeDecodeError:
                continue
    return data.decode("utf-8", "replace")


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + "…"


class _RangeFile(io.RawIOBase):
    """A read-only, seekable file over an :class:`ObjectReader` for pyarrow, used from
    a worker thread: each read runs on the event loop ``loop``.  Reading more than
    ``budget`` bytes in all raises InvalidInputError."""

    def __init__(self, reader: ObjectReader, loop: asyncio.AbstractEventLoop, budget: int):
        super().__init__()
        self._reader = reader
        self.path = reader.path
        self._loop = loop
        self._pos = 0
        self._left = budget
        self._budget = budget

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = self._reader.size + offset
        self._pos = max(0, self._pos)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        want = self._reader.size - self._pos if size is None or size < 0 else size
        want = max(0, min(want, self._reader.size - self._pos))
        if want > self._left:
            raise InvalidInputError(
                f"previewing {self._reader.path!r} would read more than {self._budget} bytes "
                "(its footer or first row group is too large)"
            )
        self._left -= want
        future = asyncio.run_coroutine_threadsafe(self._reader.read(self._pos, want), self._loop)
        try:
            data = future.result(READ_TIMEOUT_S)
        except TimeoutError:  # the loop is gone or the store does not answer
            future.cancel()
            raise UnavailableError(f"reading {self.path!r} for its preview timed out") from None
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


async def _parquet(reader: ObjectReader, rows: int) -> Preview:
    loop = asyncio.get_running_loop()
    source = _RangeFile(reader, loop, PARQUET_BYTES)
    return await asyncio.to_thread(_read_parquet, source, reader.size, rows)


def _read_parquet(source: _RangeFile, size: int, rows: int) -> Preview:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(source)
        meta = pf.metadata
        names = pf.schema_arrow.names
        columns = names[:MAX_COLUMNS]
        groups: list[int] = []
        covered = 0
        for i in range(meta.num_row_groups):
            if covered >= rows:
                break
            groups.append(i)
            covered += meta.row_group(i).num_rows
        table = pf.read_row_groups(groups, columns=columns) if groups else None
    except LsmError:  # the reads' own errors (budget, object store): as they are
        raise
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CorruptFileError(source.path, f"not a readable Parquet file: {e}") from None
    found = table.slice(0, rows).to_pylist() if table is not None else []
    body = [[_cell(row.get(c)) for c in columns] for row in found[:rows]]
    schema = [f"{f.name}: {f.type}" for f in pf.schema_arrow]
    return Preview(
        "parquet", size, columns=list(columns), rows=body,
        truncated=meta.num_rows > len(body) or len(names) > len(columns),
        total_rows=meta.num_rows, row_groups=meta.num_row_groups, schema=schema[:MAX_COLUMNS],
    )  # fmt: skip
