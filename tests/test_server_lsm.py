"""The extensions under /api/v1/lsm: batch writes (msgpack and JSON), staging state,
reset, staging a prepared SST."""

from __future__ import annotations

import base64

import httpx
import msgpack
from helpers.server import make_repo


def _batch(admin: httpx.Client, repo: str, entries: list[object], fmt: str = "msgpack",
           branch: str = "main") -> httpx.Response:  # fmt: skip
    url = f"/lsm/repositories/{repo}/branches/{branch}/batch"
    if fmt == "msgpack":
        body = msgpack.packb(entries)
        return admin.post(url, content=body, headers={"content-type": "application/msgpack"})
    return admin.post(url, json=entries)


def _get(admin: httpx.Client, repo: str, path: str) -> httpx.Response:
    return admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": path})


def test_batch_puts_links_and_deletes_land_together(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    up = admin.post(f"/repositories/{repo}/branches/main/objects", params={"path": "src"},
                    content=b"linked data")  # fmt: skip
    stats = up.json()
    entries = [["put", f"p/{i}", f"value {i}".encode(), "text/plain", {"i": str(i)}]
               for i in range(500)]  # fmt: skip
    entries.append(["link", "l/one", stats["physical_address"], stats["size_bytes"],
                    stats["checksum"]])  # fmt: skip
    entries.append(["delete", "src"])
    r = _batch(admin, repo, entries)
    assert r.status_code == 200, r.text
    assert r.json() == {"entries": 502}
    assert _get(admin, repo, "p/7").content == b"value 7"
    assert admin.get(f"/repositories/{repo}/refs/main/objects/stat",
                     params={"path": "p/7"}).json()["metadata"] == {"i": "7"}  # fmt: skip
    assert _get(admin, repo, "l/one").content == b"linked data"
    assert _get(admin, repo, "src").status_code == 404
    state = admin.get(f"/lsm/repositories/{repo}/branches/main/staging").json()
    # the upload and the batch: one L1 file each (unless compaction already folded them)
    assert state["l1_files"] + state["l2_files"] >= 1 and state["branch"] == "main"
    j = _batch(admin, repo, [["put", "j", base64.b64encode(b"json").decode()]], fmt="json")
    assert j.status_code == 200 and _get(admin, repo, "j").content == b"json"


def test_a_bad_entry_stages_nothing(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    for bad in (
        [["put", "ok", b"x"], ["put", "", b"empty path"]],
        [["put", "ok", b"x"], ["link", "l", "s3://elsewhere/x", 1, "c"]],
        [["put", "ok", b"x"], ["frobnicate", "x"]],
        [["put", "ok", b"x"], ["delete"]],
        [["put", "ok", b"x"], ["link", "l", "a", "notanint", "c"]],
        [["put", "ok", b"x"], "notalist"],
    ):
        r = _batch(admin, repo, bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["message"].startswith("entry 1")
    for garbage in (b"\xc1\xc1", msgpack.packb({"not": "a list"})):
        r = admin.post(f"/lsm/repositories/{repo}/branches/main/batch", content=garbage,
                       headers={"content-type": "application/msgpack"})  # fmt: skip
        assert r.status_code == 400
    assert admin.get(f"/repositories/{repo}/refs/main/objects/ls").json()["results"] == []
    missing = _batch(admin, repo, [["put", "x", b"x"]], branch="nobranch")
    assert missing.status_code == 404


def test_reset_and_staging_state(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    assert _batch(admin, repo, [["put", f"k{i}", b"v"] for i in range(10)]).status_code == 200
    state = admin.get(f"/lsm/repositories/{repo}/branches/main/staging").json()
    assert state["l1_files"] + state["l2_files"] >= 1
    assert state["last_commit_id"] == state["commit_id"] and state["last_commit_date"] > 0
    r = admin.post(f"/lsm/repositories/{repo}/branches/main/reset")
    assert r.status_code == 204
    state = admin.get(f"/lsm/repositories/{repo}/branches/main/staging").json()
    assert state["l1"] == [] and state["l2"] == []
    assert admin.get(f"/repositories/{repo}/refs/main/objects/ls").json()["results"] == []
    assert admin.get(f"/repositories/{repo}/branches/main/diff").json()["results"] == []
    assert admin.post(f"/lsm/repositories/{repo}/branches/nob/reset").status_code == 404


def test_stage_sst_rejects_garbage_and_stages_nothing(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    r = admin.post(f"/lsm/repositories/{repo}/branches/main/sst", content=b"not an sst",
                   headers={"content-type": "application/octet-stream"})  # fmt: skip
    assert r.status_code == 400 and r.json()["message"]
    state = admin.get(f"/lsm/repositories/{repo}/branches/main/staging").json()
    assert state["l1"] == []


def test_stage_sst_makes_all_its_objects_visible(admin: httpx.Client) -> None:
    from lsmstore.graveler.record import Record
    from lsmstore.graveler.sst_writer import write_sst
    from lsmstore.objects import AddressType, ObjectEntry
    from lsmstore.objects.entry import encode_value

    repo = make_repo(admin)
    up = admin.post(f"/repositories/{repo}/branches/main/objects", params={"path": "src"},
                    content=b"shared data").json()  # fmt: skip
    address = "data/" + up["physical_address"].rsplit("/data/", 1)[1]
    records = []
    for i in range(100):
        entry = ObjectEntry(address, AddressType.RELATIVE, 11, up["checksum"], 1_700_000_000, 0,
                            "text/plain", {"n": str(i)})  # fmt: skip
        identity, value = encode_value(entry)
        records.append(Record(f"sst/{i:03d}".encode(), identity, value))
    r = admin.post(f"/lsm/repositories/{repo}/branches/main/sst", content=write_sst(records),
                   headers={"content-type": "application/octet-stream"})  # fmt: skip
    assert r.status_code == 201, r.text
    assert isinstance(r.json()["file_id"], str) and r.json()["file_id"]
    assert _get(admin, repo, "sst/042").content == b"shared data"
    listed = admin.get(f"/repositories/{repo}/refs/main/objects/ls",
                       params={"prefix": "sst/", "amount": 1000}).json()  # fmt: skip
    assert len(listed["results"]) == 100


def test_batch_records_replaced_staged_data_as_garbage_candidates(
    admin: httpx.Client, server: object
) -> None:
    import json

    from lsmstore.objects.garbage import candidates_prefix

    repo = make_repo(admin)
    assert _batch(admin, repo, [["put", "a", b"first"], ["put", "b", b"kept"]]).status_code == 200
    first = admin.get(f"/repositories/{repo}/refs/main/objects/stat",
                      params={"path": "a"}).json()["physical_address"]  # fmt: skip
    assert _batch(admin, repo, [["put", "a", b"second"], ["delete", "b"]]).status_code == 200
    home = server.home  # type: ignore[attr-defined]
    gc_dir = home / "data" / repo / candidates_prefix("main")
    records = [json.loads(p.read_bytes()) for p in gc_dir.rglob("*.candidates")]
    replaced = {o["path"]: o["address"] for r in records for o in r["objects"]}
    assert set(replaced) == {"a", "b"}
    assert first.endswith(replaced["a"])
