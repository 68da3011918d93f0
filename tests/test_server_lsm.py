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
    assert r.status_code == 200  # the staging state after the reset
    assert r.json()["l1"] == [] and r.json()["l2"] == []
    assert r.json()["commit_id"] == state["commit_id"]
    state = admin.get(f"/lsm/repositories/{repo}/branches/main/staging").json()
    assert state["l1"] == [] and state["l2"] == []
    assert admin.get(f"/repositories/{repo}/refs/main/objects/ls").json()["results"] == []
    assert admin.get(f"/repositories/{repo}/branches/main/diff").json()["results"] == []
    r = admin.post(f"/lsm/repositories/{repo}/branches/nob/reset")
    assert r.status_code == 404 and r.json()["type"] == "RefNotFoundError"


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

    from lsmstore.gc.data import candidates_prefix

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


# --- raw key/value: kv entries and the reads under /lsm/.../kv ------------------------------


def _kv(admin: httpx.Client, repo: str, what: str, ref: str = "main",
        **params: object) -> httpx.Response:  # fmt: skip
    return admin.get(f"/lsm/repositories/{repo}/refs/{ref}/kv{what}", params=params)


def _b64(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode().rstrip("=")


def test_kv_entries_are_raw_records_read_back_raw(admin: httpx.Client) -> None:
    import hashlib

    repo = make_repo(admin)
    entries: list[object] = [["kv", f"k/{i:02d}", f"value {i}".encode()] for i in range(20)]
    entries += [["kv", b"\xffbin", b"binary key", b"my-identity"], ["kv", "gone", b"x"],
                ["kvdelete", "gone"]]  # fmt: skip
    assert _batch(admin, repo, entries).json() == {"entries": 23}
    got = _kv(admin, repo, "", key="k/07")
    assert got.status_code == 200 and got.content == b"value 7"
    assert got.headers["etag"] == f'"{hashlib.sha256(b"value 7").hexdigest()}"'
    assert got.headers["x-lsm-staged"] == "true"
    st = _kv(admin, repo, "/stat", key=_b64(b"\xffbin"), encoding="base64").json()
    assert st == {"key": _b64(b"\xffbin"), "size_bytes": 10,
                  "identity": b"my-identity".hex(), "staged": True}  # fmt: skip
    assert _kv(admin, repo, "", key="gone").status_code == 404
    assert "not found" in _kv(admin, repo, "/stat", key="nope").json()["message"]
    assert _kv(admin, repo, "", key="k/01", ref="nobranch").status_code == 404
    page = _kv(admin, repo, "/ls", prefix="k/", after="k/03", amount=2).json()
    assert [e["key"] for e in page["results"]] == ["k/04", "k/05"]
    assert page["pagination"] == {"has_more": True, "next_offset": "k/05", "results": 2,
                                  "max_per_page": 1000}  # fmt: skip
    tops = _kv(admin, repo, "/ls", delimiter=_b64(b"/"), encoding="base64").json()["results"]
    assert [(base64.urlsafe_b64decode(e["key"] + "=="), e["common_prefix"]) for e in tops] == [
        (b"k/", True), (b"\xffbin", False),
    ]  # fmt: skip
    # text mode cannot show a key that is not UTF-8: a clear 400, never a lossy key
    assert _kv(admin, repo, "/ls").status_code == 400
    assert _kv(admin, repo, "", key="!!", encoding="base64").status_code == 400
    assert _kv(admin, repo, "", key="k", encoding="hex").status_code == 400
    # JSON bodies: keys text, values and identities base64
    j = _batch(admin, repo, [["kv", "j", base64.b64encode(b"json").decode(),
                              base64.b64encode(b"id").decode()]], fmt="json")  # fmt: skip
    assert j.status_code == 200, j.text
    assert _kv(admin, repo, "/stat", key="j").json()["identity"] == b"id".hex()


def test_a_bad_kv_entry_stages_nothing(admin: httpx.Client) -> None:
    repo = make_repo(admin)
    for bad in (
        [["kv", "ok", b"x"], ["kv", "", b"empty key"]],
        [["kv", "ok", b"x"], ["kv", b"k" * 1025, b"long key"]],
        [["kv", "ok", b"x"], ["kv", "k", "text, not bytes"]],
        [["kv", "ok", b"x"], ["kv", "k", b"v", b""]],
        [["kv", "ok", b"x"], ["kv", "k", b"v", b"i" * 256]],
        [["kv", "ok", b"x"], ["kv", "k"]],
        [["kv", "ok", b"x"], ["kvdelete", 7]],
    ):
        r = _batch(admin, repo, bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["message"].startswith("entry 1")
    big = _batch(admin, repo, [["kv", "ok", b"x"], ["kv", "big", b"\0" * (16 * 2**20 + 1)]])
    assert big.status_code == 413 and big.json()["message"].startswith("entry 1")
    bad_json = _batch(admin, repo, [["kv", "k", "not base64!"]], fmt="json")
    assert bad_json.status_code == 400
    ok = base64.b64encode(b"v").decode()
    for bad in (  # text that is no base64: not ASCII, or not the alphabet
        [["kv", "ok", ok], ["kv", "k", "dmFsdWU\u00e9"]],
        [["kv", "ok", ok], ["kv", "k", ok, "aWQ\u00e9"]],
        [["kv", "ok", ok], ["put", "p", "ZGF0YQ\u00e9"]],
        [["kv", "ok", ok], ["kv", "k", "dmFs dWU="]],
    ):
        r = _batch(admin, repo, bad, fmt="json")
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["message"].startswith("entry 1") and "base64" in r.json()["message"]
    assert _kv(admin, repo, "/ls").json()["results"] == []


def test_raw_values_are_inline_objects_on_the_lakefs_routes(admin: httpx.Client) -> None:
    """A branch holding raw records (kv entries, a staged SST of raw records) lists,
    stats and reads through the lakeFS object routes: never a 500."""
    import hashlib

    from lsmstore.graveler.record import Record
    from lsmstore.graveler.sst_writer import write_sst

    repo = make_repo(admin)
    assert _batch(admin, repo, [["kv", "raw/a", b"\xff\xfe raw"], ["kv", b"\xff", b"x"],
                                ["put", "obj", b"object data"]]).status_code == 200  # fmt: skip
    sst = write_sst([Record(b"raw/s", hashlib.sha256(b"from sst").digest(), b"from sst")])
    r = admin.post(f"/lsm/repositories/{repo}/branches/main/sst", content=sst,
                   headers={"content-type": "application/octet-stream"})  # fmt: skip
    assert r.status_code == 201, r.text
    listed = admin.get(f"/repositories/{repo}/refs/main/objects/ls").json()["results"]
    assert [o["path"] for o in listed] == ["obj", "raw/a", "raw/s"]
    raw = listed[1]
    assert (raw["size_bytes"], raw["checksum"], raw["physical_address"]) == (
        6, hashlib.sha256(b"\xff\xfe raw").hexdigest(), "",
    )  # fmt: skip
    assert _get(admin, repo, "raw/s").content == b"from sst"
    ranged = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "raw/a"},
                       headers={"Range": "bytes=2-"})  # fmt: skip
    assert ranged.status_code == 206 and ranged.content == b" raw"
    stat = admin.get(f"/repositories/{repo}/refs/main/objects/stat", params={"path": "raw/a"})
    assert stat.status_code == 200 and stat.json()["size_bytes"] == 6
    # and the other way round: an object's record read raw is its entry
    entry = _kv(admin, repo, "/stat", key="obj").json()
    assert entry["size_bytes"] == len(_kv(admin, repo, "", key="obj").content) > 0


