"""The web UI's object browser on a large prefix.

``python -m bench ui [--entries 100000] [--samples 20]`` (``./dev.sh bench ui``; needs
Debian's ``chromium``, which ``./dev.sh`` installs).

A real server process (embedded default under a fresh ``$LSMSTORE_HOME``) holding one
committed repository with ``--entries`` objects under one prefix (raw values written
through the batch endpoint, 20,000 a request), then:

* **API page**: ``GET .../objects/ls`` of 100 entries under the prefix, folded on
  ``/``, at its start, its middle and its end (``after``): the median of ``--samples``;
* **browser page**: headless chromium (playwright) opens the objects page at ten
  points of the prefix (``after`` in the address) and waits until the first row is
  the one expected: navigation, the page's API calls (the ref lists, one listing
  page) and rendering; median and max.

Prints a Markdown table, with nproc and the load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from lsmstore.testing.server_process import ServerProcess, start_server

BATCH = 20_000


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench ui")
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--samples", type=int, default=20)
    args = p.parse_args(argv)
    n = args.entries
    chromium = shutil.which("chromium")
    if chromium is None:
        print("bench ui: chromium is missing (apt-get install chromium)")
        return 1
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        srv = start_server(Path(tmp) / "home")
        try:
            rows = _measure(srv, chromium, n, args.samples)
        finally:
            srv.stop()
    print(f"\n{n} entries under one prefix; nproc {os.cpu_count()}, "
          f"load {load0:.1f} → {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| measure | median | max |\n|---|---|---|")
    for name, values in rows:
        print(f"| {name} | {statistics.median(values) * 1000:.1f} ms "
              f"| {max(values) * 1000:.1f} ms |")  # fmt: skip
    return 0


def _measure(
    srv: ServerProcess, chromium: str, n: int, samples: int
) -> list[tuple[str, list[float]]]:
    out: list[tuple[str, list[float]]] = []
    with httpx.Client(base_url=srv.api, auth=srv.admin, timeout=300) as api:
        r = api.post("/repositories", json={"name": "big", "storage_namespace": "local://big"})
        r.raise_for_status()
        one = base64.b64encode(b"x").decode()
        for start in range(0, n, BATCH):
            batch = [["kv", f"many/f{i:09d}", one] for i in range(start, min(n, start + BATCH))]
            api.post("/lsm/repositories/big/branches/main/batch", json=batch).raise_for_status()
        api.post(
            "/repositories/big/branches/main/commits", json={"message": "m"}
        ).raise_for_status()
        for label, after in (("start", ""), ("middle", f"many/f{n // 2:09d}"),
                             ("end", f"many/f{max(0, n - 150):09d}")):  # fmt: skip
            times = []
            for _ in range(samples):
                t = time.perf_counter()
                api.get("/repositories/big/refs/main/objects/ls", params={
                    "prefix": "many/", "delimiter": "/", "amount": 100, "after": after,
                    "user_metadata": "false"}).raise_for_status()  # fmt: skip
                times.append(time.perf_counter() - t)
            out.append((f"API page of 100, {label}", times))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(srv.url + "/")
            page.get_by_label("Access key id").fill(srv.admin[0])
            page.get_by_label("Secret access key").fill(srv.admin[1])
            page.get_by_role("button", name="Log in").click()
            page.get_by_role("heading", name="Repositories").wait_for()
            times = []
            for i in range(10):
                after = f"many/f{i * n // 10:09d}"
                first = f"f{i * n // 10 + 1:09d}"
                t = time.perf_counter()
                page.goto(f"{srv.url}/#/r/big/objects?ref=main&prefix=many/&after={after}")
                page.wait_for_function(
                    "(want) => document.querySelector('tbody tr td')?.textContent === want",
                    arg=first,
                )
                times.append(time.perf_counter() - t)
            out.append(("browser objects page (100 rows), 10 points", times))
        finally:
            browser.close()
    return out
