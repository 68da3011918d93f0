"""The blocking facade: the async API on a private loop, from plain threads."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import lsmstore
import lsmstore.sync
from tests.helpers.remote import lsm_server  # noqa: F401 - the fixture


def test_blocking_api_from_threads(tmp_path: Path) -> None:
    with lsmstore.sync.connect(home=str(tmp_path / "home"), batch_interval_ms=1) as store:
        repo = store.create_repository("syn", storage_namespace=(tmp_path / "ns").as_uri())
        assert repo.name == "syn" and [r.name for r in store.list_repositories()] == ["syn"]
        main = repo.branch("main")
        main.put("a/1", b"one")
        main.put_many([("a/2", b"two"), ("b/3", b"three")])
        assert main.get("a/1") == b"one" and main.exists("b/3")
        assert [e.path for e in main.list(prefix="a/")] == ["a/1", "a/2"]
        with pytest.raises(lsmstore.NotFoundError):
            main.get("missing")

        errors: list[BaseException] = []

        def writer(t: int) -> None:
            try:
                for i in range(50):
                    main.put(f"t/{t}/{i:03d}", b"v")
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        assert sum(1 for _ in main.list(prefix="t/")) == 400

        c = main.commit("from threads")
        assert isinstance(c, lsmstore.Commit) and c.message == "from threads"
        dev = repo.create_branch("dev", source="main")
        dev.put("a/1", b"changed")
        dev.commit("dev")
        assert [ch.kind for ch in repo.diff("main", "dev")] == ["changed"]
        assert repo.merge("dev", into="main").merged
        assert [e.message for e in repo.log("main", limit=2)][1] == "from threads"
        assert "dev" in [e.message for e in repo.log("main", first_parent=False)]
        assert repo.ref("main~1").get("a/1") == b"one"
        loop = store._portal.loop
    assert loop.is_closed()
    assert not [t for t in threading.enumerate() if t.name == "lsmstore-sync"]
    with pytest.raises(lsmstore.ClosedError):
        main.get("a/1")


def test_bad_settings_raise_typed_errors_and_stop_the_loop(tmp_path: Path) -> None:
    with pytest.raises(lsmstore.InvalidInputError, match="no_such_setting"):
        lsmstore.sync.connect(home=str(tmp_path), no_such_setting=1)
    assert not [t for t in threading.enumerate() if t.name == "lsmstore-sync"]


def test_blocking_api_over_the_server(lsm_server: Any) -> None:  # noqa: F811
    key, secret = lsm_server.admin
    with lsmstore.sync.connect(lsm_server.url, access_key_id=key, secret_access_key=secret) as s:
        repo = s.create_repository("sync-remote", storage_namespace="local://sync-remote")
        main = repo.branch("main")
        errors: list[BaseException] = []

        def writer(t: int) -> None:
            try:
                for i in range(20):
                    main.put(f"t/{t}/{i:02d}", b"v")
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(5)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        assert sum(1 for _ in main.list(prefix="t/")) == 100
        assert main.commit("from threads").message == "from threads"
        with pytest.raises(lsmstore.NotFoundError):
            main.get("missing")