def test_a_reader_reads_raw_values_but_cannot_write_them(server: object) -> None:
    srv = server  # a ServerProcess
    key = srv.create_key("reader")  # type: ignore[attr-defined]
    with httpx.Client(base_url=srv.api, auth=srv.admin, timeout=60) as admin:  # type: ignore[attr-defined]
        repo = make_repo(admin)
        assert _batch(admin, repo, [["kv", "k", b"v"]]).status_code == 200
    with httpx.Client(base_url=srv.api, auth=key, timeout=60) as reader:  # type: ignore[attr-defined]
        assert _kv(reader, repo, "", key="k").content == b"v"
        assert _kv(reader, repo, "/stat", key="k").status_code == 200
        assert len(_kv(reader, repo, "/ls").json()["results"]) == 1
        assert _batch(reader, repo, [["kv", "k", b"w"]]).status_code == 403
        assert _kv(reader, repo, "", key="k").content == b"v"
    with httpx.Client(base_url=srv.api, timeout=60) as anonymous:  # type: ignore[attr-defined]
        assert _kv(anonymous, repo, "", key="k").status_code == 401


def test_a_forged_entry_cannot_read_outside_the_namespace(admin: httpx.Client) -> None:
    """A raw value (a kv entry, or a staged SST) may hold any bytes, a ``catalog.Entry``
    too: one whose address lies outside the namespace and the allowed external prefixes
    (here: another repository's data) must not make the server read that place with its
    own credentials -- a key limited to one repository would read any."""
    from lsmstore.objects.entry import AddressType, ObjectEntry, encode_value

    other, repo = make_repo(admin), make_repo(admin)
    up = admin.post(f"/repositories/{other}/branches/main/objects", params={"path": "s"},
                    content=b"the other repository's secret")  # fmt: skip
    address = up.json()["physical_address"]
    ident, data = encode_value(ObjectEntry(address, AddressType.FULL, 29, "e", 1))
    assert _batch(admin, repo, [["kv", "forged", data, ident]]).status_code == 200
    got = _get(admin, repo, "forged")
    assert got.status_code == 400, got.text
    assert b"secret" not in got.content


