"""The lakeFS REST API over raw HTTP: shapes, codes and pagination lakeFS clients need,
and bad input answered with lakeFS's error shape (docs/server.md)."""

from __future__ import annotations

import httpx
from helpers.server import make_repo

from lsmstore.testing.server_process import ServerProcess


def _error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert isinstance(body, dict) and isinstance(body["message"], str) and body["message"]
    return str(body["message"])


def test_config_has_what_clients_check(admin: httpx.Client) -> None:
    cfg = admin.get("/config").json()
    version = cfg["version_config"]["version"]
    assert tuple(int(p) for p in version.split(".")) >= (1, 3, 1)
    storage = cfg["storage_config"]
    assert storage["pre_sign_support"] is False
    assert "blockstore_namespace_ValidityRegex" in storage
    assert cfg["storage_config_list"] == []


def test_healthcheck_is_open_and_others_are_not(server: ServerProcess) -> None:
    assert httpx.get(server.api + "/healthcheck").status_code == 204
    assert httpx.get(server.url + "/healthz").status_code == 200
    assert httpx.get(server.url + "/readyz").status_code == 200
    _error(httpx.get(server.api + "/repositories"), 401)
    _error(httpx.get(server.api + "/config"), 401)
    _error(httpx.get(server.url + "/metrics"), 401)


def test_repository_lifecycle_and_codes(admin: httpx.Client) -> None:
    name = make_repo(admin)
    repo = admin.get(f"/repositories/{name}").json()
    assert repo["id"] == name and repo["default_branch"] == "main"
    assert isinstance(repo["creation_date"], int)
    again = admin.post("/repositories", json={"name": name, "storage_namespace": "local://x"})
    _error(again, 409)
    assert admin.get(f"/repositories/{name}/metadata").json() == {}
    assert admin.delete(f"/repositories/{name}").status_code == 204
    _error(admin.get(f"/repositories/{name}"), 404)
    _error(admin.delete(f"/repositories/{name}"), 404)


def test_branch_creation_answers_201_with_the_commit_id_as_text(admin: httpx.Client) -> None:
    name = make_repo(admin)
    head = admin.get(f"/repositories/{name}/branches/main").json()["commit_id"]
    r = admin.post(f"/repositories/{name}/branches", json={"name": "dev", "source": "main"})
    assert r.status_code == 201 and r.text == head
    again = admin.post(f"/repositories/{name}/branches", json={"name": "dev", "source": "main"})
    _error(again, 409)
    same = admin.post(f"/repositories/{name}/branches", json={"name": "main", "source": "main"})
    _error(same, 409)


def test_pagination_fields_are_never_null(admin: httpx.Client) -> None:
    name = make_repo(admin)
    for i in range(5):
        r = admin.post(f"/repositories/{name}/branches", json={"name": f"b{i}", "source": "main"})
        assert r.status_code == 201
    seen: list[str] = []
    after = ""
    pages = 0
    while True:
        body = admin.get(f"/repositories/{name}/branches", params={"amount": 2, "after": after})
        page = body.json()
        p = page["pagination"]
        assert p["max_per_page"] == 1000 and p["results"] == len(page["results"])
        seen += [b["id"] for b in page["results"]]
        pages += 1
        if not p["has_more"]:
            assert p["next_offset"] == ""
            break
        assert p["next_offset"] == page["results"][-1]["id"]
        after = p["next_offset"]
    assert seen == ["b0", "b1", "b2", "b3", "b4", "main"] and pages == 3
    # amount <= 0 means the default (100), > 1000 means 1000
    for amount in (0, -1, 5000):
        page = admin.get(f"/repositories/{name}/branches", params={"amount": amount}).json()
        assert page["pagination"]["results"] == 6
    prefixed = admin.get(f"/repositories/{name}/branches", params={"prefix": "b3"}).json()
    assert [b["id"] for b in prefixed["results"]] == ["b3"]


