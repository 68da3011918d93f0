"""write_sst's temporary file: in a RAM-backed directory when usable, else the temp dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsmstore.errors import InvalidInputError
from lsmstore.graveler import sst_writer
from lsmstore.graveler.record import Record, tombstone
from lsmstore.graveler.sst_reader import SSTReader

RECORDS = [Record(b"k%04d" % i, b"i%d" % i, b"v" * (i % 50)) for i in range(500)] + [
    tombstone(b"z")
]


def _records(data: bytes) -> list[Record]:
    return list(SSTReader(data, "t.sst"))


def test_same_table_wherever_the_temporary_file_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sst_writer, "_RAM_DIR", None)
    assert _records(sst_writer.write_sst(RECORDS)) == RECORDS
    ram = tmp_path / "ram"
    ram.mkdir()
    monkeypatch.setattr(sst_writer, "_RAM_DIR", str(ram))
    assert _records(sst_writer.write_sst(iter(RECORDS))) == RECORDS
    assert list(ram.iterdir()) == []  # removed after use


@pytest.mark.parametrize("broken", ["missing", "a-file"])
def test_an_unusable_ram_directory_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    target = tmp_path / broken
    if broken == "a-file":
        target.write_bytes(b"")
    monkeypatch.setattr(sst_writer, "_RAM_DIR", str(target))
    assert _records(sst_writer.write_sst(RECORDS)) == RECORDS


def test_bad_input_is_not_retried_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sst_writer, "_RAM_DIR", str(tmp_path))
    calls: list[str | None] = []
    real = sst_writer._write_sst

    def spy(records: list[Record], directory: str | None, *args: Any) -> bytes:
        calls.append(directory)
        return real(records, directory, *args)

    monkeypatch.setattr(sst_writer, "_write_sst", spy)
    with pytest.raises(InvalidInputError, match="strictly increasing"):
        sst_writer.write_sst([Record(b"b", b"i", b"v"), Record(b"a", b"i", b"v")])
    assert calls == [str(tmp_path)]
    assert list(tmp_path.iterdir()) == []
