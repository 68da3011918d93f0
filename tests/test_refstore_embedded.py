"""The embedded (SQLite) RefStore: the shared contract plus multi-process and crash tests."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lsmstore.errors import UnavailableError
from lsmstore.refstore.base import Ref, Repository
from lsmstore.refstore.embedded import FILENAME, SCHEMA_VERSION, EmbeddedRefStore
from lsmstore.refstore.url import open_refstore
from lsmstore.testing.refstore_contract import REPO, FakeClock, RefStoreContract, branch

ROOT = Path(__file__).resolve().parent.parent


class TestEmbeddedRefStore(RefStoreContract):
    @pytest.fixture
    async def refstore(self, tmp_path: Path) -> AsyncIterator[EmbeddedRefStore]:
        self.clock = FakeClock()
        store = EmbeddedRefStore(tmp_path / "refs", clock=self.clock)
        yield store
        await store.aclose()

    async def pass_time(self, seconds: float) -> None:
        self.clock.now += seconds


async def _setup(path: Path) -> None:
    async with EmbeddedRefStore(path) as store:
        await store.create_repository(Repository(REPO, "file:///d", "main"))
        await store.create_ref(REPO, "main", branch())


APPENDER = """
import asyncio, sys
from pathlib import Path
from lsmstore.refstore.embedded import EmbeddedRefStore

async def main(path: str, tag: str, n: int) -> None:
    async with EmbeddedRefStore(Path(path)) as store:
        if n < 0:  # one at a time, report each acknowledged id, never close
            i = 0
            while True:
                await store.append_l1("repo1", "main", f"{tag}-{i:05d}")
                print(f"{tag}-{i:05d}", flush=True)
                i += 1
        await asyncio.gather(
            *(store.append_l1("repo1", "main", f"{tag}-{i:05d}") for i in range(n))
        )

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def _spawn(path: Path, tag: str, n: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        APPENDER,
        str(path),
        tag,
        str(n),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )


async def test_processes_append_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "refs"
    await _setup(path)
    procs = [await _spawn(path, f"p{i}", 150) for i in range(2)]
    async with EmbeddedRefStore(path) as store:
        mine = [f"main-{i:05d}" for i in range(150)]
        await asyncio.gather(*(store.append_l1(REPO, "main", f) for f in mine))
        for p in procs:
            assert await p.wait() == 0
        l1 = (await store.get_ref(REPO, "main")).l1
    expected = mine + [f"p{i}-{j:05d}" for i in range(2) for j in range(150)]
    assert len(l1) == len(expected) and sorted(l1) == sorted(expected)


async def test_acknowledged_appends_survive_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "refs"
    await _setup(path)
    proc = await _spawn(path, "crash", -1)
    assert proc.stdout is not None
    acked = [(await proc.stdout.readline()).decode().strip() for _ in range(40)]
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    async with EmbeddedRefStore(path) as store:
        l1 = (await store.get_ref(REPO, "main")).l1
    assert l1[: len(acked)] == tuple(acked)
    assert all(f.startswith("crash-") for f in l1)


async def test_reopen_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "refs"
    await _setup(path)
    async with EmbeddedRefStore(path) as store:
        await store.append_l1(REPO, "main", "f1")
        await store.acquire_lease("k", "a", 60)
    async with EmbeddedRefStore(path) as store:
        assert await store.get_ref(REPO, "main") == branch(l1=("f1",))
        assert not await store.acquire_lease("k", "b", 60)

    def journal_mode() -> str:
        con = sqlite3.connect(path / FILENAME)
        try:
            return str(con.execute("PRAGMA journal_mode").fetchone()[0])
        finally:
            con.close()

    assert await asyncio.to_thread(journal_mode) == "wal"


@contextmanager
def _held_write_lock(db: Path) -> Iterator[threading.Event]:
    """Another connection holds SQLite's write lock until the yielded event is set."""
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        locked.set()
        release.wait(30)
        con.execute("ROLLBACK")
        con.close()

    t = threading.Thread(target=hold)
    t.start()
    locked.wait(10)
    try:
        yield release
    finally:
        release.set()
        t.join()


