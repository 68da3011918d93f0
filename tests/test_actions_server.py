"""Actions through a real server process: the official lakeFS SDK (a failing pre-commit
hook is its 412, the runs through ``ActionsApi``), our remote client (HookFailedError
typed over the wire, the runs methods) and the CLI (``actions runs list|describe``,
``actions validate``), with a real webhook server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import lakefs
import lakefs_sdk
import pytest
from helpers.cli import Cli
from helpers.server import unique
from lakefs.client import Client

import lsmstore
from lsmstore.cli.exitcodes import ExitCode
from lsmstore.errors import HookFailedError, NotFoundError
from lsmstore.testing.server_process import ServerProcess, start_server
from lsmstore.testing.webhook_server import WebhookServer

REQUIRE = """name: require owner
on:
  pre-commit:
    branches: [main]
hooks:
  - id: owner_check
    type: webhook
    properties:
      url: {url}
      timeout: 20s
      query_params:
        key: owner
"""
ON_BRANCH = """name: on branch
on:
  pre-create-branch:
  post-create-branch:
hooks:
  - id: branch_ok
    type: webhook
    properties:
      url: {ok}
  - id: after_ok
    type: webhook
    properties:
      url: {fail}
"""


@pytest.fixture(scope="module")
def hooks() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(
        tmp_path_factory.mktemp("actions") / "home",
        env={"LSMSTORE_ACTIONS_WEBHOOK_ALLOW": "127.0.0.1"},
    )
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Client:
    key, secret = server.admin
    return Client(host=server.url, username=key, password=secret)


def test_sdk_pre_commit_hook_and_runs_api(client: Client, hooks: WebhookServer) -> None:
    name = unique("act")
    repo = lakefs.Repository(name, client=client).create(storage_namespace=f"local://{name}")
    main = repo.branch("main")
    main.object("_lakefs_actions/require.yaml").upload(
        REQUIRE.format(url=hooks.url("/require")).encode()
    )
    main.commit("add the action", metadata={"owner": "ops"})
    head = main.get_commit().id
    main.object("data.csv").upload(b"a,b\n")
    with pytest.raises(lakefs.exceptions.LakeFSException) as refused:
        main.commit("no owner")
    assert refused.value.status_code == 412
    assert "pre-commit hook aborted" in str(refused.value)
    assert main.get_commit().id == head
    main.commit("owned", metadata={"owner": "me"})
    assert main.get_commit().id != head

    api = lakefs_sdk.ActionsApi(client.sdk_client._api)
    listed = api.list_repository_runs(name)
    assert [r.status for r in listed.results] == ["completed", "failed", "completed"]
    assert {r.event_type for r in listed.results} == {"pre-commit"}
    assert all(r.branch == "main" for r in listed.results)
    assert listed.pagination.has_more is False
    page = api.list_repository_runs(name, amount=1)
    assert page.pagination.has_more and page.pagination.next_offset == listed.results[0].run_id
    rest = api.list_repository_runs(name, after=page.pagination.next_offset, amount=10)
    assert [r.run_id for r in rest.results] == [r.run_id for r in listed.results[1:]]
    failed = listed.results[1]
    run = api.get_run(name, failed.run_id)
    assert run.status == "failed" and run.start_time <= run.end_time
    [hook] = api.list_run_hooks(name, failed.run_id).results
    assert (hook.hook_run_id, hook.action, hook.hook_id, hook.status) == (
        "0000_0000", "require owner", "owner_check", "failed"
    )  # fmt: skip
    output = api.get_run_hook_output(name, failed.run_id, hook.hook_run_id)
    assert b"commit metadata needs 'owner'" in bytes(output)
    with pytest.raises(lakefs_sdk.ApiException) as missing:
        api.get_run(name, "0" * 22)
    assert missing.value.status == 404
    assert api.list_repository_runs(name, branch="dev").results == []


async def test_remote_client_hooks_and_runs(server: ServerProcess, hooks: WebhookServer) -> None:
    key, secret = server.admin
    async with lsmstore.connect(server.url, access_key_id=key, secret_access_key=secret) as store:
        name = unique("rem")
        repo = await store.create_repository(name, storage_namespace=f"local://{name}")
        main = repo.branch("main")
        text = ON_BRANCH.format(ok=hooks.url("/ok"), fail=hooks.url("/fail"))
        await main.upload("_lakefs_actions/branch.yaml", text.encode())
        await main.commit("add")
        # pre-create-branch: the first hook passes, the second fails -> refused
        with pytest.raises(HookFailedError, match="pre-create-branch hook aborted") as err:
            await repo.create_branch("dev")
        assert "dev" not in await repo.list_branches()
        [run] = await repo.action_runs(branch="dev")
        assert f"run id '{run.run_id}'" in str(err.value)
        assert await repo.action_run(run.run_id) == run
        assert run.event_type == "pre-create-branch" and run.status == "failed"
        hooks_of = await repo.run_hooks(run.run_id)
        assert [(h.hook_id, h.status) for h in hooks_of] == [
            ("branch_ok", "completed"), ("after_ok", "failed"),
        ]  # fmt: skip
        assert b"status code: 500" in await repo.hook_output(run.run_id, "0000_0001")
        assert [h.hook_run_id for h in await repo.run_hooks(run.run_id, after="0000_0000")] == [
            "0000_0001"
        ]
        body = hooks.calls_to("/ok")[-1].body
        assert body["event_type"] == "pre-create-branch" and body["branch_id"] == "dev"
        assert body["repository_id"] == name and body["source_ref"] == "main"
        with pytest.raises(NotFoundError):
            await repo.hook_output(run.run_id, "0009_0000")


def test_cli_runs_and_validate(
    server: ServerProcess, client: Client, hooks: WebhookServer, tmp_path: Path
) -> None:
    name = unique("cli")
    repo = lakefs.Repository(name, client=client).create(storage_namespace=f"local://{name}")
    main = repo.branch("main")
    main.object("_lakefs_actions/r.yaml").upload(REQUIRE.format(url=hooks.url("/require")).encode())
    main.commit("add", metadata={"owner": "x"})
    key, secret = server.admin
    cli = Cli(tmp_path / "home", {"LSMSTORE_SERVER_URL": server.url,
                                   "LSMSTORE_ACCESS_KEY_ID": key,
                                   "LSMSTORE_SECRET_ACCESS_KEY": secret})  # fmt: skip
    p = cli("commit", f"lakefs://{name}/main", "-m", "no owner", "--allow-empty-commit")
    assert p.returncode == ExitCode.CONFLICT and "pre-commit hook aborted" in p.stderr
    table = cli("actions", "runs", "list", f"lakefs://{name}", check=True).stdout
    assert "pre-commit" in table and "failed" in table and "completed" in table
    runs = json.loads(cli("-o", "json", "actions", "runs", "list", f"lakefs://{name}",
                          "--amount", "1", check=True).stdout)  # fmt: skip
    assert len(runs) == 1 and runs[0]["status"] == "failed"
    text = cli("actions", "runs", "describe", f"lakefs://{name}", runs[0]["run_id"],
               check=True).stdout  # fmt: skip
    assert f"Run ID: {runs[0]['run_id']}" in text and "commit metadata needs 'owner'" in text
    described = json.loads(cli("-o", "json", "actions", "runs", "describe", f"lakefs://{name}",
                               runs[0]["run_id"], check=True).stdout)  # fmt: skip
    assert described["hooks"][0]["hook_id"] == "owner_check"
    good = tmp_path / "good.yaml"
    good.write_text(REQUIRE.format(url="https://hooks.example/x"))
    ok = cli("actions", "validate", str(good), check=True)
    assert "valid action 'require owner'" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(REQUIRE.replace("webhook", "lua").format(url="x"))
    p = cli("actions", "validate", str(bad))
    assert p.returncode == ExitCode.USAGE and "hook type 'lua' is not supported" in p.stderr


def test_cli_embedded_store_runs_hooks(hooks: WebhookServer, tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home", {"LSMSTORE_ACTIONS_WEBHOOK_ALLOW": "127.0.0.1"})
    action = tmp_path / "tag.yaml"
    action.write_text(
        "name: on tag\non:\n  pre-create-tag:\nhooks:\n  - id: tag_check\n    type: webhook\n"
        f"    properties:\n      url: {hooks.url('/fail')}\n"
    )
    cli("repo", "create", "lsm://emb", check=True)
    cli("fs", "upload", str(action), "lsm://emb/main/_lakefs_actions/tag.yaml", check=True)
    cli("commit", "lsm://emb/main", "-m", "add", check=True)
    p = cli("tag", "create", "lsm://emb/v1", "lsm://emb/main")
    assert p.returncode == ExitCode.CONFLICT and "pre-create-tag hook aborted" in p.stderr
    assert json.loads(cli("-o", "json", "tag", "list", "lsm://emb", check=True).stdout) == []
    [run] = json.loads(cli("-o", "json", "actions", "runs", "list", "lsm://emb", check=True).stdout)
    assert run["event_type"] == "pre-create-tag" and run["status"] == "failed"
    assert hooks.calls_to("/fail")[-1].body["tag_id"] == "v1"
