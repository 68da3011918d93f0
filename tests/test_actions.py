"""Actions (hooks) through the embedded client, against a real webhook server on
127.0.0.1 (lsmstore.testing.webhook_server): action files, every event's body, a
failing pre-hook aborting with nothing written, post-hook failures recorded, timeouts,
refused connections, the allow-list, the runs API and retention."""

from __future__ import annotations

from pathlib import Path

import pytest

import lsmstore
from lsmstore.actions import files, runs
from lsmstore.errors import (
    CorruptFileError,
    HookFailedError,
    InvalidActionError,
    InvalidInputError,
    NotFoundError,
    RefExistsError,
)
from lsmstore.storage.base import ForwardingStore, ObjectStore
from lsmstore.storage.url import open_object_store
from lsmstore.testing.webhook_server import WebhookServer, refused_url


@pytest.fixture
def store(hooked_store: lsmstore.Store) -> lsmstore.Store:
    return hooked_store


def action(name: str, events: str, url: str, *, extra: str = "", timeout: str = "") -> bytes:
    props = f"      url: {url}\n" + (f"      timeout: {timeout}\n" if timeout else "") + extra
    return (
        f"name: {name}\non:\n{events}hooks:\n  - id: {name.replace(' ', '_')}_hook\n"
        f"    type: webhook\n    properties:\n{props}"
    ).encode()


async def install(repo: lsmstore.Repository, path: str, data: bytes) -> None:
    """Commit an action file onto main (before any hook that would judge it exists)."""
    main = repo.branch("main")
    await main.upload(f"_lakefs_actions/{path}", data)
    await main.commit(f"add {path}", metadata={"owner": "ops"})


async def new_repo(store: lsmstore.Store, tmp_path: Path, name: str) -> lsmstore.Repository:
    return await store.create_repository(name, storage_namespace=(tmp_path / name).as_uri())


async def test_pre_commit_rejection_aborts_and_commits_nothing(
    store: lsmstore.Store, tmp_path: Path, hooks: WebhookServer
) -> None:
    repo = await new_repo(store, tmp_path, "pcx")
    await install(repo, "require.yaml", action(
        "require owner", "  pre-commit:\n    branches: [main]\n", hooks.url("/require"),
        extra="      query_params:\n        key: owner\n",
    ))  # fmt: skip
    main = repo.branch("main")
    head = (await main.head()).base
    await main.put("k", b"v")
    with pytest.raises(HookFailedError) as err:
        await main.commit("no owner", metadata={"team": "x"})
    assert "pre-commit hook aborted" in str(err.value) and "status code: 400" in str(err.value)
    assert (await main.head()).base == head  # nothing committed; the write stays staged
    assert await main.get("k") == b"v"
    call = hooks.calls_to("/require")[-1]
    assert call.query == {"key": ["owner"]}
    assert call.headers["Content-Type"] == "application/json"
    body = call.body
    assert body["event_type"] == "pre-commit" and body["action_name"] == "require owner"
    assert body["hook_id"] == "require_owner_hook" and body["repository_id"] == "pcx"
    assert body["branch_id"] == "main" and body["source_ref"] == "main"
    assert body["commit_message"] == "no owner" and body["commit_metadata"] == {"team": "x"}
    assert body["event_time"].endswith("Z") and "commit_id" not in body
    # the failed run is recorded with its output
    run = await repo.action_run(err.value.run_id)
    assert run.event_type == "pre-commit" and run.status == "failed" and run.branch == "main"
    [hook] = await repo.run_hooks(run.run_id)
    assert hook.hook_run_id == "0000_0000" and hook.status == "failed"
    out = await repo.hook_output(run.run_id, hook.hook_run_id)
    assert b"commit metadata needs 'owner'" in out and b"400" in out
    # with the key the commit passes and the run is recorded as completed
    c = await main.commit("with owner", metadata={"owner": "me"})
    assert c.message == "with owner" and (await main.head()).base != head
    latest = (await repo.action_runs(amount=1))[0]
    assert latest.status == "completed" and latest.event_type == "pre-commit"
    # recorded once the commit is written, with its ID (lakeFS fills it in afterwards)
    assert latest.commit_id == (await main.head()).base
    assert await repo.action_runs(commit=latest.commit_id) == [latest]


