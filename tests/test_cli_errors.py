"""Every command of the click tree, given a bad argument, reports one error line on
stderr (``lsmstore: error: ...``) and, with ``-o json``, one JSON document on stdout;
messages carry no Python reprs; a closed pipe is not an error; progress and summary
share units; commits are signed by the configured user."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from lsmstore.cli import cli, main
from lsmstore.cli.exitcodes import ExitCode
from lsmstore.cli.runtime import URIType
from tests.helpers.cli import Cli

Leaf = tuple[tuple[str, ...], click.Command]


def leaves(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[Leaf]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaves(command, (*path, name))
        else:
            yield (*path, name), command


COMMANDS = list(leaves(cli))


def bad_arguments(command: click.Command) -> list[list[str]]:
    """An unknown option, and (where the command takes a URI) an invalid one."""
    bad = [["--no-such-option"]]
    first = next((p for p in command.params if isinstance(p, click.Argument)), None)
    if first is not None and (isinstance(first.type, URIType) or "URI" in (first.metavar or "")):
        bad.append(["lsm://Bad_Name/main/x"])
    return bad


def test_the_walk_covers_every_command() -> None:
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"fs upload", "repo create", "serve", "demo", "cherry-pick",
            "actions runs list", "branch-protect add", "show", "log"} <= names  # fmt: skip


@pytest.mark.parametrize(
    ("path", "args"),
    [(p, a) for p, c in COMMANDS for a in bad_arguments(c)],
    ids=lambda v: " ".join(v) if isinstance(v, tuple | list) else str(v),
)
def test_bad_argument_is_one_line_and_one_json_document(
    path: tuple[str, ...],
    args: list[str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LSMSTORE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    code = main([*path, *args])
    o = capsys.readouterr()
    assert code == ExitCode.USAGE, o
    assert o.err.startswith("lsmstore: error: ") and o.err.count("\n") == 1, o.err
    assert o.out == ""
    code = main(["-o", "json", *path, *args])
    o = capsys.readouterr()
    assert code == ExitCode.USAGE
    assert o.err.count("\n") == 1
    doc = json.loads(o.out)
    assert doc["error"]["exit_code"] == ExitCode.USAGE and doc["error"]["type"] == "UsageError"
    assert doc["error"]["message"] in o.err


def test_bad_repository_name_under_json(tmp_path: Path) -> None:
    p = Cli(tmp_path)("-o", "json", "fs", "ls", "lsm://Bad_Name/main/")
    assert p.returncode == ExitCode.USAGE
    assert "Bad_Name" in json.loads(p.stdout)["error"]["message"]
    assert len(p.stderr.splitlines()) == 1


def test_messages_carry_no_python_reprs(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    cli("repo", "create", "lsm://shop", check=True)
    local = tmp_path / "conf.txt"
    local.write_text("base")
    cli("fs", "upload", str(local), "lsm://shop/main/tables/conf.txt", check=True)
    cli("commit", "lsm://shop/main", "-m", "base", check=True)
    cli("branch", "create", "lsm://shop/dev", "-s", "lsm://shop/main", check=True)
    for branch, text in (("main", "main side"), ("dev", "dev side")):
        local.write_text(text)
        cli("fs", "upload", str(local), f"lsm://shop/{branch}/tables/conf.txt", check=True)
        cli("commit", f"lsm://shop/{branch}", "-m", text, check=True)
    conflict = cli("merge", "lsm://shop/dev", "lsm://shop/main")
    assert conflict.returncode == ExitCode.MERGE_CONFLICT
    assert "tables/conf.txt" in conflict.stderr and "b'" not in conflict.stderr
    missing = cli("fs", "stat", "lsm://shop/main/missing")
    assert missing.returncode == ExitCode.NOT_FOUND
    assert missing.stderr == "lsmstore: error: no object at lsm://shop/main/missing\n"
    for command in ("cat", "rm", "stat"):
        prefix = cli("fs", command, "lsm://shop/main/tables")
        assert prefix.returncode == ExitCode.NOT_FOUND
        assert "is a prefix" in prefix.stderr and "-r" in prefix.stderr, prefix.stderr
    local.write_text("staged")
    cli("fs", "upload", str(local), "lsm://shop/main/staged.txt", check=True)
    (tmp_path / "empty").mkdir()
    dirty = cli("import", str(tmp_path / "empty"), "lsm://shop/main/x/")
    assert "lsm://shop/main has uncommitted changes" in dirty.stderr, dirty.stderr


def test_download_into_a_new_directory(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    cli("repo", "create", "lsm://dllx", check=True)
    local = tmp_path / "obj.txt"
    local.write_text("payload")
    cli("fs", "upload", str(local), "lsm://dllx/main/obj.txt", check=True)
    target = tmp_path / "newdir" / "sub"
    cli("fs", "download", "lsm://dllx/main/obj.txt", f"{target}/", check=True)
    assert (target / "obj.txt").read_text() == "payload"


def test_cat_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    cli("repo", "create", "lsm://pipe", check=True)
    local = tmp_path / "lines.txt"
    local.write_text("".join(f"line {i}\n" for i in range(400_000)))
    cli("fs", "upload", str(local), "lsm://pipe/main/lines.txt", check=True)
    p = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {sys.executable} -m lsmstore fs cat "
         "lsm://pipe/main/lines.txt | head -1"],
        env=cli.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.stdout == "line 0\n"
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_progress_and_summary_use_the_same_units(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    cli("repo", "create", "lsm://units", check=True)
    local = tmp_path / "r.bin"
    local.write_bytes(bytes(17_300))  # 16.9 KiB, 17.3 kB
    p = cli("--progress", "fs", "upload", str(local), "lsm://units/main/r.bin", check=True)
    assert "16.9 KiB" in p.stdout and "16.9/16.9 KiB" in p.stderr, p.stderr
    assert "kB" not in p.stderr


def test_commits_are_signed_by_the_configured_user(tmp_path: Path) -> None:
    import getpass

    cli = Cli(tmp_path / "home")
    cli("repo", "create", "lsm://who", check=True)
    cli("branch", "create", "lsm://who/dev", "-s", "lsm://who/main", check=True)
    assert cli.json("commit", "lsm://who/main", "-m", "x", "--allow-empty")["committer"] == (
        getpass.getuser()
    )
    alice = Cli(cli.home, {"LSMSTORE_USER": "alice"})
    assert alice.json("commit", "lsm://who/dev", "-m", "y", "--allow-empty")["committer"] == (
        "alice"
    )
    merged = alice.json("merge", "lsm://who/dev", "lsm://who/main")
    assert alice.json("show", "lsm://who/main")["id"] == merged["reference"]
    assert alice.json("show", "lsm://who/main")["committer"] == "alice"
    named = alice.json("commit", "lsm://who/dev", "-m", "z", "--allow-empty", "--committer", "bob")
    assert named["committer"] == "bob"
