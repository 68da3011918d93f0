"""A lakeFS user's habits: a lakectl shell session (lakeFS's quickstart and everyday
commands) runs against a real server with only the command name changed, configured
by ``~/.lakectl.yaml`` or by ``LAKECTL_*`` variables; lakectl commands whose capability
this store lacks fail with one typed line (exit 11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lsmstore.cli.exitcodes import ExitCode
from lsmstore.testing.server_process import ServerProcess
from tests.helpers.remote import lsm_server  # noqa: F401 - the fixture

#: A session as lakeFS's docs write it (quickstart, then the everyday reference);
#: REPO is substituted per run.
SESSION = """\
set -euo pipefail
lakectl repo create lakefs://REPO local://REPO
printf 'name,country\\nArresø,Denmark\\nEsrum Sø,Denmark\\n' > lakes.csv
printf 'hello\\n' > a.txt
lakectl fs upload lakefs://REPO/main/a.txt -s ./a.txt
lakectl fs upload lakefs://REPO/main/lakes.parquet --source ./lakes.csv
lakectl fs ls lakefs://REPO/main/
lakectl commit lakefs://REPO/main -m "Initial load"
lakectl branch create lakefs://REPO/denmark-lakes --source lakefs://REPO/main
echo "Silkeborg Langsø,Denmark" | lakectl fs upload lakefs://REPO/denmark-lakes/lakes.parquet -s -
lakectl diff lakefs://REPO/denmark-lakes
lakectl commit lakefs://REPO/denmark-lakes -m "Create a dataset of just the lakes in Denmark"
lakectl diff lakefs://REPO/main lakefs://REPO/denmark-lakes
lakectl diff --two-way lakefs://REPO/main lakefs://REPO/denmark-lakes
lakectl merge lakefs://REPO/denmark-lakes lakefs://REPO/main
lakectl log lakefs://REPO/main --amount 5
lakectl fs cat lakefs://REPO/main/lakes.parquet > cat.out
lakectl fs download lakefs://REPO/main/lakes.parquet ./downloads/
lakectl fs stat lakefs://REPO/main/lakes.parquet
lakectl tag create lakefs://REPO/v1 lakefs://REPO/main
lakectl show commit lakefs://REPO/v1
lakectl branch list lakefs://REPO
lakectl branch show lakefs://REPO/main
lakectl fs rm lakefs://REPO/main/a.txt
lakectl branch reset lakefs://REPO/main --yes
lakectl branch revert lakefs://REPO/main main --yes
lakectl tag list lakefs://REPO
lakectl tag delete lakefs://REPO/v1 --yes
lakectl repo list
lakectl branch delete lakefs://REPO/denmark-lakes --yes
"""


def _env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LSMSTORE_", "LAKECTL_"))}
    env.update(
        HOME=str(home),
        LSMSTORE_HOME=str(home / "lsm"),
        NO_COLOR="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.update(extra)
    return env


def _lakectl_variables(server: ServerProcess, endpoint: str) -> dict[str, str]:
    key_id, secret = server.admin
    return {
        "LAKECTL_CREDENTIALS_ACCESS_KEY_ID": key_id,
        "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY": secret,
        "LAKECTL_SERVER_ENDPOINT_URL": endpoint,
    }


def _run_session(work: Path, env: dict[str, str], repo: str) -> subprocess.CompletedProcess[str]:
    script = SESSION.replace("REPO", repo).replace("lakectl ", "lsmstore ")
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        ["bash", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def _lsm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lsmstore", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def _check_session(p: subprocess.CompletedProcess[str], work: Path, env: dict[str, str],
                   repo: str) -> None:  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert (work / "cat.out").read_text() == "Silkeborg Langsø,Denmark\n"
    assert (work / "downloads" / "lakes.parquet").read_text() == "Silkeborg Langsø,Denmark\n"
    log = json.loads(_lsm(env, "-o", "json", "log", f"lakefs://{repo}/main").stdout)
    messages = [c["message"] for c in log]
    assert messages[0].startswith("Revert")
    assert "Initial load" in messages and "Repository created" in messages
    # the revert undid the merge: main holds the first load again
    cat = _lsm(env, "fs", "cat", f"lakefs://{repo}/main/lakes.parquet")
    assert cat.stdout.startswith("name,country"), cat.stderr
    assert _lsm(env, "-o", "json", "tag", "list", f"lakefs://{repo}").stdout.strip() == "[]"


def test_lakectl_session_with_lakectl_yaml(lsm_server: ServerProcess, tmp_path: Path) -> None:  # noqa: F811
    home = tmp_path / "home"
    home.mkdir()
    key_id, secret = lsm_server.admin
    (home / ".lakectl.yaml").write_text(
        "credentials:\n"
        f"  access_key_id: {key_id}\n"
        f"  secret_access_key: {secret}\n"
        "server:\n"
        f"  endpoint_url: {lsm_server.url}/api/v1\n"
    )
    env = _env(home, {})
    p = _run_session(tmp_path / "work", env, "quickstart-yaml")
    _check_session(p, tmp_path / "work", env, "quickstart-yaml")


def test_lakectl_session_with_lakectl_variables(
    lsm_server: ServerProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    env = _env(tmp_path / "home", _lakectl_variables(lsm_server, lsm_server.url))
    p = _run_session(tmp_path / "work", env, "quickstart-env")
    _check_session(p, tmp_path / "work", env, "quickstart-env")


def test_lakectl_configuration_wins_with_lakefs_scheme(
    lsm_server: ServerProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    env = _env(
        tmp_path / "home",
        {
            **_lakectl_variables(lsm_server, lsm_server.url + "/api/v1/"),
            # ours names a server nobody listens on
            "LSMSTORE_SERVER_URL": "http://127.0.0.1:1",
            "LSMSTORE_ACCESS_KEY_ID": "nobody",
            "LSMSTORE_SECRET_ACCESS_KEY": "nothing",
        },
    )
    created = _lsm(env, "repo", "create", "lakefs://wins", "local://wins")
    assert created.returncode == 0, created.stderr
    ours = _lsm(env, "fs", "ls", "lsm://wins/main/")
    assert ours.returncode == ExitCode.UNAVAILABLE and "127.0.0.1:1" in ours.stderr
    # lsm:// with no store of ours configured: lakectl's server (and key) fill the gap
    del env["LSMSTORE_SERVER_URL"]
    assert _lsm(env, "fs", "ls", "lsm://wins/main/").returncode == 0


def test_missing_repository_names_the_store(
    lsm_server: ServerProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    embedded = _env(tmp_path / "home", {})
    p = _lsm(embedded, "fs", "ls", "lsm://absent/main/")
    assert p.returncode == ExitCode.NOT_FOUND
    assert f"looked in the embedded store at {tmp_path / 'home' / 'lsm'}" in p.stderr
    key_id, secret = lsm_server.admin
    remote = _env(tmp_path / "home", {"LSMSTORE_SERVER_URL": lsm_server.url,
                                      "LSMSTORE_ACCESS_KEY_ID": key_id,
                                      "LSMSTORE_SECRET_ACCESS_KEY": secret})  # fmt: skip
    p = _lsm(remote, "fs", "ls", "lsm://absent/main/")
    assert p.returncode == ExitCode.NOT_FOUND and f"server {lsm_server.url}" in p.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("branch", "reset", "lakefs://r/main", "--prefix", "tables/", "--yes"),
    ],
)
def test_capabilities_not_available(tmp_path: Path, args: tuple[str, ...]) -> None:
    env = _env(tmp_path / "home", {})
    p = _lsm(env, *args)
    assert p.returncode == ExitCode.NOT_AVAILABLE, p.stderr
    assert p.stderr.startswith("lsmstore: error: ") and len(p.stderr.splitlines()) == 1
    assert "not available" in p.stderr
    js = _lsm(env, "-o", "json", *args)
    assert json.loads(js.stdout)["error"]["type"] == "NotAvailableError"


def test_import_from_to_runs_the_import_api(
    tmp_path: Path,
    lsm_server: ServerProcess,  # noqa: F811 - the fixture
) -> None:
    """lakectl's ``import --from --to``, embedded and against a server: the prefix
    replaces the destination in one commit."""
    local = tmp_path / "f.txt"
    local.write_text("x")
    key_id, secret = lsm_server.admin
    remote = {"LSMSTORE_SERVER_URL": lsm_server.url, "LSMSTORE_ACCESS_KEY_ID": key_id,
              "LSMSTORE_SECRET_ACCESS_KEY": secret}  # fmt: skip
    for name, extra in (("imp-embedded", {}), ("imp-remote", remote)):
        env = _env(tmp_path / "home", extra)

        def ok(*args: str, env: dict[str, str] = env) -> str:
            p = _lsm(env, *args)
            assert p.returncode == 0, p.stderr
            return p.stdout

        ok("repo", "create", f"lsm://{name}")
        for i in range(3):
            ok("fs", "upload", str(local), f"lsm://{name}/main/in/{i}")
        ok("fs", "upload", str(local), f"lsm://{name}/main/to/stale")
        ok("commit", f"lsm://{name}/main", "-m", "before")
        address = json.loads(ok("-o", "json", "fs", "stat", f"lsm://{name}/main/in/0"))[
            "physical_address"
        ]
        data = address.rsplit("/", 1)[0] + "/"
        out = json.loads(
            ok("-o", "json", "import", "--from", data, "--to", f"lakefs://{name}/main/to/")
        )
        assert out["objects"] == 4 and out["commit"]["message"] == f"Import from {data}"
        listed = ok("-o", "json", "fs", "ls", f"lsm://{name}/main/to/")
        paths = [o["path"] for o in json.loads(listed)]
        assert len(paths) == 4 and "to/stale" not in paths, listed
        log = json.loads(ok("-o", "json", "log", f"lsm://{name}/main", "--amount", "1"))
        assert json.dumps(log).count(out["commit"]["id"]) >= 1
        bad = _lsm(env, "import", "--from", "file:///etc/", "--to", f"lakefs://{name}/main/x/")
        assert bad.returncode != 0 and "outside" in bad.stderr


def test_diff_is_three_dot_with_lakefs_scheme(tmp_path: Path) -> None:
    env = _env(tmp_path / "home", {})
    local = tmp_path / "f.txt"
    local.write_text("x")

    def ok(*args: str) -> str:
        p = _lsm(env, *args)
        assert p.returncode == 0, p.stderr
        return p.stdout

    ok("repo", "create", "lsm://dots")
    ok("fs", "upload", str(local), "lsm://dots/main/a")
    ok("commit", "lsm://dots/main", "-m", "a")
    ok("branch", "create", "lsm://dots/dev", "-s", "lsm://dots/main")
    ok("fs", "upload", str(local), "lsm://dots/dev/b")
    ok("commit", "lsm://dots/dev", "-m", "b")
    ok("fs", "upload", str(local), "lsm://dots/main/c")
    ok("commit", "lsm://dots/main", "-m", "c")
    three = json.loads(ok("-o", "json", "diff", "lakefs://dots/main", "lakefs://dots/dev"))
    assert three == [{"type": "added", "path": "b"}]  # dev's changes since the merge base
    two = [{"type": "added", "path": "b"}, {"type": "removed", "path": "c"}]
    assert json.loads(ok("-o", "json", "diff", "lsm://dots/main", "lsm://dots/dev")) == two
    assert json.loads(ok("-o", "json", "diff", "--two-way", "lakefs://dots/main",
                         "lakefs://dots/dev")) == two  # fmt: skip
    assert json.loads(ok("-o", "json", "diff", "--three-way", "lsm://dots/main",
                         "lsm://dots/dev")) == three  # fmt: skip


def test_relative_uris_against_the_base_uri(tmp_path: Path) -> None:
    env = _env(tmp_path / "home", {"LAKECTL_BASE_URI": "lakefs://based/main"})
    local = tmp_path / "f.txt"
    local.write_text("based")
    assert _lsm(env, "repo", "create", "lakefs://based").returncode == 0
    up = _lsm(env, "fs", "upload", "/data/f.txt", "-s", str(local))
    assert up.returncode == 0, up.stderr
    assert _lsm(env, "fs", "cat", "lakefs://based/main/data/f.txt").stdout == "based"
    del env["LAKECTL_BASE_URI"]
    flag = _lsm(env, "--base-uri", "lsm://", "fs", "cat", "based/main/data/f.txt")
    assert flag.stdout == "based", flag.stderr
