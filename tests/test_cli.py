"""The ``lsmstore`` command, run for real in a subprocess on an embedded home:
repositories, branches, commits, log --graph, diff, merge, tags, reset, revert, the
JSON output, exit codes, one-line errors, completion and the service commands."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lsmstore
from lsmstore.cli.exitcodes import ExitCode
from tests.helpers.cli import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "home")


@pytest.fixture
async def store(cli: Cli) -> AsyncIterator[lsmstore.Store]:
    """The same embedded store the command uses, for writing data next to it."""
    async with lsmstore.connect(home=str(cli.home), batch_interval_ms=1) as s:
        yield s


def test_repo_create_list_delete(cli: Cli) -> None:
    created = cli.json("repo", "create", "lsm://alpha")
    assert created["id"] == "alpha" and created["default_branch"] == "main"
    assert created["storage_namespace"] == (cli.home / "data" / "alpha").as_uri()
    # A namespace of this test's own: another RefStore's repository (a former run's)
    # owns one at a fixed path.
    beta = (cli.home.parent / "lsm-cli-beta").as_uri()
    cli("repo", "create", "lakefs://beta", beta, "-d", "trunk", check=True)
    listed = cli.json("repo", "list")
    assert [(r["id"], r["default_branch"]) for r in listed] == [
        ("alpha", "main"),
        ("beta", "trunk"),
    ]
    table = cli("repo", "list", check=True).stdout.splitlines()
    assert table[0].split()[:2] == ["REPOSITORY", "CREATED"]
    assert table[1].startswith("alpha ") and table[2].startswith("beta ")
    assert cli.json("repo", "list", "--after", "alpha")[0]["id"] == "beta"

    again = cli("repo", "create", "lsm://alpha")
    assert again.returncode == ExitCode.EXISTS
    assert again.stderr.startswith("lsmstore: error: ") and "Traceback" not in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1

    refused = cli("repo", "delete", "lsm://alpha")  # no terminal, no --yes
    assert refused.returncode == ExitCode.USAGE and "--yes" in refused.stderr
    cli("repo", "delete", "lsm://alpha", "--yes", check=True)
    assert [r["id"] for r in cli.json("repo", "list")] == ["beta"]
    gone = cli("branch", "list", "lsm://alpha")
    assert gone.returncode == ExitCode.NOT_FOUND and "alpha" in gone.stderr


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("s3://bucket/key", "unknown URI scheme 's3'"),
        ("lsm://", "names no repository"),
        ("lsm://Bad_Repo/main", "invalid repository name"),
        ("lsm://repo//path", "empty ref"),
        ("main", "is not a URI"),
    ],
)
def test_bad_uris_are_one_line_usage_errors(cli: Cli, uri: str, fragment: str) -> None:
    p = cli("branch", "show", uri)
    assert p.returncode == ExitCode.USAGE
    assert fragment in p.stderr and "Traceback" not in p.stderr


async def test_commit_diff_merge_log_tag(cli: Cli, store: lsmstore.Store) -> None:
    cli("repo", "create", "lsm://vc", check=True)
    repo = await store.get_repository("vc")
    main = repo.branch("main")
    await main.put("tables/a", b"1")
    await main.put("tables/b", b"2")
    await main.flush()

    staged = cli.json("diff", "lsm://vc/main")
    assert staged == [
        {"type": "added", "path": "tables/a"},
        {"type": "added", "path": "tables/b"},
    ]
    c1 = cli.json("commit", "lsm://vc/main", "-m", "first", "--meta", "job=etl")
    assert c1["message"] == "first" and c1["metadata"] == {"job": "etl"}
    assert (await main.head()).base == c1["id"]
    nothing = cli("commit", "lsm://vc/main", "-m", "again")
    assert nothing.returncode == ExitCode.NOTHING_TO_COMMIT

    cli("branch", "create", "lsm://vc/dev", "--source", "lsm://vc/main", check=True)
    dev = repo.branch("dev")
    await dev.put("tables/c", b"3")
    await dev.delete("tables/a")
    await dev.flush()
    c2 = cli.json("commit", "lakefs://vc/dev", "-m", "on dev")
    await main.put("tables/b", b"22")
    await main.flush()
    cli("commit", "lsm://vc/main", "-m", "on main", check=True)

    assert cli.json("diff", "lsm://vc/main", "lsm://vc/dev") == [
        {"type": "removed", "path": "tables/a"},
        {"type": "changed", "path": "tables/b"},
        {"type": "added", "path": "tables/c"},
    ]
    human = cli("diff", "lsm://vc/main~1", "lsm://vc/dev", check=True).stdout
    assert "- removed  tables/a" in human and "+ added    tables/c" in human

    merged = cli.json("merge", "lsm://vc/dev", "lsm://vc/main", "-m", "bring dev")
    assert merged["merged"] is True
    assert await main.get("tables/c") == b"3" and not await main.exists("tables/a")
    assert await main.get("tables/b") == b"22"
    again = cli.json("merge", "lsm://vc/dev", "lsm://vc/main")
    assert again["merged"] is False

    log = cli.json("log", "lsm://vc/main")
    assert [e["message"] for e in log] == ["bring dev", "on main", "first", "Repository created"]
    assert log[0]["parents"][1] == c2["id"]
    graph = cli("log", "lsm://vc/main", "--graph", check=True).stdout.splitlines()
    assert graph[0].startswith("* ") and "bring dev" in graph[0]
    assert graph[1] == "|\\"  # the merge opens a lane for dev's commit
    assert any(line.startswith("| * ") and "on dev" in line for line in graph)
    assert any(line == "|/" for line in graph)  # ...that closes at the fork point
    assert graph[-1].startswith("* ") and "Repository created" in graph[-1]
    assert len(cli.json("log", "lsm://vc/main", "--amount", "2")) == 2

    shown = cli.json("show", "lsm://vc/main~1")
    assert shown["message"] == "on main"

    tag = cli.json("tag", "create", "lsm://vc/v1", "lsm://vc/main~1")
    assert tag["commit_id"] == shown["id"]
    assert cli.json("tag", "list", "lsm://vc") == [{"id": "v1", "commit_id": shown["id"]}]
    assert cli.json("tag", "show", "lsm://vc/v1")["commit"]["message"] == "on main"
    taken = cli("tag", "create", "lsm://vc/v1", "lsm://vc/main")
    assert taken.returncode == ExitCode.EXISTS
    moved = cli.json("tag", "create", "lsm://vc/v1", "lsm://vc/main", "--force")
    assert moved["commit_id"] == log[0]["id"]
    cli("tag", "delete", "lsm://vc/v1", "-y", check=True)
    assert cli.json("tag", "list", "lsm://vc") == []
    assert cli("tag", "show", "lsm://vc/v1").returncode == ExitCode.NOT_FOUND


async def test_merge_conflict_strategy_reset_and_revert(cli: Cli, store: lsmstore.Store) -> None:
    cli("repo", "create", "lsm://mc", check=True)
    repo = await store.get_repository("mc")
    main = repo.branch("main")
    await main.put("k", b"base")
    await main.flush()
    cli("commit", "lsm://mc/main", "-m", "base", check=True)
    cli("branch", "create", "lsm://mc/dev", "-s", "lsm://mc/main", check=True)
    for branch, value in (("main", b"m"), ("dev", b"d")):
        await repo.branch(branch).put("k", value)
        await repo.branch(branch).flush()
        cli("commit", f"lsm://mc/{branch}", "-m", f"k on {branch}", check=True)

    conflict = cli("merge", "lsm://mc/dev", "lsm://mc/main")
    assert conflict.returncode == ExitCode.MERGE_CONFLICT
    assert "conflict" in conflict.stderr.lower()
    cli("merge", "lsm://mc/dev", "lsm://mc/main", "--strategy", "source-wins", check=True)
    assert await main.get("k") == b"d"

    # branch reset drops every uncommitted write
    await main.put("staged", b"x")
    await main.flush()
    info = cli.json("branch", "show", "lsm://mc/main")
    assert len(info["staged_l1_files"]) + len(info["staged_l2_files"]) >= 1
    assert cli("branch", "reset", "lsm://mc/main").returncode == ExitCode.USAGE  # no --yes
    reset = cli.json("branch", "reset", "lsm://mc/main", "--yes")
    assert reset["dropped_files"] >= 1
    assert not await main.exists("staged")
    assert cli.json("diff", "lsm://mc/main") == []

    # revert the merge (to its first parent): k is main's value again
    reverted = cli.json("branch", "revert", "lsm://mc/main", "main")
    assert reverted[0]["changed"] is True
    assert await repo.ref("main").get("k") == b"m"

    listed = cli.json("branch", "list", "lsm://mc")
    assert [(b["id"], b["default"]) for b in listed] == [("dev", False), ("main", True)]
    assert cli("branch", "delete", "lsm://mc/main", "-y").returncode == ExitCode.USAGE
    cli("branch", "delete", "lsm://mc/dev", "-y", check=True)
    assert [b["id"] for b in cli.json("branch", "list", "lsm://mc")] == ["main"]


def test_errors_debug_and_json(cli: Cli) -> None:
    plain = cli("branch", "show", "lsm://nothere/main")
    assert plain.returncode == ExitCode.NOT_FOUND
    assert plain.stderr == (
        f"lsmstore: error: repository not found: nothere (looked in the embedded store at "
        f"{cli.home})\n"
    )
    debug = cli("--debug", "branch", "show", "lsm://nothere/main")
    assert debug.returncode == ExitCode.NOT_FOUND and "Traceback" in debug.stderr
    js = cli("-o", "json", "branch", "show", "lsm://nothere/main")
    assert json.loads(js.stdout)["error"]["type"] == "RepositoryNotFoundError"
    assert js.stderr.startswith("lsmstore: error: ") and len(js.stderr.splitlines()) == 1
    bad_config = cli("--config", str(cli.home / "missing.toml"), "repo", "list")
    assert bad_config.returncode == ExitCode.USAGE and "does not exist" in bad_config.stderr
    down = cli("--refstore", "redis://127.0.0.1:1/0", "repo", "list")
    assert down.returncode == ExitCode.UNAVAILABLE, down.stderr
    assert "Traceback" not in down.stderr


def test_completion_version_and_services(cli: Cli, tmp_path: Path) -> None:
    bash = cli("completion", "bash", check=True).stdout
    assert "_LSMSTORE_COMPLETE" in bash and "complete " in bash
    assert "compdef" in cli("completion", "zsh", check=True).stdout
    words = cli.__class__(cli.home, {"_LSMSTORE_COMPLETE": "bash_complete",
                                     "COMP_WORDS": "lsmstore br", "COMP_CWORD": "1"})  # fmt: skip
    assert "branch" in words().stdout
    cli("repo", "create", "lsm://compl", check=True)
    uris = cli.__class__(
        cli.home,
        {
            "_LSMSTORE_COMPLETE": "bash_complete",
            "COMP_WORDS": "lsmstore fs ls lsm://co",
            "COMP_CWORD": "3",
        },
    )
    assert uris().stdout.split() == ["plain,lsm://compl/"]
    refs = cli.__class__(
        cli.home,
        {
            "_LSMSTORE_COMPLETE": "bash_complete",
            "COMP_CWORD": "3",
            "COMP_WORDS": "lsmstore fs ls lsm://compl/m",
        },
    )
    assert refs().stdout.split() == ["plain,lsm://compl/main/"]  # fmt: skip
    assert cli("--version", check=True).stdout.startswith("lsmstore, version ")

    help_ = cli("compactor", "--help", check=True).stdout
    assert help_.startswith("Usage: lsmstore compactor") and "--once" in help_
    serve_help = cli("serve", "--help", check=True).stdout
    assert serve_help.startswith("Usage: lsmstore serve") and "--tls-cert" in serve_help
    assert "``" not in serve_help and "default None" not in serve_help
    assert "credentials" in serve_help and "--shutdown-timeout SECONDS" in serve_help
    demo_help = cli("demo", "--help", check=True).stdout
    assert demo_help.startswith("Usage: lsmstore demo") and "--puts INTEGER" in demo_help
    refs = (tmp_path / "refs").as_uri().replace("file:", "local:")
    ran = cli("committer", "--refstore", refs, "--once")
    assert ran.returncode == 0, ran.stderr
    bad = cli("compactor", "--concurrency", "0")
    assert bad.returncode == 2


def test_colour_follows_the_terminal(cli: Cli) -> None:
    cli("repo", "create", "lsm://colour", check=True)
    plain = cli("branch", "list", "lsm://colour", check=True).stdout
    assert "\x1b[" not in plain
    forced = Cli(cli.home, {"FORCE_COLOR": "1", "COLUMNS": "200"})
    del forced.env["NO_COLOR"]
    coloured = forced("branch", "list", "lsm://colour", check=True).stdout
    assert "\x1b[" in coloured and "main" in coloured
    off = forced("--no-color", "branch", "list", "lsm://colour", check=True).stdout
    assert "\x1b[" not in off
