"""``lsmstore fs`` and ``lsmstore import``, run for real in a subprocess: uploads and
downloads of files and directories (byte for byte), ls/stat/cat, cp and rm (single and
recursive), import of a local directory and of an object-store prefix as one commit,
progress output, and errors."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from lsmstore.cli.exitcodes import ExitCode
from tests.helpers.cli import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    c = Cli(tmp_path / "home")
    c("repo", "create", "lsm://fssx", check=True)
    return c


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "sub" / "b.txt").write_bytes(b"beta\n")
    (root / "sub" / "deeper" / "c.bin").write_bytes(os.urandom(3 << 20))  # streamed
    (root / "empty").write_bytes(b"")
    return root


def md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def test_upload_ls_stat_cat_download(cli: Cli, tree: Path, tmp_path: Path) -> None:
    up = cli.json("fs", "upload", "-r", str(tree), "lsm://fssx/main/t/", "-p", "3")
    assert up["objects"] == 4 and up["bytes"] == sum(
        p.stat().st_size for p in tree.rglob("*") if p.is_file()
    )
    ls = cli.json("fs", "ls", "lsm://fssx/main/t")
    assert [(e["path"], e["path_type"]) for e in ls] == [
        ("t/a.txt", "object"),
        ("t/empty", "object"),
        ("t/sub/", "common_prefix"),
    ]
    recursive = cli.json("fs", "ls", "-r", "lsm://fssx/main/")
    assert [e["path"] for e in recursive] == [
        "t/a.txt", "t/empty", "t/sub/b.txt", "t/sub/deeper/c.bin",
    ]  # fmt: skip
    human = cli("fs", "ls", "lsm://fssx/main/t/", check=True).stdout.splitlines()
    assert human[0].split() == ["TYPE", "MODIFIED", "SIZE", "PATH"]
    assert human[-1].split() == ["dir", "sub/"]

    st = cli.json("fs", "stat", "lsm://fssx/main/t/sub/deeper/c.bin")
    assert st["size_bytes"] == 3 << 20
    assert st["checksum"] == md5(tree / "sub" / "deeper" / "c.bin")
    assert st["physical_address"].startswith((cli.home / "data" / "fssx").as_uri())
    assert cli.raw("fs", "cat", "lsm://fssx/main/t/sub/b.txt").stdout == b"beta\n"
    big = cli.raw("fs", "cat", "lakefs://fssx/main/t/sub/deeper/c.bin").stdout
    assert big == (tree / "sub" / "deeper" / "c.bin").read_bytes()

    single = tmp_path / "one"
    single.mkdir()
    cli("fs", "download", "lsm://fssx/main/t/a.txt", str(single), check=True)
    assert (single / "a.txt").read_bytes() == b"alpha\n"
    down = tmp_path / "down"
    d = cli.json("fs", "download", "-r", "lsm://fssx/main/t/", str(down))
    assert d["objects"] == 4
    for p in tree.rglob("*"):
        if p.is_file():
            assert md5(down / p.relative_to(tree)) == md5(p), p
    assert not list(down.rglob("*.lsmstore-part"))

    missing = cli("fs", "stat", "lsm://fssx/main/t/nope")
    assert missing.returncode == ExitCode.NOT_FOUND and "nope" in missing.stderr
    assert cli("fs", "cat", "lsm://fssx/main").returncode == ExitCode.USAGE  # no path
    is_dir = cli("fs", "upload", str(tree), "lsm://fssx/main/x/")
    assert is_dir.returncode == ExitCode.USAGE and "-r" in is_dir.stderr


def test_cp_rm_and_commit(cli: Cli, tree: Path) -> None:
    cli("fs", "upload", "-r", str(tree), "lsm://fssx/main/t/", check=True)
    cli("commit", "lsm://fssx/main", "-m", "tree", check=True)
    cli("branch", "create", "lsm://fssx/dev", "-s", "lsm://fssx/main", check=True)

    cli("fs", "cp", "lsm://fssx/main/t/a.txt", "lsm://fssx/dev/copies/", check=True)
    cli("fs", "cp", "-r", "lsm://fssx/main/t/sub/", "lsm://fssx/dev/copies/sub2/", check=True)
    copied = cli.json("fs", "stat", "lsm://fssx/dev/copies/sub2/deeper/c.bin")
    orig = cli.json("fs", "stat", "lsm://fssx/main/t/sub/deeper/c.bin")
    assert copied["physical_address"] == orig["physical_address"]  # no data copied

    cli("repo", "create", "lsm://other", check=True)
    cli("fs", "cp", "lsm://fssx/main/t/sub/b.txt", "lsm://other/main/b.txt", check=True)
    assert cli.raw("fs", "cat", "lsm://other/main/b.txt").stdout == b"beta\n"
    other = cli.json("fs", "stat", "lsm://other/main/b.txt")
    assert other["physical_address"].startswith((cli.home / "data" / "other").as_uri())

    assert cli.json("fs", "rm", "lsm://fssx/dev/t/a.txt") == {"deleted": 1}
    assert cli("fs", "rm", "lsm://fssx/dev/t/a.txt").returncode == ExitCode.NOT_FOUND
    assert cli.json("fs", "rm", "-r", "lsm://fssx/dev/t/sub") == {"deleted": 2}
    changes = cli.json("diff", "lsm://fssx/dev")
    assert {(c["type"], c["path"]) for c in changes} == {
        ("added", "copies/a.txt"),
        ("added", "copies/sub2/b.txt"),
        ("added", "copies/sub2/deeper/c.bin"),
        ("removed", "t/a.txt"),
        ("removed", "t/sub/b.txt"),
        ("removed", "t/sub/deeper/c.bin"),
    }
    cli("commit", "lsm://fssx/dev", "-m", "reshuffle", check=True)
    left = [e["path"] for e in cli.json("fs", "ls", "-r", "lsm://fssx/dev/")]
    assert left == ["copies/a.txt", "copies/sub2/b.txt", "copies/sub2/deeper/c.bin", "t/empty"]
    # main's commit still has everything
    assert len(cli.json("fs", "ls", "-r", "lsm://fssx/main~0/t/")) == 4


def test_import_directory_and_prefix_as_one_commit(cli: Cli, tree: Path) -> None:
    out = cli.json("import", str(tree), "lsm://fssx/main/raw/", "-m", "load raw", "-p", "2")
    assert out["objects"] == 4 and out["commit"]["message"] == "load raw"
    assert out["commit"]["metadata"]["import_source"] == str(tree)
    log = cli.json("log", "lsm://fssx/main")
    assert [e["message"] for e in log] == ["load raw", "Repository created"]
    assert cli.json("diff", "lsm://fssx/main") == []
    assert len(cli.json("fs", "ls", "-r", "lsm://fssx/main/raw/")) == 4

    # an object-store prefix inside the namespace: linked, not copied
    ns = cli.home / "data" / "fssx"
    (ns / "landing" / "day1").mkdir(parents=True)
    (ns / "landing" / "day1" / "x.csv").write_bytes(b"x,y\n1,2\n")
    (ns / "landing" / "day1" / "y.csv").write_bytes(b"x,y\n3,4\n")
    linked = cli.json("import", (ns / "landing").as_uri() + "/", "lsm://fssx/main/landing/")
    assert linked["objects"] == 2
    st = cli.json("fs", "stat", "lsm://fssx/main/landing/day1/x.csv")
    assert st["physical_address"] == (ns / "landing" / "day1" / "x.csv").as_uri()
    assert cli.raw("fs", "cat", "lsm://fssx/main/landing/day1/y.csv").stdout == b"x,y\n3,4\n"

    # refuses a dirty branch, a missing directory, a prefix outside the namespace
    cli("fs", "upload", str(tree / "a.txt"), "lsm://fssx/main/dirty", check=True)
    dirty = cli("import", str(tree), "lsm://fssx/main/again/")
    assert dirty.returncode == ExitCode.USAGE and "uncommitted" in dirty.stderr
    nodir = cli("import", str(tree / "missing"), "lsm://fssx/main/")
    assert nodir.returncode == ExitCode.USAGE
    outside = cli("import", tree.as_uri() + "/", "lsm://fssx/main/o/", "--allow-dirty")
    assert outside.returncode == ExitCode.USAGE and "outside" in outside.stderr


def test_progress_shows_rate_and_eta(cli: Cli, tree: Path) -> None:
    p = cli("--progress", "fs", "upload", "-r", str(tree), "lsm://fssx/main/p/")
    assert p.returncode == 0, p.stderr
    assert "upload tree/" in p.stderr and "MiB" in p.stderr and "4 files" in p.stderr
    assert "B/s" in p.stderr and "kB" not in p.stderr  # a rate, in binary units
    quiet = cli("fs", "upload", "-r", str(tree), "lsm://fssx/main/q/")
    assert quiet.stderr == ""  # no terminal: no progress
