"""The web UI in a real browser: Debian's headless chromium driven by playwright,
against a real ``lsmstore serve`` process.

One admin walks the whole flow (log in, create a repository, upload two files, commit,
branch, change a file on the branch, compare, merge, see the log graph, preview a
Parquet file); a reader key is offered no write action, and a write forged with its
token is refused by the API.  Each page's screenshot goes to ``test-artifacts/ui/``
(ignored by git, kept by CI); pages must log no console error.
"""

from __future__ import annotations

import base64
import io
import shutil
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from playwright.sync_api import Browser, Route, expect, sync_playwright

from lsmstore.testing.server_process import ServerProcess

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "ui"
REPO = "ui-demo"


def chromium() -> str:
    """Debian's chromium (``./dev.sh test`` installs it): never a downloaded browser."""
    path = shutil.which("chromium")
    assert path is not None, "chromium is not installed: ./dev.sh test installs it (apt)"
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


class Session:
    """A browser page that records console errors and failed page scripts."""

    def __init__(self, browser: Browser, server: ServerProcess) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 860},
                                           accept_downloads=True)  # fmt: skip
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.url = server.url
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        # Nothing but the server itself: a request elsewhere (a CDN, a font) is refused
        # and counted as an error.
        self.context.route("**/*", self._only_server)

    def _only_server(self, route: Route) -> None:
        url = route.request.url
        if url.startswith(self.url + "/") or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            self.errors.append(f"request outside the server: {url}")
            route.abort()

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    def clean(self, what: str) -> None:
        assert self.errors == [], f"console errors on {what}: {self.errors}"

    def login(self, key: tuple[str, str]) -> None:
        page = self.page
        page.goto(self.url + "/")
        page.get_by_label("Access key id").fill(key[0])
        page.get_by_label("Secret access key").fill(key[1])
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Repositories")).to_be_visible()

    def close(self) -> None:
        self.context.close()


def parquet_bytes() -> bytes:
    table = pa.table({"id": list(range(1, 1001)), "name": [f"row-{i}" for i in range(1, 1001)]})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=250)
    return buf.getvalue()


