"""The official lakeFS Python SDK (PyPI ``lakefs`` 0.16.0 over ``lakefs-sdk`` 1.88.0,
pinned) against a real server process: every call below is the SDK's own request."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import lakefs
import lakefs_sdk
import pytest
from helpers.server import unique
from lakefs.client import Client
from lakefs.exceptions import (
    ConflictException,
    ForbiddenException,
    NotFoundException,
    ObjectExistsException,
)

from lsmstore.testing.server_process import ServerProcess


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Client:
    key, secret = server.admin
    return Client(host=server.url, username=key, password=secret)


@pytest.fixture
def repo(client: Client) -> Iterator[lakefs.Repository]:
    name = unique()
    yield lakefs.Repository(name, client=client).create(storage_namespace=f"local://{name}")


def test_version_and_repositories(client: Client) -> None:
    assert tuple(int(x) for x in client.version.split(".")) >= (1, 3, 1)
    name = unique()
    repo = lakefs.Repository(name, client=client).create(storage_namespace=f"local://{name}")
    assert repo.properties.default_branch == "main"
    again = lakefs.Repository(name, client=client).create(
        storage_namespace=f"local://{name}", exist_ok=True
    )
    assert again.properties.storage_namespace == f"local://{name}"
    with pytest.raises(ConflictException):
        lakefs.Repository(name, client=client).create(storage_namespace=f"local://{name}")
    assert name in [r.id for r in lakefs.repositories(client=client)]
    assert repo.metadata == {}
    repo.delete()
    assert name not in [r.id for r in lakefs.repositories(client=client)]


def test_branches_create_delete_reset_revert(repo: lakefs.Repository) -> None:
    main = repo.branch("main")
    main.object("keep.txt").upload(b"keep")
    first = main.commit("first")
    dev = repo.branch("dev").create(source_reference="main")
    assert dev.head.id == first.get_commit().id
    repo.branch("dev").create(source_reference="main", exist_ok=True)
    with pytest.raises(ConflictException):
        repo.branch("dev").create(source_reference="main")
    assert sorted(b.id for b in repo.branches()) == ["dev", "main"]

    dev.object("staged.txt").upload(b"s")
    dev.object("keep.txt").upload(b"changed")
    assert len(list(dev.uncommitted())) == 2
    dev.reset_changes(path_type="object", path="keep.txt")
    assert [c.path for c in dev.uncommitted()] == ["staged.txt"]
    assert dev.object("keep.txt").reader().read() == b"keep"
    dev.reset_changes()
    assert list(dev.uncommitted()) == []
    assert not dev.object("staged.txt").exists()

    main.object("bad.txt").upload(b"oops")
    bad = main.commit("bad")
    bad_id = bad.get_commit().id
    main.revert(bad_id)
    assert not main.object("bad.txt").exists()
    assert main.get_commit().parents == [bad_id]

    dev.delete()
    assert [b.id for b in repo.branches()] == ["main"]
    with pytest.raises(NotFoundException):
        repo.branch("dev").get_commit()


def test_upload_download_stat_exists(repo: lakefs.Repository) -> None:
    main = repo.branch("main")
    obj = main.object("dir/file.bin")
    data = bytes(range(256)) * 100
    stats = obj.upload(data, content_type="application/x-test", metadata={"Owner": "me"}).stat()
    assert stats.size_bytes == len(data)
    assert stats.content_type == "application/x-test"
    assert stats.metadata == {"owner": "me"}
    import hashlib

    assert stats.checksum == hashlib.md5(data).hexdigest()
    assert obj.reader().read() == data
    with obj.reader() as r:
        r.seek(1000)
        assert r.read(300) == data[1000:1300]
    assert obj.exists() and not main.object("dir/none").exists()
    with pytest.raises(ObjectExistsException):
        obj.upload(b"again", mode="xb")
    assert obj.reader().read() == data
    with main.object("w.txt").writer(mode="w") as w:
        w.write("written through the writer")
    assert main.object("w.txt").reader(mode="r").read() == "written through the writer"


def test_listing_with_delimiter_and_pagination(repo: lakefs.Repository) -> None:
    main = repo.branch("main")
    paths = [f"p/{i:04d}.txt" for i in range(250)] + ["q/a", "q/b/c", "top"]
    main.delete_objects([])  # no-op
    for p in paths:
        main.object(p).upload(p.encode())
    listed = [o.path for o in main.objects(prefix="p/")]  # 3 pages of 100
    assert listed == paths[:250]
    assert [o.path for o in main.objects(delimiter="/")] == ["p/", "q/", "top"]
    assert [o.path for o in main.objects(prefix="q/", delimiter="/")] == ["q/a", "q/b/"]
    assert [o.path for o in main.objects(prefix="p/", after="p/0247.txt")] == paths[248:250]
    assert [o.path for o in main.objects(delimiter="/", after="p/")] == ["q/", "top"]


def test_delete_bulk_delete_copy(repo: lakefs.Repository) -> None:
    main = repo.branch("main")
    for p in ("a", "b", "c", "d"):
        main.object(p).upload(p.encode())
    main.object("a").delete()
    with pytest.raises(NotFoundException):
        main.object("a").delete()
    main.delete_objects(["b", "c", "missing"])
    assert [o.path for o in main.objects()] == ["d"]
    copied = main.object("d").copy("main", "e")
    assert copied.reader().read() == b"d"
    assert copied.stat().checksum == main.object("d").stat().checksum


def test_commit_log_diff_merge_strategies_tags(repo: lakefs.Repository) -> None:
    main = repo.branch("main")
    main.object("x").upload(b"1")
    c1 = main.commit("one", metadata={"k": "v"}).get_commit()
    assert c1.metadata == {"k": "v"}
    assert [c.message for c in main.log(max_amount=2)] == ["one", "Repository created"]
    dev = repo.branch("dev").create(source_reference="main")
    dev.object("x").upload(b"dev")
    dev.object("y").upload(b"new")
    assert sorted((c.type, c.path) for c in dev.uncommitted()) == [("added", "y"), ("changed", "x")]
    dev.commit("dev work")
    main.object("x").upload(b"main")
    main.commit("main work")
    assert sorted(c.path for c in repo.ref("main").diff(dev)) == ["x", "y"]
    with pytest.raises(ConflictException):
        dev.merge_into(main)
    dest_wins = dev.merge_into(main, strategy="dest-wins")
    assert dest_wins
    assert main.object("x").reader().read() == b"main"
    assert main.object("y").reader().read() == b"new"
    dev.object("x").upload(b"dev2")
    dev.commit("dev again")
    dev.merge_into(main, strategy="source-wins")
    assert main.object("x").reader().read() == b"dev2"

    tag = repo.tag("v1").create("main")
    assert tag.get_commit().id == main.get_commit().id
    assert [t.id for t in repo.tags()] == ["v1"]
    assert repo.ref("v1").object("x").reader().read() == b"dev2"
    tag.delete()
    assert list(repo.tags()) == []


def test_transactions(repo: lakefs.Repository) -> None:
    main = repo.branch("main")
    with main.transact(commit_message="tx") as tx:
        tx.object("t1").upload(b"one")
        tx.object("t2").upload(b"two")
    assert main.object("t1").reader().read() == b"one"
    assert [b.id for b in repo.branches()] == ["main"]  # the tx branch is gone
    assert any(c.message == "tx" for c in main.log(max_amount=5))


def test_cherry_pick(repo: lakefs.Repository) -> None:
    """lakeFS's cherryPick: the picked commit's changes (against its parent) as one new
    commit on the branch, the picked commit's message and metadata; a conflict is the
    SDK's ConflictException and writes nothing."""
    main = repo.branch("main")
    main.object("a.txt").upload(b"1")
    main.commit("base")
    dev = repo.branch("dev").create(source_reference="main")
    dev.object("a.txt").upload(b"dev")
    dev.commit("change a")
    dev.object("b.txt").upload(b"b")
    picked = dev.commit("add b", metadata={"ticket": "7"}).get_commit()
    before = main.get_commit().id

    c = main.cherry_pick(picked.id)
    assert c.parents == [before] and c.message == "add b" and c.metadata == {"ticket": "7"}
    assert main.get_commit().id == c.id
    assert main.object("b.txt").reader().read() == b"b"
    assert main.object("a.txt").reader().read() == b"1"

    main.object("a.txt").upload(b"main")
    head = main.commit("main changes a").get_commit().id
    with pytest.raises(ConflictException):
        main.cherry_pick("dev~1")
    assert main.get_commit().id == head
    with pytest.raises(NotFoundException):
        main.cherry_pick("no-such-ref")