async def test_post_commit_failure_is_recorded_not_raised(
    store: lsmstore.Store, tmp_path: Path, hooks: WebhookServer
) -> None:
    repo = await new_repo(store, tmp_path, "post")
    await install(repo, "post.yaml", action("notify", "  post-commit:\n", hooks.url("/fail")))
    main = repo.branch("main")
    await main.put("k", b"v")
    c = await main.commit("m", committer="alice")
    head = (await main.head()).base
    [run] = [r for r in await repo.action_runs(commit=head) if r.event_type == "post-commit"]
    assert run.status == "failed" and run.commit_id == head and run.source_ref == head
    body = hooks.calls_to("/fail")[-1].body
    assert body["commit_id"] == head and body["committer"] == "alice" == c.committer


async def test_slow_and_down_webhooks_fail_the_hook(
    store: lsmstore.Store, tmp_path: Path, hooks: WebhookServer
) -> None:
    repo = await new_repo(store, tmp_path, "sdx")
    await install(repo, "slow.yaml", action(
        "slow", "  pre-create-branch:\n", hooks.url("/slow"), timeout="300ms"
    ))  # fmt: skip
    with pytest.raises(HookFailedError, match=r"timed out after 0\.3s"):
        await repo.create_branch("b1")
    assert "b1" not in await repo.list_branches()
    hooks.release()
    await install(repo, "slow.yaml", action("slow", "  pre-create-tag:\n", refused_url()))
    with pytest.raises(HookFailedError, match="webhook request failed: Client"):
        await repo.create_tag("t1", "main")
    assert await repo.list_tags() == []


async def test_branch_merge_delete_and_tag_events_carry_lakefs_fields(
    store: lsmstore.Store, tmp_path: Path, hooks: WebhookServer
) -> None:
    repo = await new_repo(store, tmp_path, "evx")
    events = [
        "pre-create-branch", "post-create-branch", "pre-merge", "post-merge",
        "pre-delete-branch", "post-delete-branch", "pre-create-tag", "post-create-tag",
        "pre-delete-tag", "post-delete-tag", "pre-revert", "post-revert",
    ]  # fmt: skip
    await install(repo, "all.yaml", action("all", "".join(f"  {e}:\n" for e in events),
                                            hooks.url("/ok")))  # fmt: skip
    base = (await repo.branch("main").head()).base
    await repo.create_branch("feature", source="main")
    by = {c.body["event_type"]: c.body for c in hooks.calls_to("/ok")}
    assert by["pre-create-branch"]["branch_id"] == "feature"
    assert by["pre-create-branch"]["source_ref"] == "main"
    assert by["post-create-branch"]["commit_id"] == base
    feature = repo.branch("feature")
    await feature.put("f", b"1")
    await feature.commit("on feature")
    fhead = (await feature.head()).base
    result = await repo.merge("feature", into="main", message="merge it", metadata={"m": "1"})
    by = {c.body["event_type"]: c.body for c in hooks.calls_to("/ok")}
    pm = by["pre-merge"]
    assert pm["branch_id"] == "main" and pm["source_ref"] == fhead
    assert pm["merge_source"] == "feature" and pm["commit_message"] == "merge it"
    assert pm["commit_metadata"] == {"m": "1"} and "commit_id" not in pm
    assert by["post-merge"]["commit_id"] == result.commit_id == by["post-merge"]["source_ref"]
    await repo.create_tag("v1", "main")
    await repo.delete_tag("v1")
    by = {c.body["event_type"]: c.body for c in hooks.calls_to("/ok")}
    for e in ("pre-create-tag", "post-create-tag", "pre-delete-tag", "post-delete-tag"):
        assert by[e]["tag_id"] == "v1" and by[e]["commit_id"] == result.commit_id, e
        assert by[e]["source_ref"] == result.commit_id and "branch_id" not in by[e]
    await repo.delete_branch("feature")
    by = {c.body["event_type"]: c.body for c in hooks.calls_to("/ok")}
    assert by["pre-delete-branch"]["branch_id"] == "feature"
    assert by["pre-delete-branch"]["source_ref"] == fhead
    assert "post-delete-branch" in by
    r = await repo.revert(result.commit_id, branch="main")
    by = {c.body["event_type"]: c.body for c in hooks.calls_to("/ok")}
    assert by["pre-revert"]["branch_id"] == "main" and by["post-revert"]["commit_id"] == r.commit_id
    # every run is listed, newest first, and filters by branch
    listed = await repo.action_runs(amount=1000)
    assert [r.run_id for r in listed] == sorted(r.run_id for r in listed)
    assert len(listed) == len(hooks.calls_to("/ok"))
    assert {r.event_type for r in await repo.action_runs(branch="feature")} == {
        "pre-create-branch", "post-create-branch", "pre-delete-branch", "post-delete-branch",
    }  # fmt: skip
    page = await repo.action_runs(after=listed[1].run_id, amount=2)
    assert [r.run_id for r in page] == [listed[2].run_id, listed[3].run_id]