def png(width: int, height: int) -> bytes:
    """A grey RGB PNG of the given size."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\0" + b"\x80" * (3 * width) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))  # fmt: skip


def files(*items: tuple[str, str, bytes]) -> list[Any]:
    return [{"name": n, "mimeType": t, "buffer": b} for n, t, b in items]


def test_whole_flow(server: ServerProcess, browser: Browser) -> None:
    s = Session(browser, server)
    page = s.page
    try:
        page.goto(server.url + "/")
        expect(page.get_by_role("heading", name="Log in to lsmstore")).to_be_visible()
        s.shot("01-login")
        s.login(server.admin)
        expect(page.locator(".role")).to_have_text("admin")

        # Create a repository (the API's namespace rules: local://).
        page.get_by_role("button", name="Create repository").click()
        dlg = page.get_by_role("dialog")
        dlg.get_by_label("Name", exact=True).fill(REPO)
        dlg.get_by_label("Storage namespace").fill(f"local://{REPO}")
        dlg.get_by_role("button", name="Create").click()
        expect(page.get_by_role("heading", name="Objects")).to_be_visible()

        # Upload two files at once.
        page.get_by_label("choose files:").set_input_files(files(
            ("people.csv", "text/csv", b"name,age\nada,36\nalan,41\n"),
            ("data.parquet", "application/octet-stream", parquet_bytes()),
        ))  # fmt: skip
        expect(page.get_by_text("2 file(s) uploaded.")).to_be_visible()
        expect(page.get_by_role("link", name="people.csv")).to_be_visible()
        expect(page.get_by_role("link", name="data.parquet")).to_be_visible()
        s.shot("02-objects")
        s.clean("the objects page")

        # Commit them, with metadata.
        page.get_by_role("link", name="Uncommitted changes").click()
        expect(page.locator("tr.added")).to_have_count(2)
        s.shot("03-changes")
        page.get_by_role("button", name="Commit changes").click()
        dlg = page.get_by_role("dialog")
        dlg.get_by_label("Message").fill("first data")
        dlg.get_by_label("Metadata key 1").fill("source")
        dlg.get_by_label("Metadata value 1").fill("browser")
        dlg.get_by_role("button", name="Commit").click()
        expect(page.get_by_role("heading", name="first data")).to_be_visible()
        commit_id = page.locator("dl.props dd").first.inner_text()
        expect(page.locator("dl.props dd dl")).to_contain_text("browser")
        expect(page.locator("tr.added")).to_have_count(2)
        expect(page.locator("main")).not_to_contain_text("null")  # no empty part printed
        s.shot("04-commit")
        s.clean("the commit page")

        # A branch, and a changed file on it, committed there.
        page.get_by_role("link", name="Branches").click()
        page.get_by_role("button", name="Create branch").click()
        dlg = page.get_by_role("dialog")
        dlg.get_by_label("Name", exact=True).fill("dev")
        dlg.get_by_label("From ref").fill("main")
        dlg.get_by_role("button", name="Create").click()
        expect(page.get_by_role("link", name="dev", exact=True)).to_be_visible()
        s.shot("05-branches")
        page.get_by_role("link", name="dev", exact=True).click()
        expect(page.get_by_label("Ref", exact=True)).to_have_value("dev")
        # Dropped on the drop zone this time (a drag from the desktop carries Files).
        page.evaluate(
            """() => {
                const dt = new DataTransfer();
                dt.items.add(new File(["name,age\\nada,37\\nalan,41\\ngrace,85\\n"],
                                      "people.csv", {type: "text/csv"}));
                const zone = document.querySelector(".drop");
                for (const type of ["dragenter", "dragover", "drop"]) {
                    zone.dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true,
                                                            cancelable: true}));
                }
            }"""
        )
        expect(page.get_by_text("1 file(s) uploaded.")).to_be_visible()
        page.get_by_role("link", name="Uncommitted changes").click()
        expect(page.locator("tr.changed")).to_have_count(1)
        page.get_by_role("button", name="Commit changes").click()
        dlg = page.get_by_role("dialog")
        dlg.get_by_label("Message").fill("more people")
        dlg.get_by_role("button", name="Commit").click()
        expect(page.get_by_role("heading", name="more people")).to_be_visible()

        # Compare dev with main, then merge it.
        page.get_by_role("link", name="Compare", exact=True).click()
        expect(page.get_by_label("Base")).to_have_value("main")
        expect(page.get_by_label("Compared")).to_have_value("dev")
        expect(page.locator("tr.changed")).to_have_count(1)
        expect(page.locator("tr.changed")).to_contain_text("people.csv")
        s.shot("06-compare")
        s.clean("the compare page")
        page.get_by_role("button", name="Merge dev into main").click()
        dlg = page.get_by_role("dialog")
        dlg.get_by_label("Strategy").select_option("source-wins")
        dlg.get_by_label("Message").fill("merge dev")
        dlg.get_by_role("button", name="Merge").click()

        # The log of main: the merge with its two parents, drawn as a graph.
        expect(page.get_by_role("heading", name="Commits of main")).to_be_visible()
        expect(page).to_have_title("Commits of main · lsmstore")
        # The skip link moves the focus and stays on the page.
        page.get_by_role("link", name="Skip to content").focus()
        page.keyboard.press("Enter")
        expect(page.locator("main")).to_be_focused()
        expect(page.get_by_role("heading", name="Commits of main")).to_be_visible()
        expect(page.get_by_role("link", name="merge dev")).to_be_visible()
        expect(page.locator(".graphlog li")).to_have_count(4)  # merge, 2 commits, initial
        expect(page.locator(".graphlog svg circle")).to_have_count(4)
        lanes = {page.locator(".graphlog svg circle").nth(i).get_attribute("cx") for i in range(4)}
        assert len(lanes) == 2, f"the merged branch has its own lane: {lanes}"
        s.shot("07-log")
        s.clean("the log page")

        # Preview the Parquet file on main.
        page.get_by_role("link", name="Objects").click()
        page.get_by_role("link", name="data.parquet").click()
        expect(page.get_by_text("Parquet: 1000 rows in 4 row group(s).")).to_be_visible()
        expect(page.get_by_role("cell", name="row-1", exact=True)).to_be_visible()
        expect(page.locator(".tablewrap tbody tr")).to_have_count(50)
        s.shot("08-parquet")
        page.get_by_role("link", name="(root)").click()
        page.get_by_role("link", name="people.csv").click()
        expect(page.get_by_role("cell", name="grace")).to_be_visible()
        with page.expect_download() as got:
            page.get_by_role("button", name="Download").click()
        assert Path(got.value.path()).read_bytes() == b"name,age\nada,37\nalan,41\ngrace,85\n"
        s.shot("09-object")

        # From a commit's objects, the branch-only tabs show the default branch.
        page.goto(f"{server.url}/#/r/{REPO}/objects?ref={commit_id}")
        page.get_by_role("link", name="Uncommitted changes").click()
        expect(page.get_by_role("heading", name="Uncommitted changes on main")).to_be_visible()
        page.get_by_role("link", name="Staging").click()
        expect(page.get_by_text("L1 files")).to_be_visible()
        expect(page.locator(".stat .v").first).to_have_text("0")
        with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as api:
            for i in range(3):  # three acknowledged writes: three L1 files
                r = api.post(f"/repositories/{REPO}/branches/main/objects",
                             params={"path": f"live/{i}"}, content=b"x")  # fmt: skip
                assert r.status_code == 201, r.text
        expect(page.locator(".stat .v").first).to_have_text("3")  # the page polls
        # The chart keeps two minutes: the three flushes raise its line off the baseline.
        page.wait_for_function(
            """() => new Set(document.querySelector("svg.chart polyline")
                    .getAttribute("points").split(" ").map((p) => p.split(",")[1])).size > 1"""
        )
        s.shot("10-staging")
        s.clean("the object and staging pages")

        page.get_by_role("button", name="Log out").click()
        expect(page.get_by_role("heading", name="Log in to lsmstore")).to_be_visible()
    finally:
        s.close()


def test_reader_is_offered_no_write(server: ServerProcess, browser: Browser) -> None:
    admin = httpx.Client(base_url=server.api, auth=server.admin, timeout=60)
    name = "ui-reader"
    r = admin.post("/repositories", json={"name": name, "storage_namespace": f"local://{name}"})
    assert r.status_code == 201, r.text
    r = admin.post(f"/repositories/{name}/branches/main/objects", params={"path": "a.txt"},
                   content=b"hello")  # fmt: skip
    assert r.status_code == 201, r.text
    reader = server.create_key("reader")
    s = Session(browser, server)
    page = s.page
    try:
        s.login(reader)
        expect(page.locator(".role")).to_have_text("reader")
        expect(page.get_by_role("link", name=name)).to_be_visible()
        expect(page.get_by_role("button", name="Create repository")).to_have_count(0)
        expect(page.get_by_role("button", name="Delete")).to_have_count(0)
        page.get_by_role("link", name=name).click()
        expect(page.get_by_role("link", name="a.txt")).to_be_visible()
        expect(page.get_by_text("Read-only key")).to_be_visible()
        expect(page.get_by_label("choose files:")).to_have_count(0)
        expect(page.get_by_role("button", name="Delete")).to_have_count(0)
        s.shot("11-reader-objects")
        page.get_by_role("link", name="Uncommitted changes").click()
        expect(page.locator("tr.added")).to_have_count(1)
        expect(page.get_by_role("button", name="Commit changes")).to_have_count(0)
        expect(page.get_by_role("button", name="Reset branch")).to_have_count(0)
        page.get_by_role("link", name="Branches").click()
        expect(page.get_by_role("button", name="Create branch")).to_have_count(0)
        page.get_by_role("link", name="Compare", exact=True).click()
        expect(page.get_by_role("button", name="Merge")).to_have_count(0)
        s.clean("the reader's pages")

        # A write forged from the page with the reader's own token: the API refuses it.
        status = page.evaluate(
            """async (repo) => {
                const s = JSON.parse(sessionStorage.getItem("lsmstore.session"));
                const r = await fetch(`/api/v1/repositories/${repo}/branches/main/commits`, {
                    method: "POST", body: JSON.stringify({message: "forged"}),
                    headers: {"Content-Type": "application/json",
                              "Authorization": `Bearer ${s.token}`}});
                return r.status;
            }""",
            name,
        )
        assert status == 403
        token = httpx.post(
            server.api + "/auth/login",
            json={"access_key_id": reader[0], "secret_access_key": reader[1]},
        ).json()["token"]
        r = httpx.post(f"{server.api}/repositories/{name}/branches/main/objects",
                       params={"path": "b.txt"}, content=b"x",
                       headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        assert r.status_code == 403, r.text
        r = admin.get(f"/repositories/{name}/branches/main/diff")
        assert [d["path"] for d in r.json()["results"]] == ["a.txt"]  # nothing forged landed
    finally:
        s.close()

    # A writer limited to one repository sees only it, and may write there.
    assert admin.post("/repositories", json={"name": "ui-hidden",
                      "storage_namespace": "local://ui-hidden"}).status_code == 201  # fmt: skip
    writer = server.create_key("writer", (name,))
    s = Session(browser, server)
    page = s.page
    try:
        s.login(writer)
        expect(page.locator(".role")).to_have_text("writer")
        expect(page.locator("tbody tr")).to_have_count(1)
        expect(page.get_by_role("link", name=name)).to_be_visible()
        page.get_by_role("link", name=name).click()
        expect(page.get_by_label("choose files:")).to_have_count(1)
        page.goto(f"{server.url}/#/r/ui-hidden/objects")
        expect(page.get_by_role("alert")).to_contain_text("may not read")
    finally:
        s.close()
        admin.close()


def _api_setup(server: ServerProcess, repo: str, entries: int) -> None:
    """``repo`` with ``entries`` objects under ``many/`` and ``shared.txt`` changed on both
    ``main`` and ``side`` since they diverged (a merge conflict)."""
    with httpx.Client(base_url=server.api, auth=server.admin, timeout=120) as api:
        r = api.post("/repositories", json={"name": repo, "storage_namespace": f"local://{repo}"})
        assert r.status_code == 201, r.text
        batch = [["put", f"many/f{i:05d}.txt", base64.b64encode(b"x").decode()]
                 for i in range(entries)]  # fmt: skip
        batch.append(["put", "shared.txt", base64.b64encode(b"base").decode()])
        r = api.post(f"/lsm/repositories/{repo}/branches/main/batch", json=batch)
        assert r.status_code == 200, r.text
        assert api.post(f"/repositories/{repo}/branches/main/commits",
                        json={"message": "many"}).status_code == 201  # fmt: skip
        r = api.post(f"/repositories/{repo}/branches", json={"name": "side", "source": "main"})
        assert r.status_code == 201, r.text
        for branch in ("main", "side"):
            r = api.post(f"/repositories/{repo}/branches/{branch}/objects",
                         params={"path": "shared.txt"}, content=branch.encode())  # fmt: skip
            assert r.status_code == 201, r.text
            r = api.post(f"/repositories/{repo}/branches/{branch}/commits",
                         json={"message": f"shared on {branch}"})  # fmt: skip
            assert r.status_code == 201, r.text


def test_pages_conflicts_keyboard_and_confirmations(
    server: ServerProcess, browser: Browser
) -> None:
    repo = "ui-more"
    entries = 2500
    _api_setup(server, repo, entries)
    s = Session(browser, server)
    page = s.page
    try:
        s.login(server.admin)

        # Thousands of entries under one prefix: one page of 100 at a time, to the end.
        page.goto(f"{server.url}/#/r/{repo}/objects?ref=main&prefix=many/")
        rows = page.locator("tbody tr")
        seen: list[str] = []
        while True:
            expect(rows).not_to_have_count(0)
            names = rows.locator("td:first-child").all_inner_texts()
            assert len(names) <= 100
            assert not seen or names[0] > seen[-1]
            seen.extend(names)
            more = page.get_by_role("link", name="Next page")
            if more.count() == 0:
                break
            first = names[0]
            more.click()
            expect(rows.first).not_to_have_text(first)
        assert seen == [f"f{i:05d}.txt" for i in range(entries)]
        page.go_back()  # the previous page of the listing
        expect(rows.first.locator("td").first).to_have_text(f"f{entries - 200:05d}.txt")
        s.clean("the paged objects")

        # A merge without a strategy stops on the conflict and lists the path.
        page.goto(f"{server.url}/#/r/{repo}/compare?base=main&head=side")
        page.get_by_role("button", name="Merge side into main").click()
        page.get_by_role("dialog").get_by_role("button", name="Merge").click()
        alert = page.get_by_role("alert")
        expect(alert).to_contain_text("Merge stopped")
        expect(page.get_by_role("heading", name="Changed on both sides (1)")).to_be_visible()
        conflicts = page.get_by_role("region", name="Merge conflicts")
        expect(conflicts.get_by_role("cell", name="shared.txt")).to_be_visible()
        s.shot("12-conflict")
        s.errors.clear()  # the 409 of the refused merge is logged by the browser

        # Keyboard only: open the dialog, fill it, confirm; Escape cancels.
        page.goto(f"{server.url}/#/r/{repo}/tags")
        page.get_by_role("button", name="Create tag").focus()
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.name") == "name"
        page.keyboard.type("v1")
        page.keyboard.press("Tab")
        page.keyboard.press("Control+A")
        page.keyboard.type("side")
        page.keyboard.press("Enter")
        expect(page.get_by_role("link", name="v1", exact=True)).to_be_visible()
        delete = page.get_by_role("button", name="Delete tag v1")
        delete.focus()
        page.keyboard.press("Enter")
        expect(page.get_by_role("dialog")).to_be_visible()
        page.keyboard.press("Escape")
        expect(page.get_by_role("dialog")).to_have_count(0)
        expect(page.get_by_role("link", name="v1", exact=True)).to_be_visible()
        delete.click()
        page.get_by_role("dialog").get_by_role("button", name="Delete").click()
        expect(page.get_by_role("link", name="v1", exact=True)).to_have_count(0)
        s.shot("13-tags")

        # Revert the side branch's last commit onto it.
        page.goto(f"{server.url}/#/r/{repo}/commits?ref=side")
        page.get_by_role("link", name="shared on side").click()
        page.get_by_role("button", name="Revert…").click()
        dlg = page.get_by_role("dialog")
        dlg.get_by_label("Branch").select_option("side")
        dlg.get_by_role("button", name="Revert").click()
        expect(page.get_by_role("heading", name="Commits of side")).to_be_visible()
        expect(page.locator(".graphlog li").first).to_contain_text("Revert")

        # Reset discards the staged changes, after a confirmation.
        with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as api:
            for path in ("scratch.txt", "scratch2.txt", "shared.txt"):
                r = api.post(f"/repositories/{repo}/branches/main/objects",
                             params={"path": path}, content=b"tmp")  # fmt: skip
                assert r.status_code == 201, r.text
        page.goto(f"{server.url}/#/r/{repo}/changes?branch=main")
        expect(page.locator("tr.added")).to_have_count(2)
        expect(page.locator("tr.changed")).to_have_count(1)
        page.get_by_role("button", name="Discard the change of shared.txt").click()
        expect(page.locator("tr.changed")).to_have_count(0)
        expect(page.locator("tr.added")).to_have_count(2)
        page.get_by_role("button", name="Reset branch").click()
        page.get_by_role("dialog").get_by_role("button", name="Discard changes").click()
        expect(page.get_by_text("No uncommitted changes.")).to_be_visible()

        # An image is shown from its bytes.
        with httpx.Client(base_url=server.api, auth=server.admin, timeout=60) as api:
            r = api.post(f"/repositories/{repo}/branches/main/objects", params={"path": "pic.png"},
                         content=png(7, 5), headers={"Content-Type": "image/png"})  # fmt: skip
            assert r.status_code == 201, r.text
        page.goto(f"{server.url}/#/r/{repo}/object?ref=main&path=pic.png")
        img = page.get_by_role("img", name="Image pic.png")
        expect(img).to_be_visible()
        page.wait_for_function("() => document.querySelector('img.preview').naturalWidth === 7")
        s.clean("the image preview")

        # Delete an object, then a branch.
        page.goto(f"{server.url}/#/r/{repo}/objects?ref=main")
        page.get_by_role("button", name="Delete shared.txt").click()
        page.get_by_role("dialog").get_by_role("button", name="Delete").click()
        expect(page.get_by_role("link", name="shared.txt")).to_have_count(0)
        page.get_by_role("link", name="Uncommitted changes").click()
        expect(page.locator("tr.removed")).to_contain_text("shared.txt")
        page.get_by_role("link", name="Branches").click()
        page.get_by_role("button", name="Delete branch side").click()
        page.get_by_role("dialog").get_by_role("button", name="Delete").click()
        expect(page.get_by_role("link", name="side", exact=True)).to_have_count(0)
        expect(page.get_by_role("button", name="Delete branch main")).to_have_count(0)

        # Deleting a repository asks for its name.
        page.goto(f"{server.url}/#/")
        page.get_by_role("button", name=f"Delete repository {repo}").click()
        dlg = page.get_by_role("dialog")
        dlg.get_by_label("Repository name").fill("wrong")
        dlg.get_by_role("button", name="Delete").click()
        expect(dlg.get_by_role("alert")).to_have_text("The name does not match.")
        dlg.get_by_label("Repository name").fill(repo)
        dlg.get_by_role("button", name="Delete").click()
        expect(page.get_by_role("link", name=repo, exact=True)).to_have_count(0)
        s.shot("14-repositories")
        s.clean("the repositories page")
    finally:
        s.close()


# Commit DAGs, newest first as the log lists them: (id, parents).
DAGS = {
    "linear": [("c", ["b"]), ("b", ["a"]), ("a", [])],
    "merge": [("m", ["d", "f"]), ("f", ["e"]), ("d", ["b"]), ("e", ["b"]), ("b", ["a"]),
              ("a", [])],
    "octopus": [("o", ["x", "y", "z"]), ("z", ["a"]), ("y", ["a"]), ("x", ["a"]), ("a", [])],
    "criss-cross": [("m2", ["p", "q"]), ("m1", ["q", "p"]), ("q", ["b"]), ("p", ["b"]),
                    ("b", [])],
    "cut": [("m", ["d", "gone"]), ("d", ["alsogone"])],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(DAGS))
def test_log_graph_lanes(server: ServerProcess, browser: Browser, name: str) -> None:
    """graph.js gives every commit a lane and never runs an edge through another
    commit's dot: between its two ends an edge's lane holds no other commit."""
    s = Session(browser, server)
    try:
        s.page.goto(server.url + "/")
        commits = [{"id": c, "parents": p} for c, p in DAGS[name]]
        g = s.page.evaluate(
            "async (commits) => (await import('/ui/graph.js')).layout(commits)", commits
        )
        lane = {n["row"]: n["lane"] for n in g["nodes"]}
        assert sorted(lane) == list(range(len(commits)))
        rows = {c["id"]: i for i, c in enumerate(commits)}
        want = {(rows[c["id"]], rows.get(p)) for c in commits for p in c["parents"]}
        assert {(e["from"], e["to"]) for e in g["edges"]} == want
        for e in g["edges"]:
            assert e["fromLane"] == lane[e["from"]]
            end = len(commits) if e["to"] is None else e["to"]
            if e["to"] is not None:
                assert e["toLane"] == lane[e["to"]]
            for r in range(e["from"] + 1, end):
                assert lane[r] != e["lane"], (name, e, r)
        assert g["width"] == 1 + max([*lane.values(), *(e["lane"] for e in g["edges"])])
        s.clean("the graph module")
    finally:
        s.close()