def test_branch_protection(client: Client, repo: lakefs.Repository) -> None:
    """lakeFS's settings/branch_protection through the SDK's generated API: rules with
    an ETag, replaced only under If-Match; a protected branch refuses uploads, commits,
    resets, reverts and deletion (403, the SDK's ForbiddenException) and accepts
    merges."""
    api = client.sdk_client.repositories_api
    main = repo.branch("main")
    main.object("a.txt").upload(b"1")
    main.commit("base")
    dev = repo.branch("dev").create(source_reference="main")
    resp = api.get_branch_protection_rules_with_http_info(repo.id)
    assert resp.data == []
    etag = resp.headers["ETag"]
    rule = lakefs_sdk.BranchProtectionRule(pattern="ma*")
    api.set_branch_protection_rules(repo.id, [rule], if_match=etag)
    got = api.get_branch_protection_rules_with_http_info(repo.id)
    assert [r.pattern for r in got.data] == ["ma*"] and got.headers["ETag"] != etag
    with pytest.raises(lakefs_sdk.ApiException) as stale:
        api.set_branch_protection_rules(repo.id, [], if_match=etag)
    assert stale.value.status == 412

    head = main.get_commit().id
    _refused(lambda: main.object("b.txt").upload(b"2"))
    _refused(lambda: main.commit("direct", allow_empty=True))
    _refused(lambda: main.reset_changes())
    _refused(lambda: main.revert(head))
    _refused(lambda: main.delete())
    dev.object("d.txt").upload(b"d")
    dev.commit("dev work")
    dev.merge_into(main)
    assert main.object("d.txt").reader().read() == b"d"
    assert not main.object("b.txt").exists()
    api.set_branch_protection_rules(repo.id, [])
    main.object("b.txt").upload(b"2")


def _refused(call: Callable[[], object]) -> None:
    """The call fails with 403 and the protected-branch error (the high-level SDK wraps
    some calls' errors in its ForbiddenException, and lets others' through)."""
    with pytest.raises((ForbiddenException, lakefs_sdk.exceptions.ForbiddenException)) as e:
        call()
    assert "protected branch" in str(e.value)