async def test_failing_pre_hooks_leave_each_operation_undone(
    store: lsmstore.Store, tmp_path: Path, hooks: WebhookServer
) -> None:
    repo = await new_repo(store, tmp_path, "undo")
    await repo.create_branch("old")  # before the action file: its commit has none
    events = ["pre-merge", "pre-delete-branch", "pre-delete-tag", "pre-revert"]
    await install(repo, "deny.yaml", action("deny", "".join(f"  {e}:\n" for e in events),
                                             hooks.url("/fail")))  # fmt: skip
    await repo.create_branch("side")
    side = repo.branch("side")
    await side.put("s", b"1")
    await side.commit("side work")
    await repo.create_tag("keep", "main")
    head = (await repo.branch("main").head()).base
    # a merge reads the files of its source
    with pytest.raises(HookFailedError, match="pre-merge hook aborted"):
        await repo.merge("side", into="main")
    with pytest.raises(HookFailedError, match="pre-revert hook aborted"):
        await repo.revert(head, branch="main")
    assert (await repo.branch("main").head()).base == head
    with pytest.raises(HookFailedError, match="pre-delete-tag"):
        await repo.delete_tag("keep")
    assert await repo.list_tags() == ["keep"]
    with pytest.raises(HookFailedError, match="pre-delete-branch"):
        await repo.delete_branch("side")
    assert "side" in await repo.list_branches() and await side.get("s") == b"1"
    await repo.delete_branch("old")  # read from its own commit
    assert "old" not in await repo.list_branches()


async def test_cherry_pick_hooks(
    store: lsmstore.Store, tmp_path: Path, hooks: WebhookServer
) -> None:
    repo = await new_repo(store, tmp_path, "cpx")
    await install(repo, "cp.yaml", action(
        "pick", "  pre-cherry-pick:\n    branches: [guarded]\n  post-cherry-pick:\n",
        hooks.url("/fail"),
    ))  # fmt: skip
    await repo.create_branch("guarded")
    await repo.create_branch("open")
    await repo.create_branch("work")
    work = repo.branch("work")
    await work.put("p", b"1")
    await work.commit("to pick")
    picked = (await work.head()).base
    guarded = repo.branch("guarded")
    before = (await guarded.head()).base
    with pytest.raises(HookFailedError, match="pre-cherry-pick hook aborted"):
        await guarded.cherry_pick(picked)
    assert (await guarded.head()).base == before
    c = await repo.branch("open").cherry_pick(picked)  # post-cherry-pick fails: recorded
    new = (await repo.branch("open").head()).base
    assert c.message == "to pick"
    [post] = await repo.action_runs(commit=new)
    assert post.event_type == "post-cherry-pick" and post.status == "failed"
    body = hooks.calls_to("/fail")[-1].body
    assert body["branch_id"] == "open" and body["commit_id"] == new


async def test_invalid_action_file_aborts_pre_events(
    store: lsmstore.Store, tmp_path: Path, hooks: WebhookServer
) -> None:
    repo = await new_repo(store, tmp_path, "inv")
    main = repo.branch("main")
    await main.upload("_lakefs_actions/bad.yaml", b"name: lua\non:\n  pre-commit:\n"
                          b"hooks:\n  - id: x1\n    type: lua\n")  # fmt: skip
    head = (await main.head()).base
    with pytest.raises(HookFailedError, match="hook type 'lua' is not supported"):
        await main.commit("c")
    assert (await main.head()).base == head
    with pytest.raises(RefExistsError):  # checked before the files are read
        await repo.create_branch("main")