SCHEMA_V1 = """
CREATE TABLE repositories (name TEXT PRIMARY KEY, storage_namespace TEXT NOT NULL,
    default_branch TEXT NOT NULL, created_at REAL NOT NULL, metadata TEXT NOT NULL)
    WITHOUT ROWID;
CREATE TABLE refs (repo TEXT NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL,
    base TEXT NOT NULL, l2 TEXT NOT NULL, l1 TEXT NOT NULL, PRIMARY KEY (repo, name))
    WITHOUT ROWID;
CREATE TABLE leases (key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL)
    WITHOUT ROWID;
INSERT INTO repositories VALUES ('repo1', 'file:///d', 'main', 0, '{}');
INSERT INTO refs VALUES ('repo1', 'main', 'branch', 'c1', 'g1', 'f1,f2');
PRAGMA user_version=1;
"""


SCHEMA_V2 = (
    SCHEMA_V1.replace(
        "l1 TEXT NOT NULL, PRIMARY KEY",
        "l1 TEXT NOT NULL, consumed TEXT NOT NULL DEFAULT '', PRIMARY KEY",
    )
    .replace("user_version=1", "user_version=2")
    .replace("'f1,f2')", "'f1,f2', '')")
)


async def test_version_2_database_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "refs"
    path.mkdir()
    con = sqlite3.connect(path / FILENAME)
    con.executescript(SCHEMA_V2)
    con.close()
    async with EmbeddedRefStore(path) as store:
        cur = await store.get_ref(REPO, "main")
        assert cur == branch("c1", ("g1",), ("f1", "f2"))
        assert (await store.append_l1_group(REPO, "main", "j", ("f3",))).l1 == ("f1", "f2", "f3")
        await store.put_record("k", "n", b"v")
        assert await store.list_workspaces(REPO) == []
    con = sqlite3.connect(path / FILENAME)
    try:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        con.close()


async def test_version_1_database_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "refs"
    path.mkdir()
    con = sqlite3.connect(path / FILENAME)
    con.executescript(SCHEMA_V1)
    con.close()
    async with EmbeddedRefStore(path) as store:
        assert await store.get_ref(REPO, "main") == branch("c1", ("g1",), ("f1", "f2"))
        new = await store.swap_committed(
            REPO, "main", base="c1", l2_old=("g1",), l1_prefix=("f1",), new_base="c2"
        )
        assert await store.append_l1(REPO, "main", "f1") == new  # consumed
        await store.create_ref(REPO, "dev", branch("c2"))
        # Version 3: group ids, workspaces, records.
        grouped = await store.append_l1_group(REPO, "dev", "job1", ("a1",))
        assert await store.append_l1_group(REPO, "dev", "job1", ("a1",)) == grouped
        await store.stash_workspace(REPO, "dev", "wip", expected=grouped)
        await store.put_record("settings", "x", b"1")
    async with EmbeddedRefStore(path) as store:
        assert await store.append_l1(REPO, "main", "f1") == new
        assert await store.get_ref(REPO, "dev") == branch("c2")
        assert (await store.get_workspace(REPO, "wip")).l1 == ("a1",)
        assert await store.get_record("settings", "x") == b"1"
        assert await store.move_count(REPO) == 1
    con = sqlite3.connect(path / FILENAME)
    try:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    finally:
        con.close()


async def test_reads_do_not_wait_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "refs"
    await _setup(path)
    async with EmbeddedRefStore(path) as store:
        await store.get_ref(REPO, "main")  # open the connections first
        with _held_write_lock(path / FILENAME) as release:
            append = asyncio.create_task(store.append_l1(REPO, "main", "f1"))
            assert await store.get_ref(REPO, "main") == branch()  # not blocked
            assert not append.done()
            release.set()
            assert await append == branch(l1=("f1",))


async def test_busy_timeout_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "refs"
    await _setup(path)
    async with EmbeddedRefStore(path, busy_timeout=0.1) as store:
        with _held_write_lock(path / FILENAME), pytest.raises(UnavailableError) as e:
            await store.append_l1(REPO, "main", "f1")
        assert not e.value.outcome_unknown
        assert await store.get_ref(REPO, "main") == branch()
        assert await store.append_l1(REPO, "main", "f1") == branch(l1=("f1",))


