"""Run Debian's sst_dump (RocksDB 7.8) on a file: a required test dependency
(``./dev.sh test`` installs ``rocksdb-tools``); tests fail rather than skip without it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ENTRY = re.compile(r"^'([0-9A-F]*)' seq:(\d+), type:(\d+) => ([0-9A-F]*)$")


def sst_dump_scan(path: Path) -> list[tuple[bytes, int, int, bytes]]:
    """(key, seq, type, value) of every entry, as RocksDB reads them, checksums verified."""
    exe = shutil.which("sst_dump")
    assert exe, "sst_dump not found: install Debian's rocksdb-tools (./dev.sh test does)"
    proc = subprocess.run(
        [exe, f"--file={path}", "--command=scan", "--verify_checksum", "--output_hex"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    entries = []
    for line in proc.stdout.splitlines():
        m = ENTRY.match(line)
        if m:
            key, seq, kind, value = m.groups()
            entries.append((bytes.fromhex(key), int(seq), int(kind), bytes.fromhex(value)))
    return entries


def sst_dump(path: Path, *args: str) -> str:
    exe = shutil.which("sst_dump")
    assert exe, "sst_dump not found: install Debian's rocksdb-tools (./dev.sh test does)"
    proc = subprocess.run(
        [exe, f"--file={path}", *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sst_dump_properties(path: Path) -> str:
    """The table properties sst_dump shows, after it verified every block's checksum."""
    assert "The file is ok" in sst_dump(path, "--command=verify")
    return sst_dump(path, "--show_properties")