async def test_hosts_outside_the_allow_list_are_not_called(
    tmp_path: Path, hooks: WebhookServer
) -> None:
    async with lsmstore.connect(home=str(tmp_path / "h"), batch_interval_ms=1) as store:
        repo = await new_repo(store, tmp_path, "ssrf")
        await install(repo, "a.yaml", action("act", "  pre-create-tag:\n", hooks.url("/ok")))
        with pytest.raises(HookFailedError, match="actions_webhook_allow"):
            await repo.create_tag("t", "main")
        named = f"http://localhost:{hooks.port}/ok"  # a name is not matched by its address
        await install(repo, "a.yaml", action("act", "  pre-create-tag:\n", named))
    async with lsmstore.connect(
        home=str(tmp_path / "h"), batch_interval_ms=1, actions_webhook_allow="10.0.0.0/8"
    ) as store:
        repo = await store.get_repository("ssrf")
        with pytest.raises(HookFailedError, match="'localhost' is not allowed"):
            await repo.create_tag("t", "main")
    assert hooks.calls == []
    with pytest.raises(InvalidInputError, match="actions_webhook_allow"):
        lsmstore.load_config(actions_webhook_allow="http://x/")


async def test_actions_off_runs_nothing(tmp_path: Path, hooks: WebhookServer) -> None:
    async with lsmstore.connect(
        home=str(tmp_path / "h"), actions_enabled="off", actions_webhook_allow="127.0.0.1"
    ) as store:
        repo = await new_repo(store, tmp_path, "off")
        await install(repo, "a.yaml", action("act", "  pre-commit:\n", hooks.url("/fail")))
        await repo.create_tag("t", "main")
        assert hooks.calls == [] and await repo.action_runs() == []


async def test_retention_deletes_old_runs(tmp_path: Path, hooks: WebhookServer) -> None:
    now = [1_700_000_000.0]
    async with lsmstore.Store(
        lsmstore.load_config(home=str(tmp_path / "h"), actions_webhook_allow="127.0.0.1",
                             actions_runs_retention_s=3600),
        clock=lambda: now[0],
    ) as store:  # fmt: skip
        repo = await new_repo(store, tmp_path, "ret")
        await install(repo, "a.yaml", action("act", "  pre-create-tag:\n", hooks.url("/ok")))
        await repo.create_tag("t1", "main")
        [old] = await repo.action_runs()
        now[0] += 7200
        await repo.create_tag("t2", "main")
        [new] = await repo.action_runs()
        assert new.run_id != old.run_id
        with pytest.raises(NotFoundError):
            await repo.action_run(old.run_id)
        with pytest.raises(NotFoundError):
            await repo.hook_output(old.run_id, "0000_0000")
        assert [m.key async for m in repo.objects.list(runs.OUTPUT)] == [
            f"{runs.OUTPUT}{new.run_id}/0000_0000.log"
        ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"name: ab\nhooks: []\n", "'on' is required"),
        (b"name: ab\non:\n  pre-push:\nhooks: []\n", "event 'pre-push' is not supported"),
        (b"name: ab\non:\n  pre-create-tag:\n    branches: [main]\n", "tag events"),
        (b"on:\n  pre-commit:\n", "'name' is required"),
        (b"name: ab\non:\n  pre-commit:\nhooks:\n  - id: h1\n    type: webhook\n",
         "url"),
        (b"name: ab\non:\n  pre-commit:\nhooks:\n  - id: h1\n    type: webhook\n"
         b"    properties:\n      url: http://x/\n      timeout: 1y\n", "invalid timeout"),
        (b"name: ab\non:\n  pre-commit:\nhooks:\n  - id: h1\n    type: webhook\n"
         b"    properties:\n      url: http://x/\n      timeout: 11m\n", "at most 600s"),
        (b"name: ab\non:\n  pre-commit:\nhooks:\n  - id: h1\n    type: airflow\n", "airflow"),
        (b"name: ab\non:\n  pre-commit:\nhooks:\n  - id: h1\n    type: webhook\n"
         b"    if: failure()\n", "'if'"),
        (b"name: ab\non:\n  pre-commit:\nhooks:\n  - {id: h1, type: webhook, properties: "
         b"{url: 'http://x/'}}\n  - {id: h1, type: webhook, properties: {url: 'http://x/'}}\n",
         "given twice"),
        (b"name: ab\non:\n  pre-commit:\nhooks:\n  - id: h1\n    type: webhook\n"
         b"    properties:\n      url: http://x/\n      headers: {T: '{{ ENV.TOKEN }}'}\n",
         "ENV.* }} substitution is not supported"),
        (b"name: [\n", "not a YAML document"),
        (b"x" * (files.MAX_FILE_BYTES + 1), "at most"),
    ],
)  # fmt: skip
def test_invalid_action_files_are_refused(text: bytes, problem: str) -> None:
    with pytest.raises(InvalidActionError, match=r"f\.yaml") as err:
        files.parse_action(text, "f.yaml")
    assert problem in str(err.value)