def test_diffs_leave_out_raw_keys_that_are_not_paths(admin: httpx.Client) -> None:
    """kv entries may write keys that are not UTF-8; a lakeFS diff names paths, so such
    keys are left out (as object listings leave them out), never a 500."""
    repo = make_repo(admin)
    entries = [["kv", b"\xff\xfebin", b"v"], ["kv", b"a\xff/x", b"v"], ["kv", b"b/\xff", b"v"],
               ["kv", "ok", b"v"]]  # fmt: skip
    assert _batch(admin, repo, entries).status_code == 200
    for params in ({}, {"delimiter": "/"}):
        got = admin.get(f"/repositories/{repo}/branches/main/diff", params=params)
        assert got.status_code == 200, got.text
        paths = [r["path"] for r in got.json()["results"]]
        assert paths == (["b/", "ok"] if params else ["ok"])
    assert admin.post(f"/repositories/{repo}/branches/main/commits",
                      json={"message": "raw"}).status_code == 201  # fmt: skip
    assert admin.post(f"/repositories/{repo}/branches",
                      json={"name": "b2", "source": "main"}).status_code == 201  # fmt: skip
    assert _batch(admin, repo, [["kvdelete", b"\xff\xfebin"], ["kv", "new", b"n"]],
                  branch="b2").status_code == 200  # fmt: skip
    assert admin.post(f"/repositories/{repo}/branches/b2/commits",
                      json={"message": "more"}).status_code == 201  # fmt: skip
    got = admin.get(f"/repositories/{repo}/refs/main/diff/b2")
    assert got.status_code == 200, got.text
    assert [r["path"] for r in got.json()["results"]] == ["new"]


def test_batch_copy_if_none_match_and_typed_errors(admin: httpx.Client) -> None:
    """``copy`` entries; ``If-None-Match: *`` makes put and link entries create-only
    (412, nothing staged); a bad entry's error body names its type."""
    repo = make_repo(admin)
    assert _batch(admin, repo, [["put", "a", b"data"]]).status_code == 200
    r = _batch(admin, repo, [["copy", "a", "b"], ["copy", "a", "c", "main"]])
    assert r.status_code == 200 and r.json() == {"entries": 2}
    got = admin.get(f"/repositories/{repo}/refs/main/objects", params={"path": "c"})
    assert got.content == b"data"
    url = f"/lsm/repositories/{repo}/branches/main/batch"
    before = admin.get(f"/lsm/repositories/{repo}/branches/main/staging").json()
    body = msgpack.packb([["put", "new", b"1"], ["put", "b", b"2"]])
    r = admin.post(url, content=body, headers={"content-type": "application/msgpack",
                                               "if-none-match": "*"})  # fmt: skip
    assert r.status_code == 412 and r.json()["type"] == "ObjectExistsError"
    assert admin.get(f"/lsm/repositories/{repo}/branches/main/staging").json() == before
    r = _batch(admin, repo, [["put", "ok", b"1"], ["put", "", b"2"]])
    assert r.status_code == 400 and r.json()["type"] == "InvalidNameError"
    assert r.json()["message"].startswith("entry 1:")
    r = _batch(admin, repo, [["copy", "absent", "x"]])
    assert r.status_code == 404 and r.json()["type"] == "ObjectNotFoundError"


def test_branch_diff_pages_after_a_key(admin: httpx.Client) -> None:
    """Paging a branch's uncommitted diff with ``after`` (and ``prefix``) gives the
    pages of the whole diff: the diff starts at the page's first possible key."""
    repo = make_repo(admin)
    entries: list[object] = [["kv", f"d/{i:02d}", b"v"] for i in range(12)]
    entries += [["kv", "a", b"v"], ["kv", "z", b"v"]]
    assert _batch(admin, repo, entries).status_code == 200
    url = f"/repositories/{repo}/branches/main/diff"
    whole = [r["path"] for r in admin.get(url).json()["results"]]
    assert whole == ["a", *[f"d/{i:02d}" for i in range(12)], "z"]
    for prefix in ("", "d/", "d/1"):
        paged: list[str] = []
        after = ""
        while True:
            got = admin.get(url, params={"prefix": prefix, "after": after, "amount": 3})
            assert got.status_code == 200, got.text
            body = got.json()
            paged += [r["path"] for r in body["results"]]
            if not body["pagination"]["has_more"]:
                break
            after = body["pagination"]["next_offset"]
        assert paged == [p for p in whole if p.startswith(prefix)], prefix
