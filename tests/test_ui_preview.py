"""lsmstore.ui.preview: what a preview reads and returns, on an object's real reader."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lsmstore.errors import CorruptFileError, InvalidInputError
from lsmstore.objects.model import inline_stats
from lsmstore.objects.reader import InlineReader
from lsmstore.ui import preview


class CountingReader(InlineReader):
    """An inline object's reader that counts the bytes read from it."""

    def __init__(self, path: str, value: bytes, content_type: str = "") -> None:
        stats = inline_stats(path, value, b"\x01")
        if content_type:
            stats.content_type = content_type
        super().__init__(value, stats)
        self.bytes_read = 0

    async def read(self, offset: int = 0, length: int | None = None) -> bytes:
        data = await super().read(offset, length)
        self.bytes_read += len(data)
        return data


def parquet(rows: int, row_group: int) -> bytes:
    rng = np.random.default_rng(7)
    table = pa.table({"id": np.arange(rows), "noise": rng.random(rows)})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=row_group, compression="none")
    return buf.getvalue()


async def test_parquet_reads_the_footer_and_first_row_group_only() -> None:
    data = parquet(400_000, 10_000)  # 40 row groups, ~6 MB
    reader = CountingReader("big.parquet", data)
    p = await preview.preview(reader, rows=20)
    assert p.total_rows == 400_000 and p.row_groups == 40
    assert [r[0] for r in p.rows] == list(range(20))
    assert reader.bytes_read < len(data) / 10, (reader.bytes_read, len(data))


async def test_parquet_read_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    data = parquet(100_000, 100_000)  # one row group of ~1.6 MB
    monkeypatch.setattr(preview, "PARQUET_BYTES", 64 * 1024)
    reader = CountingReader("one.parquet", data)
    with pytest.raises(InvalidInputError, match="more than 65536 bytes"):
        await preview.preview(reader)
    assert reader.bytes_read <= 64 * 1024


async def test_not_parquet() -> None:
    with pytest.raises(CorruptFileError, match="not a readable Parquet file"):
        await preview.preview(CountingReader("x.parquet", b"PAR1" + b"\0" * 100 + b"PAR1"))


async def test_text_is_cut_on_a_character() -> None:
    data = ("a" * (preview.TEXT_BYTES - 1) + "é" + "tail").encode()
    reader = CountingReader("notes.txt", data)
    p = await preview.preview(reader)
    assert p.format == "text" and p.truncated
    assert p.text == "a" * (preview.TEXT_BYTES - 1)
    assert reader.bytes_read == preview.TEXT_BYTES


async def test_csv_drops_a_cut_last_line_and_bounds_rows() -> None:
    lines = ["a,b"] + [f"{i},{'x' * 50}" for i in range(5000)]
    p = await preview.preview(CountingReader("t.csv", "\n".join(lines).encode()), rows=10_000)
    assert p.columns == ["a", "b"] and len(p.rows) == preview.MAX_ROWS and p.truncated
    tsv = await preview.preview(CountingReader("t.tsv", b"a\tb\n1\t2\n"))
    assert tsv.columns == ["a", "b"] and tsv.rows == [["1", "2"]] and not tsv.truncated


@pytest.mark.parametrize(
    ("path", "ctype", "want"),
    [
        ("x.parquet", "", "parquet"),
        ("x", "application/vnd.apache.parquet", "parquet"),
        ("X.CSV", "", "csv"),
        ("x", "text/csv; charset=utf-8", "csv"),
        ("x.json", "", "text"),
        ("x", "text/plain", "text"),
        ("x.bin", "application/octet-stream", "binary"),
    ],
)
def test_format_of(path: str, ctype: str, want: str) -> None:
    assert preview.format_of(path, ctype) == want


async def test_csv_quoted_line_breaks_and_bad_csv() -> None:
    p = await preview.preview(CountingReader("q.csv", b'a,b\n"two\nlines",2\n3,4\n'))
    assert p.format == "csv" and p.rows == [["two\nlines", "2"], ["3", "4"]]
    bad = await preview.preview(CountingReader("bad.csv", b'a,b\n"never closed,1\n'))
    assert bad.format == "csv" and bad.rows == [["never closed,1\n"]]  # lenient, no 500