def test_valid_action_file_parses() -> None:
    a = files.parse_action(
        b"name: check\ndescription: d\non:\n  pre-commit:\n    branches: [main, 'rel-*']\n"
        b"  post-create-tag:\nhooks:\n  - id: h_1\n    type: webhook\n    properties:\n"
        b"      url: https://h.example/x\n      timeout: 1m30s\n"
        b"      query_params: {a: '1', b: ['2', '3']}\n      headers: {X-T: s}\n"
    )
    assert a.matches("pre-commit", "rel-2") and not a.matches("pre-commit", "dev")
    assert a.matches("post-create-tag", "") and not a.matches("post-commit", "main")
    [h] = a.hooks
    assert h.timeout_s == 90 and h.query_params == (("a", "1"), ("b", "2"), ("b", "3"))
    assert h.headers == (("X-T", "s"),)


async def test_damaged_run_record_is_a_typed_error(
    store: lsmstore.Store, tmp_path: Path, hooks: WebhookServer
) -> None:
    repo = await new_repo(store, tmp_path, "dmg")
    await install(repo, "a.yaml", action("act", "  pre-create-tag:\n", hooks.url("/ok")))
    await repo.create_tag("t", "main")
    [run] = await repo.action_runs()
    key = f"{runs.RUNS}{run.run_id}.json"
    await repo.objects.delete(key)
    await repo.objects.put(key, b'{"run": {"run_id": 1}}')
    with pytest.raises(CorruptFileError, match=run.run_id):
        await repo.action_run(run.run_id)
    with pytest.raises(CorruptFileError):
        await repo.action_runs()


class _CountedReads(ForwardingStore):
    """Counts the reads of keys holding ``containing`` (set by the test)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.containing = "\0"
        self.reads = 0

    async def get(self, key: str) -> bytes:
        self.reads += self.containing in key
        return await super().get(key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        self.reads += self.containing in key
        return await super().get_range(key, start, end)


async def test_actions_of_a_commit_are_read_once(tmp_path: Path, hooks: WebhookServer) -> None:
    """Events whose source is a commit ID read its action files once (a commit never
    changes), for files.CACHE_S of the store's clock; a branch's are read every time."""
    counted: list[_CountedReads] = []

    def open_objects(url: str) -> ObjectStore:
        counted.append(_CountedReads(open_object_store(url)))
        return counted[-1]

    now = [1_800_000_000.0]
    cfg = lsmstore.load_config(
        home=str(tmp_path / "home"), environ={}, batch_interval_ms=1,
        actions_webhook_allow="127.0.0.1",
    )  # fmt: skip
    async with lsmstore.Store(cfg, open_objects=open_objects, clock=lambda: now[0]) as store:
        repo = await new_repo(store, tmp_path, "cached")
        await install(repo, "branch.yaml", action(
            "on branch", "  pre-create-branch:\n  post-create-branch:\n", hooks.url("/ok"),
        ))  # fmt: skip
        head = (await repo.branch("main").head()).base
        stats = await repo.ref(head).stat_object("_lakefs_actions/branch.yaml")
        data_id = stats.physical_address.rsplit("/", 1)[-1]
        for c in counted:
            c.containing = data_id

        def reads() -> int:
            return sum(c.reads for c in counted)

        for name in ("b1", "b2", "b3"):
            await repo.create_branch(name, source=head)
        assert len(hooks.calls_to("/ok")) == 6  # every event still runs its hooks
        # the install's post-commit event read them at this commit already
        assert reads() == 0
        now[0] += files.CACHE_S  # past the cache's time: read again
        await repo.create_branch("b4", source=head)
        assert reads() == 1
        await repo.create_branch("b5", source="main")  # a branch: read for each event
        assert reads() == 3
