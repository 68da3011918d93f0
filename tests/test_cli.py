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
    cli("repo", "create", "lsm://vccx", check=True)
    repo = await store.get_repository("vccx")
    main = repo.branch("main")
    await main.put("tables/a", b"1")
    await main.put("tables/b", b"2")
    await main.flush()

    staged = cli.json("diff", "lsm://vccx/main")
    assert staged == [
        {"type": "added", "path": "tables/a"},
        {"type": "added", "path": "tables/b"},
    ]
    c1 = cli.json("commit", "lsm://vccx/main", "-m", "first", "--meta", "job=etl")
    assert c1["message"] == "first" and c1["metadata"] == {"job": "etl"}
    assert (await main.head()).base == c1["id"]
    nothing = cli("commit", "lsm://vccx/main", "-m", "again")
    assert nothing.returncode == ExitCode.NOTHING_TO_COMMIT

    cli("branch", "create", "lsm://vccx/dev", "--source", "lsm://vccx/main", check=True)
    dev = repo.branch("dev")
    await dev.put("tables/c", b"3")
    await dev.delete("tables/a")
    await dev.flush()
    c2 = cli.json("commit", "lakefs://vccx/dev", "-m", "on dev")
    await main.put("tables/b", b"22")
    await main.flush()
    cli("commit", "lsm://vccx/main", "-m", "on main", check=True)

    assert cli.json("diff", "lsm://vccx/main", "lsm://vccx/dev") == [
        {"type": "removed", "path": "tables/a"},
        {"type": "changed", "path": "tables/b"},
        {"type": "added", "path": "tables/c"},
    ]
    human = cli("diff", "lsm://vccx/main~1", "lsm://vccx/dev", check=True).stdout
    assert "- removed  tables/a" in human and "+ added    tables/c" in human

    merged = cli.json("merge", "lsm://vccx/dev", "lsm://vccx/main", "-m", "bring dev")
    assert merged["merged"] is True
    assert await main.get("tables/c") == b"3" and not await main.exists("tables/a")
    assert await main.get("tables/b") == b"22"
    again = cli.json("merge", "lsm://vccx/dev", "lsm://vccx/main")
    assert again["merged"] is False

    log = cli.json("log", "lsm://vccx/main")
    assert [e["message"] for e in log] == ["bring dev", "on main", "first", "Repository created"]
    assert log[0]["parents"][1] == c2["id"]
    graph = cli("log", "lsm://vccx/main", "--graph", check=True).stdout.splitlines()
    assert graph[0].startswith("* ") and "bring dev" in graph[0]
    assert graph[1] == "|\\"  # the merge opens a lane for dev's commit
    assert any(line.startswith("| * ") and "on dev" in line for line in graph)
    assert any(line == "|/" for line in graph)  # ...that closes at the fork point
    assert graph[-1].startswith("* ") and "Repository created" in graph[-1]
    assert len(cli.json("log", "lsm://vccx/main", "--amount", "2")) == 2

    shown = cli.json("show", "lsm://vccx/main~1")
    assert shown["message"] == "on main"

    tag = cli.json("tag", "create", "lsm://vccx/v1", "lsm://vccx/main~1")
    assert tag["commit_id"] == shown["id"]
    assert cli.json("tag", "list", "lsm://vccx") == [{"id": "v1", "commit_id": shown["id"]}]
    assert cli.json("tag", "show", "lsm://vccx/v1")["commit"]["message"] == "on main"
    taken = cli("tag", "create", "lsm://vccx/v1", "lsm://vccx/main")
    assert taken.returncode == ExitCode.EXISTS
    moved = cli.json("tag", "create", "lsm://vccx/v1", "lsm://vccx/main", "--force")
    assert moved["commit_id"] == log[0]["id"]
    cli("tag", "delete", "lsm://vccx/v1", "-y", check=True)
    assert cli.json("tag", "list", "lsm://vccx") == []
    assert cli("tag", "show", "lsm://vccx/v1").returncode == ExitCode.NOT_FOUND


async def test_merge_conflict_strategy_reset_and_revert(cli: Cli, store: lsmstore.Store) -> None:
    cli("repo", "create", "lsm://mccx", check=True)
    repo = await store.get_repository("mccx")
    main = repo.branch("main")
    await main.put("k", b"base")
    await main.flush()
    cli("commit", "lsm://mccx/main", "-m", "base", check=True)
    cli("branch", "create", "lsm://mccx/dev", "-s", "lsm://mccx/main", check=True)
    for branch, value in (("main", b"m"), ("dev", b"d")):
        await repo.branch(branch).put("k", value)
        await repo.branch(branch).flush()
        cli("commit", f"lsm://mccx/{branch}", "-m", f"k on {branch}", check=True)

    conflict = cli("merge", "lsm://mccx/dev", "lsm://mccx/main")
    assert conflict.returncode == ExitCode.MERGE_CONFLICT
    assert "conflict" in conflict.stderr.lower()
    cli("merge", "lsm://mccx/dev", "lsm://mccx/main", "--strategy", "source-wins", check=True)
    assert await main.get("k") == b"d"

    # branch reset drops every uncommitted write
    await main.put("staged", b"x")
    await main.flush()
    info = cli.json("branch", "show", "lsm://mccx/main")
    assert len(info["staged_l1_files"]) + len(info["staged_l2_files"]) >= 1
    assert cli("branch", "reset", "lsm://mccx/main").returncode == ExitCode.USAGE  # no --yes
    reset = cli.json("branch", "reset", "lsm://mccx/main", "--yes")
    assert reset["dropped_files"] >= 1
    assert not await main.exists("staged")
    assert cli.json("diff", "lsm://mccx/main") == []

    # revert the merge (to its first parent): k is main's value again
    reverted = cli.json("branch", "revert", "lsm://mccx/main", "main")
    assert reverted[0]["changed"] is True
    assert await repo.ref("main").get("k") == b"m"

    listed = cli.json("branch", "list", "lsm://mccx")
    assert [(b["id"], b["default"]) for b in listed] == [("dev", False), ("main", True)]
    assert cli("branch", "delete", "lsm://mccx/main", "-y").returncode == ExitCode.USAGE
    cli("branch", "delete", "lsm://mccx/dev", "-y", check=True)
    assert [b["id"] for b in cli.json("branch", "list", "lsm://mccx")] == ["main"]