async def test_open_by_url(tmp_path: Path) -> None:
    store = open_refstore(f"local://{tmp_path}/a%20dir?synchronous=NORMAL")
    assert isinstance(store, EmbeddedRefStore)
    async with store:
        await store.create_repository(Repository(REPO, "file:///d", "main"))
        await store.create_ref(REPO, "v1", Ref("tag", "c1"))
    assert (tmp_path / "a dir" / FILENAME).exists()
    async with open_refstore(f"local://{tmp_path}/a%20dir") as again:
        assert await again.get_ref(REPO, "v1") == Ref("tag", "c1")


async def test_mutations_queued_meanwhile_commit_as_one_group(tmp_path: Path) -> None:
    """Group commit: mutations that queue while the writer thread waits are committed
    in one transaction; each still sees the ones before it, and one that fails is
    rolled back alone."""
    path = tmp_path / "refs"
    await _setup(path)
    async with EmbeddedRefStore(path) as store:
        for i in range(10):
            await store.create_ref(REPO, f"b{i}", branch())
        groups0, grouped0, taken0 = store.groups, store.grouped, store.taken
        with _held_write_lock(path / FILENAME) as release:
            first = asyncio.create_task(store.append_l1(REPO, "main", "f0"))
            while store.taken < taken0 + 1:  # noqa: ASYNC110  # the writer thread took it and waits
                await asyncio.sleep(0.001)
            ops = [store.append_l1(REPO, f"b{i}", f"x{i}") for i in range(10)]
            ops += [store.append_l1(REPO, "main", f"f{i}") for i in range(1, 6)]
            ops.append(store.append_l1(REPO, "missing", "y"))  # fails alone
            ops.append(  # conflicts: main's L1 does not start with "nope"
                store.swap_compacted(
                    REPO, "main", base="", l2_old=(), l1_prefix=("nope",), l2_new=("z",)
                )
            )
            tasks = [asyncio.ensure_future(op) for op in ops]
            while len(store._queue) < len(tasks):  # noqa: ASYNC110  # all queued
                await asyncio.sleep(0.001)
            assert not first.done()
            release.set()
            results = await asyncio.gather(first, *tasks, return_exceptions=True)
        assert store.groups - groups0 == 2  # the first alone, then all the rest
        assert store.grouped - grouped0 == 1 + 15
        assert type(results[-2]).__name__ == "RefNotFoundError"
        assert type(results[-1]).__name__ == "ConflictError"
        # each append saw the ones before it in the group
        assert [r.l1 for r in results[11:16]] == [
            tuple(f"f{j}" for j in range(i + 1)) for i in range(1, 6)
        ]
    async with EmbeddedRefStore(path) as store:  # and all of it is durable
        assert (await store.get_ref(REPO, "main")).l1 == tuple(f"f{j}" for j in range(6))
        for i in range(10):
            assert (await store.get_ref(REPO, f"b{i}")).l1 == (f"x{i}",)


async def test_a_second_store_of_one_directory_never_opens_the_database_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening (and closing) a descriptor of a database that this process's SQLite
    connections hold drops their POSIX locks, after which SQLite corrupts the file: a
    second store of the same directory in one process must leave the file alone."""
    import os

    from lsmstore import private

    opened: list[str] = []
    real = private.create_file

    def create_file(path: str | os.PathLike[str], *, exclusive: bool = False) -> int:
        fd = real(path, exclusive=exclusive)  # FileExistsError for an existing file
        opened.append(os.fspath(path))
        return fd

    monkeypatch.setattr(private, "create_file", create_file)
    async with EmbeddedRefStore(tmp_path / "refs") as first:
        await first.create_repository(Repository("rep", "file:///d", "main"))
        assert opened == [str(tmp_path / "refs" / FILENAME)]  # created on first use
        async with EmbeddedRefStore(tmp_path / "refs") as second:
            await second.create_ref("rep", "b", Ref("branch", "c" * 64))
            await first.create_ref("rep", "c", Ref("branch", "c" * 64))
        assert opened == [str(tmp_path / "refs" / FILENAME)]  # not opened again
        assert set(await first.get_refs("rep", ["b", "c"])) == {"b", "c"}