def test_commit_log_and_get_commit_by_any_ref(admin: httpx.Client) -> None:
    name = make_repo(admin)
    empty = admin.post(f"/repositories/{name}/branches/main/commits", json={"message": "x"})
    _error(empty, 400)  # nothing staged
    r = admin.post(
        f"/repositories/{name}/branches/main/commits",
        json={"message": "first", "metadata": {"k": "v"}, "allow_empty": True},
    )
    assert r.status_code == 201, r.text
    commit = r.json()
    assert commit["message"] == "first" and commit["metadata"] == {"k": "v"}
    assert len(commit["parents"]) == 1 and isinstance(commit["creation_date"], int)
    by_branch = admin.get(f"/repositories/{name}/commits/main").json()
    assert by_branch["id"] == commit["id"]
    assert admin.get(f"/repositories/{name}/commits/main~1").json()["id"] == commit["parents"][0]
    log = admin.get(f"/repositories/{name}/refs/main/commits", params={"amount": 1}).json()
    assert [c["id"] for c in log["results"]] == [commit["id"]]
    assert log["pagination"]["has_more"] is True
    rest = admin.get(
        f"/repositories/{name}/refs/main/commits",
        params={"after": log["pagination"]["next_offset"]},
    ).json()
    assert [c["message"] for c in rest["results"]] == ["Repository created"]
    assert rest["pagination"] == {"has_more": False, "next_offset": "", "results": 1,
                                  "max_per_page": 1000}  # fmt: skip
    _error(admin.get(f"/repositories/{name}/commits/nosuchref"), 404)


def test_tags(admin: httpx.Client) -> None:
    name = make_repo(admin)
    r = admin.post(f"/repositories/{name}/tags", json={"id": "v1", "ref": "main"})
    assert r.status_code == 201 and r.json()["id"] == "v1"
    _error(admin.post(f"/repositories/{name}/tags", json={"id": "v1", "ref": "main"}), 409)
    assert admin.get(f"/repositories/{name}/tags/v1").json()["commit_id"] == r.json()["commit_id"]
    assert [t["id"] for t in admin.get(f"/repositories/{name}/tags").json()["results"]] == ["v1"]
    assert admin.delete(f"/repositories/{name}/tags/v1").status_code == 204
    _error(admin.get(f"/repositories/{name}/tags/v1"), 404)


def test_bad_input_gets_lakefs_error_shape(admin: httpx.Client) -> None:
    name = make_repo(admin)
    base = f"/repositories/{name}/branches"
    bad_json = admin.post(base, content=b"{not json", headers={"content-type": "application/json"})
    _error(bad_json, 400)
    _error(admin.post(base, json=["a", "list"]), 400)
    _error(admin.post(base, json={"name": 5, "source": "main"}), 400)
    _error(admin.post(base, json={"source": "main"}), 400)
    _error(admin.post(base, json={"name": "a b", "source": "main"}), 400)
    _error(admin.post(base, json={"name": "x" * 300, "source": "main"}), 400)
    _error(
        admin.post("/repositories", json={"name": "Bad_Name!", "storage_namespace": "local://a"}),
        400,
    )
    outside = admin.post(
        "/repositories", json={"name": "filens", "storage_namespace": "file:///etc"}
    )
    _error(outside, 400)
    escape = admin.post(
        "/repositories", json={"name": "escape", "storage_namespace": "local://../x"}
    )
    _error(escape, 400)
    _error(admin.get(base, params={"amount": "many"}), 400)
    _error(admin.get(f"/repositories/{name}/refs/main/diff/main", params={"type": "x"}), 400)
    # nothing was created by any of these
    ids = [b["id"] for b in admin.get(base).json()["results"]]
    assert ids == ["main"]


def test_oversized_body_is_413_and_changes_nothing(
    admin: httpx.Client, server: ServerProcess
) -> None:
    name = make_repo(admin)
    huge = b'{"name": "big", "source": "main", "pad": "' + b"x" * (65 * 2**20) + b'"}'
    r = admin.post(
        f"/repositories/{name}/branches", content=huge, headers={"content-type": "application/json"}
    )
    _error(r, 413)
    ids = [b["id"] for b in admin.get(f"/repositories/{name}/branches").json()["results"]]
    assert ids == ["main"]


def test_unimplemented_lakefs_routes_answer_501_not_500(admin: httpx.Client) -> None:
    _error(admin.get("/auth/groups"), 501)
    _error(admin.get("/auth/policies"), 501)
    _error(admin.get("/repositories/x/gc/rules"), 501)
    _error(admin.put("/config"), 405)
    r = httpx.get(str(admin.base_url).removesuffix("/api/v1/") + "/nothing-here")
    _error(r, 404)


def test_request_id_is_echoed(admin: httpx.Client) -> None:
    r = admin.get("/config", headers={"x-request-id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    assert admin.get("/config").headers["x-request-id"]