async def test_cherry_pick(cli: Cli, store: lsmstore.Store) -> None:
    """lakectl's ``cherry-pick COMMIT BRANCH``: the commit's changes as a new commit on
    the branch; a conflict exits MERGE_CONFLICT and writes nothing; --strategy settles."""
    cli("repo", "create", "lsm://cppx", check=True)
    repo = await store.get_repository("cppx")
    main = repo.branch("main")
    await main.put("k", b"base")
    await main.flush()
    cli("commit", "lsm://cppx/main", "-m", "base", check=True)
    cli("branch", "create", "lsm://cppx/dev", "-s", "lsm://cppx/main", check=True)
    dev = repo.branch("dev")
    await dev.put("k", b"dev")
    await dev.put("new", b"n")
    await dev.flush()
    cli("commit", "lsm://cppx/dev", "-m", "dev work", "--meta", "t=1", check=True)
    picked = cli.json("cherry-pick", "lsm://cppx/dev", "lsm://cppx/main")
    assert (picked["message"], picked["metadata"]) == ("dev work", {"t": "1"})
    assert cli.json("show", "lsm://cppx/main")["id"] == picked["id"]
    assert await main.get("new") == b"n" and await main.get("k") == b"dev"
    again = cli("cherry-pick", "lsm://cppx/dev", "lsm://cppx/main")
    assert again.returncode == ExitCode.NOTHING_TO_COMMIT

    await main.put("k", b"main")
    await main.flush()
    cli("commit", "lsm://cppx/main", "-m", "k on main", check=True)
    await dev.put("k", b"dev2")
    await dev.flush()
    cli("commit", "lsm://cppx/dev", "-m", "k again", check=True)
    head = cli.json("show", "lsm://cppx/main")["id"]
    conflict = cli("cherry-pick", "lsm://cppx/dev", "lsm://cppx/main")
    assert conflict.returncode == ExitCode.MERGE_CONFLICT and "conflict" in conflict.stderr
    assert cli.json("show", "lsm://cppx/main")["id"] == head
    cli("cherry-pick", "lsm://cppx/dev", "lsm://cppx/main", "--strategy", "source-wins", check=True)
    assert await main.get("k") == b"dev2"
    other = cli("cherry-pick", "lsm://cppx/dev", "lsm://elsewhere/main")
    assert other.returncode == ExitCode.USAGE


async def test_branch_protect(cli: Cli, store: lsmstore.Store) -> None:
    """lakectl's ``branch-protect add|list|delete``: a protected branch refuses commits
    and deletion (exit 9, nothing changed) and accepts merges."""
    cli("repo", "create", "lsm://bppx", check=True)
    cli("branch", "create", "lsm://bppx/dev", "-s", "lsm://bppx/main", check=True)
    assert cli.json("branch-protect", "list", "lsm://bppx") == []
    assert cli.json("branch-protect", "add", "lsm://bppx", "ma*") == ["ma*"]
    assert cli.json("branch-protect", "add", "lsm://bppx", "dev") == ["ma*", "dev"]
    assert cli.json("branch-protect", "list", "lsm://bppx") == [
        {"pattern": "ma*"},
        {"pattern": "dev"},
    ]
    refused = cli("commit", "lsm://bppx/main", "-m", "direct", "--allow-empty")
    assert refused.returncode == ExitCode.PERMISSION and "protected branch" in refused.stderr
    assert cli("branch", "delete", "lsm://bppx/dev", "-y").returncode == ExitCode.PERMISSION
    assert cli.json("branch-protect", "delete", "lsm://bppx", "dev") == ["ma*"]
    repo = await store.get_repository("bppx")
    await repo.branch("dev").put("k", b"v")
    await repo.branch("dev").flush()
    cli("commit", "lsm://bppx/dev", "-m", "dev work", check=True)
    assert cli.json("merge", "lsm://bppx/dev", "lsm://bppx/main")["merged"]
    assert await repo.ref("main").get("k") == b"v"
    missing = cli("branch-protect", "delete", "lsm://bppx", "nope")
    assert missing.returncode == ExitCode.USAGE and "no branch protection rule" in missing.stderr
    cli("branch", "delete", "lsm://bppx/dev", "-y", check=True)


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
