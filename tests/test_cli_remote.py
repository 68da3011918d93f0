"""The ``lsmstore`` command against a real server (``--server``, credentials from
``LSMSTORE_*`` variables): the same commands and output as embedded, uploads and
downloads through the API, a reader's key refused with exit 9, and ``lsmstore serve``
dispatching to the server."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from lsmstore.cli.exitcodes import ExitCode
from lsmstore.testing.server_process import ServerProcess
from tests.helpers.cli import Cli
from tests.helpers.remote import lsm_server  # noqa: F401 - the fixture


def remote_cli(server: ServerProcess, home: Path, key: tuple[str, str] | None = None) -> Cli:
    key_id, secret = key or server.admin
    return Cli(home, {"LSMSTORE_SERVER_URL": server.url, "LSMSTORE_ACCESS_KEY_ID": key_id,
                      "LSMSTORE_SECRET_ACCESS_KEY": secret})  # fmt: skip


def test_commands_through_the_server(lsm_server: ServerProcess, tmp_path: Path) -> None:  # noqa: F811
    cli = remote_cli(lsm_server, tmp_path / "home")
    created = cli.json("repo", "create", "lsm://remote-cli")
    assert created["storage_namespace"] == "local://remote-cli"
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_bytes(b"alpha")
    (tree / "sub" / "big.bin").write_bytes(os.urandom(5 << 20))
    up = cli.json("fs", "upload", "-r", str(tree), "lsm://remote-cli/main/t/")
    assert up["objects"] == 2
    assert [e["path"] for e in cli.json("fs", "ls", "-r", "lsm://remote-cli/main/")] == [
        "t/a.txt", "t/sub/big.bin",
    ]  # fmt: skip
    st = cli.json("fs", "stat", "lsm://remote-cli/main/t/sub/big.bin")
    assert st["checksum"] == hashlib.md5((tree / "sub" / "big.bin").read_bytes()).hexdigest()
    c = cli.json("commit", "lsm://remote-cli/main", "-m", "tree")
    assert c["message"] == "tree"
    cli("branch", "create", "lsm://remote-cli/dev", "-s", "lsm://remote-cli/main", check=True)
    cli("fs", "rm", "lsm://remote-cli/dev/t/a.txt", check=True)
    assert cli.json("diff", "lsm://remote-cli/dev") == [{"type": "removed", "path": "t/a.txt"}]
    cli("commit", "lsm://remote-cli/dev", "-m", "drop a", check=True)
    assert cli.json("merge", "lsm://remote-cli/dev", "lsm://remote-cli/main")["merged"]
    log = cli.json("log", "lsm://remote-cli/main")
    assert [e["message"] for e in log][1:] == ["tree", "Repository created"]
    tag = cli.json("tag", "create", "lsm://remote-cli/v1", "lsm://remote-cli/main~1")
    assert cli.json("tag", "list", "lsm://remote-cli") == [tag]
    assert cli.json("tag", "show", "lsm://remote-cli/v1")["commit"]["message"] == "tree"
    assert cli.json("show", "lsm://remote-cli/v1")["id"] == tag["commit_id"]
    assert cli.json("show", "lsm://remote-cli/main")["id"] == log[0]["id"]
    assert cli("tag", "show", "lsm://remote-cli/main").returncode == ExitCode.NOT_FOUND
    assert cli.raw("fs", "cat", "lsm://remote-cli/v1/t/a.txt").stdout == b"alpha"
    down = tmp_path / "down"
    cli("fs", "download", "-r", "lsm://remote-cli/v1/t/", str(down), check=True)
    assert (down / "sub" / "big.bin").read_bytes() == (tree / "sub" / "big.bin").read_bytes()
    imported = cli.json("import", str(tree), "lsm://remote-cli/main/imp/")
    assert imported["objects"] == 2

    missing = cli("fs", "stat", "lsm://remote-cli/main/nope")
    assert missing.returncode == ExitCode.NOT_FOUND and "Traceback" not in missing.stderr
    assert cli("branch", "show", "lsm://nosuch/main").returncode == ExitCode.NOT_FOUND

    # workspaces through the server: stash, list, pop onto another branch, typed exits
    cli("fs", "upload", str(tree / "a.txt"), "lsm://remote-cli/main/ws.txt", check=True)
    saved = cli.json("stash", "save", "lsm://remote-cli/main", "w")
    assert saved["name"] == "w" and saved["branch"] == "main" and saved["l1_files"] >= 1
    assert cli.json("diff", "lsm://remote-cli/main") == []
    assert [w["name"] for w in cli.json("stash", "list", "lsm://remote-cli")] == ["w"]
    assert cli("stash", "save", "lsm://remote-cli/main", "w").returncode == (
        ExitCode.NOTHING_TO_COMMIT
    )
    cli("pop", "lsm://remote-cli/dev", "w", check=True)
    assert cli.json("diff", "lsm://remote-cli/dev") == [{"type": "added", "path": "ws.txt"}]
    assert cli("pop", "lsm://remote-cli/dev", "w").returncode == ExitCode.NOT_FOUND

    # a squash merge with a named committer (the CLI's key is an admin's)
    cli("commit", "lsm://remote-cli/dev", "-m", "ws", check=True)
    head = cli.json("show", "lsm://remote-cli/main")["id"]
    squashed = cli.json("merge", "lsm://remote-cli/dev", "lsm://remote-cli/main", "--squash",
                        "--committer", "ci", "-m", "squash dev")  # fmt: skip
    assert squashed["merged"]
    shown = cli.json("show", "lsm://remote-cli/main")
    assert (shown["parents"], shown["committer"], shown["message"]) == ([head], "ci", "squash dev")

    # cherry-pick through the server (lakeFS's cherryPick route)
    cli("fs", "upload", str(tree / "a.txt"), "lsm://remote-cli/dev/picked.txt", check=True)
    on_dev = cli.json("commit", "lsm://remote-cli/dev", "-m", "pick me")
    picked = cli.json("cherry-pick", f"lsm://remote-cli/{on_dev['id']}", "lsm://remote-cli/main")
    assert (picked["parents"], picked["message"]) == ([shown["id"]], "pick me")
    assert cli.raw("fs", "cat", "lsm://remote-cli/main/picked.txt").stdout == b"alpha"

    # branch protection through the server (lakeFS's settings/branch_protection)
    assert cli.json("branch-protect", "add", "lsm://remote-cli", "main") == ["main"]
    refused = cli("commit", "lsm://remote-cli/main", "-m", "direct", "--allow-empty")
    assert refused.returncode == ExitCode.PERMISSION and "protected branch" in refused.stderr
    assert cli.json("branch-protect", "delete", "lsm://remote-cli", "main") == []


def test_reader_key_is_refused_and_serve_dispatches(
    lsm_server: ServerProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    reader = remote_cli(lsm_server, tmp_path / "home", lsm_server.create_key("reader"))
    refused = reader("repo", "create", "lsm://not-mine")
    assert refused.returncode == ExitCode.PERMISSION
    assert refused.stderr.startswith("lsmstore: error: ") and len(refused.stderr.splitlines()) == 1
    assert reader("repo", "list").returncode == 0
    wrong = remote_cli(lsm_server, tmp_path / "home", ("AKIANOPE", "nope"))("repo", "list")
    assert wrong.returncode == ExitCode.PERMISSION

    help_ = Cli(tmp_path / "home")("serve", "--help")
    assert help_.returncode == 0 and "lsmstore serve" in help_.stdout and "--port" in help_.stdout
