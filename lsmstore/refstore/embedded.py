"""The embedded RefStore: one SQLite database in WAL mode, for one machine, no server.

Layout: ``<dir>/refs.sqlite3`` with three tables (see docs/refstore.md).  Every
mutation reads the row, applies the pure rule from :mod:`lsmstore.refstore.transitions`
and writes the result inside a ``BEGIN IMMEDIATE`` transaction, so any number of
processes may open the same directory.  Mutations of one process run on one dedicated
thread (no in-process lock contention), which commits the mutations queued meanwhile
together -- each in a savepoint of its own, one fsync for the group (group commit:
appends from many branches or writers cost one WAL sync, not one each); reads run on
a small pool of threads with their own connections, so a ``get_ref`` never waits
behind an fsync.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

from lsmstore import private
from lsmstore.errors import (
    ClosedError,
    LsmError,
    RecordExistsError,
    RecordNotFoundError,
    RefExistsError,
    RefNotFoundError,
    RepositoryNotFoundError,
    UnavailableError,
    WorkspaceExistsError,
    WorkspaceNotFoundError,
)
from lsmstore.refstore import transitions
from lsmstore.refstore.base import (
    Ref,
    RefKind,
    RefStore,
    Repository,
    WindowCount,
    Workspace,
    encode_metadata,
    replaced_message,
)
from lsmstore.refstore.codec import decode_ids, decode_kind, encode_ids, prefix_end

T = TypeVar("T")

FILENAME = "refs.sqlite3"
#: 1: first layout; 2: ``refs.consumed`` (the ids the branch's swaps consumed);
#: 3: ``refs.groups``, workspaces, records, moves; 4: ``repositories.uid``/``location``.
SCHEMA_VERSION = 4
SCHEMA = """
CREATE TABLE IF NOT EXISTS repositories (
    name TEXT PRIMARY KEY,
    storage_namespace TEXT NOT NULL,
    default_branch TEXT NOT NULL,
    created_at REAL NOT NULL,
    metadata TEXT NOT NULL,
    uid TEXT NOT NULL DEFAULT '',
    location TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refs (
    repo TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    base TEXT NOT NULL,
    l2 TEXT NOT NULL,
    l1 TEXT NOT NULL,
    consumed TEXT NOT NULL DEFAULT '',
    groups TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (repo, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS workspaces (
    repo TEXT NOT NULL,
    name TEXT NOT NULL,
    branch TEXT NOT NULL,
    base TEXT NOT NULL,
    l2 TEXT NOT NULL,
    l1 TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (repo, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS records (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (kind, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS moves (
    repo TEXT PRIMARY KEY,
    n INTEGER NOT NULL
) WITHOUT ROWID;
"""

_V3_TABLES = SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS workspaces") :]

#: Upgrades from the schema version in the key (run in order, in one transaction).
MIGRATIONS: dict[int, list[str]] = {
    1: ["ALTER TABLE refs ADD COLUMN consumed TEXT NOT NULL DEFAULT ''"],
    2: [
        "ALTER TABLE refs ADD COLUMN groups TEXT NOT NULL DEFAULT ''",
        *(t for t in _V3_TABLES.split(";") if t.strip()),
    ],
    3: [
        "ALTER TABLE repositories ADD COLUMN uid TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE repositories ADD COLUMN location TEXT NOT NULL DEFAULT ''",
    ],
}

#: Window counters (created on open if absent, whatever the schema version: an older
#: lsmstore ignores the table).
COUNTERS = """
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL,
    ends_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS counters_ends_at ON counters (ends_at)
"""

#: Ended counters removed by one count at most.
_COUNTER_SWEEP = 16

#: Mutations committed in one transaction at most (group commit: one fsync for all).
MAX_GROUP = 128

_REPO_COLUMNS = "name, storage_namespace, default_branch, created_at, metadata, uid, location"
_REF_COLUMNS = "kind, base, l2, l1"  # what reads fetch: the consumed tail is not a Ref's
Row = tuple[str, str, str, str]
Tail = tuple[str, ...]


def _rollback(con: sqlite3.Connection) -> None:
    """Roll back after a failure, never raising over it: SQLite may already have rolled
    the transaction back itself (after SQLITE_FULL, SQLITE_IOERR ...)."""
    if con.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")


def _ref(row: Row) -> Ref:
    kind, base, l2, l1 = row
    return Ref(decode_kind(kind, FILENAME), base, decode_ids(l2), decode_ids(l1))


def _row(ref: Ref) -> Row:
    return (ref.kind, ref.base, encode_ids(ref.l2), encode_ids(ref.l1))


class EmbeddedRefStore(RefStore):
    """RefStore in ``<path>/refs.sqlite3``.

    ``synchronous="FULL"`` (default) fsyncs the WAL on every commit: an acknowledged
    operation survives a process crash and a power loss.  ``"NORMAL"`` survives a
    process crash but may lose the last operations on power loss.  ``clock`` (seconds
    since the epoch) times leases.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout: float = 30.0,
        readers: int = 2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        self.path = Path(path)
        self.url = f"local://{self.path}"
        self._synchronous = synchronous
        self._busy_ms = int(busy_timeout * 1000)
        self._clock = clock
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="lsm-refstore-write")
        #: Mutations waiting for the writer thread (which commits them in groups).
        self._queue: collections.deque[tuple[Callable[[sqlite3.Connection], Any], Future[Any]]] = (
            collections.deque()
        )
        self.taken = 0  # mutations the writer thread took from the queue
        self.groups = 0  # transactions committed by the writer thread
        self.grouped = 0  # mutations they held
        self._readers = ThreadPoolExecutor(max(1, readers), thread_name_prefix="lsm-refstore-read")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._initialised = False

    # --- threads and transactions ---------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is not None:
            return con
        with self._lock:
            if not self._initialised:
                try:
                    self._prepare_files()
                except OSError as e:
                    raise UnavailableError(
                        f"{self.url}: cannot create the directory {self.path}: {e.strerror or e}"
                    ) from e
            con = sqlite3.connect(
                self.path / FILENAME,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # only so aclose() can close it
                timeout=self._busy_ms / 1000,
            )
            try:
                con.execute(f"PRAGMA busy_timeout={self._busy_ms}")
                if not self._initialised:
                    self._initialise(con)
                    self._initialised = True
                con.execute(f"PRAGMA synchronous={self._synchronous}")
            except BaseException:
                con.close()
                raise
            self._connections.append(con)
        self._local.con = con
        return con

    def _prepare_files(self) -> None:
        """The directory (0700) and the database (0600; SQLite gives its WAL and
        shared-memory files the database's mode): :mod:`lsmstore.private`."""
        private.make_dirs(self.path)
        private.tighten(self.path)
        # Only a database that does not exist yet is created here: closing a descriptor
        # of an existing one would drop every POSIX lock this process's SQLite
        # connections hold on it (another store of the same directory in this process),
        # and SQLite then corrupts it.
        with contextlib.suppress(FileExistsError):
            os.close(private.create_file(self.path / FILENAME, exclusive=True))
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                private.tighten(self.path / (FILENAME + suffix))

    def _initialise(self, con: sqlite3.Connection) -> None:
        mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise UnavailableError(f"{self.url}: cannot switch {FILENAME} to WAL mode ({mode})")
        con.execute("BEGIN IMMEDIATE")
        try:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise UnavailableError(
                    f"{self.url}: {FILENAME} has schema version {version}, "
                    f"this lsmstore reads up to {SCHEMA_VERSION}"
                )
            if version == 0:  # a new database: the current schema
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        con.execute(statement)
            else:
                for v in range(version, SCHEMA_VERSION):
                    for statement in MIGRATIONS[v]:
                        con.execute(statement)
            con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            for statement in COUNTERS.split(";"):
                con.execute(statement)
        except BaseException:
            _rollback(con)
            raise
        con.execute("COMMIT")

    def _in_transaction(self, fn: Callable[[sqlite3.Connection], T], immediate: bool) -> T:
        con = self._connection()
        try:
            con.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        except sqlite3.Error as e:
            raise UnavailableError(f"{self.url}: cannot begin a transaction: {e}") from e
        try:
            result = fn(con)
        except BaseException:
            _rollback(con)
            raise
        try:
            con.execute("COMMIT")
        except sqlite3.Error as e:
            _rollback(con)
            raise UnavailableError(
                f"{self.url}: commit failed: {e}", outcome_unknown=immediate
            ) from e
        return result

    def _group(self) -> None:
        """Run the queued mutations (up to :data:`MAX_GROUP`) in one transaction, each
        in a savepoint of its own, and commit them with one fsync (group commit).

        Each sees the effects of those before it, exactly as if run one by one; one
        that raises is rolled back alone (its savepoint) and gets its error; the others
        are resolved only once the commit is durable.  If the commit fails, every
        operation of the group gets ``UnavailableError(outcome_unknown=True)``.
        """
        ops: list[tuple[Callable[[sqlite3.Connection], Any], Future[Any]]] = []
        with self._lock:
            while self._queue and len(ops) < MAX_GROUP:
                ops.append(self._queue.popleft())
            self.taken += len(ops)
        ops = [(fn, fut) for fn, fut in ops if fut.set_running_or_notify_cancel()]
        if not ops:
            return  # an earlier group took them
        done: list[tuple[Future[Any], Any]] = []
        try:
            con = self._connection()
            con.execute("BEGIN IMMEDIATE")
        except (sqlite3.Error, LsmError) as e:
            err = (
                e
                if isinstance(e, LsmError)
                else UnavailableError(f"{self.url}: cannot begin a transaction: {e}")
            )
            for _, fut in ops:
                fut.set_exception(err)
            return
        for fn, fut in ops:
            if not con.in_transaction:  # SQLite rolled back (I/O error, full disk)
                fut.set_exception(
                    UnavailableError(f"{self.url}: transaction rolled back by SQLite")
                )
                continue
            try:
                con.execute("SAVEPOINT op")
                result = fn(con)
                con.execute("RELEASE op")
            except BaseException as e:
                if con.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        con.execute("ROLLBACK TO op")
                        con.execute("RELEASE op")
                fut.set_exception(e)
                continue
            done.append((fut, result))
        if not con.in_transaction:
            for fut, _ in done:
                fut.set_exception(
                    UnavailableError(f"{self.url}: transaction rolled back by SQLite")
                )
            return
        try:
            con.execute("COMMIT")
        except sqlite3.Error as e:
            _rollback(con)
            for fut, _ in done:
                fut.set_exception(
                    UnavailableError(f"{self.url}: commit failed: {e}", outcome_unknown=True)
                )
            return
        self.groups += 1
        self.grouped += len(done)
        for fut, result in done:
            fut.set_result(result)

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        future: Future[T]
        try:
            if write:
                future = Future()
                with self._lock:
                    self._queue.append((fn, future))
                self._writer.submit(self._group)
            else:
                future = self._readers.submit(self._in_transaction, fn, False)
        except RuntimeError as e:  # executor shut down by aclose()
            raise ClosedError(f"refstore {self.url} is closed") from e
        try:
            return await asyncio.wrap_future(future)
        except LsmError:
            raise
        except sqlite3.Error as e:
            raise UnavailableError(f"{self.url}: {e}", outcome_unknown=False) from e

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._run(fn, write=True)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._run(fn, write=False)

    # --- helpers run inside a transaction ------------------------------------------------

    @staticmethod
    def _require_repository(con: sqlite3.Connection, repo: str) -> None:
        if con.execute("SELECT 1 FROM repositories WHERE name = ?", (repo,)).fetchone() is None:
            raise RepositoryNotFoundError(f"repository not found: {repo}")

    def _load(self, con: sqlite3.Connection, repo: str, name: str) -> Ref:
        row = con.execute(
            f"SELECT {_REF_COLUMNS} FROM refs WHERE repo = ? AND name = ?", (repo, name)
        ).fetchone()
        if row is None:
            self._require_repository(con, repo)
            raise RefNotFoundError(f"ref not found: {repo}/{name}")
        return _ref(row)

    def _load_with_tail(self, con: sqlite3.Connection, repo: str, name: str) -> tuple[Ref, Tail]:
        row = con.execute(
            f"SELECT {_REF_COLUMNS}, consumed FROM refs WHERE repo = ? AND name = ?",
            (repo, name),
        ).fetchone()
        if row is None:
            self._require_repository(con, repo)
            raise RefNotFoundError(f"ref not found: {repo}/{name}")
        *fields, consumed = row
        return _ref(tuple(fields)), decode_ids(consumed)

    def _load_groups(self, con: sqlite3.Connection, repo: str, name: str) -> Tail:
        row = con.execute(
            "SELECT groups FROM refs WHERE repo = ? AND name = ?", (repo, name)
        ).fetchone()
        return decode_ids(row[0]) if row else ()

    def _store(self, con: sqlite3.Connection, repo: str, name: str, ref: Ref, tail: Tail) -> None:
        con.execute(
            "UPDATE refs SET kind = ?, base = ?, l2 = ?, l1 = ?, consumed = ? "
            "WHERE repo = ? AND name = ?",
            (*_row(ref), encode_ids(tail), repo, name),
        )

    @staticmethod
    def _bump_moves(con: sqlite3.Connection, repo: str) -> None:
        con.execute(
            "INSERT INTO moves VALUES (?, 1) ON CONFLICT (repo) DO UPDATE SET n = n + 1",
            (repo,),
        )

    @staticmethod
    def _workspace(row: tuple[str, str, str, str, str, float]) -> Workspace:
        name, branch, base, l2, l1, created_at = row
        return Workspace(name, branch, base, decode_ids(l2), decode_ids(l1), created_at)

    def _load_workspace(self, con: sqlite3.Connection, repo: str, name: str) -> Workspace:
        row = con.execute(
            "SELECT name, branch, base, l2, l1, created_at FROM workspaces "
            "WHERE repo = ? AND name = ?",
            (repo, name),
        ).fetchone()
        if row is None:
            self._require_repository(con, repo)
            raise WorkspaceNotFoundError(f"workspace not found: {repo}/{name}")
        return self._workspace(row)

    @staticmethod
    def _check_repository_id(con: sqlite3.Connection, repo: str, uid: str | None) -> None:
        if uid is None:
            return
        row = con.execute("SELECT uid FROM repositories WHERE name = ?", (repo,)).fetchone()
        if row is None or row[0] != uid:
            raise RepositoryNotFoundError(replaced_message(repo))

    async def _mutate(
        self,
        repo: str,
        name: str,
        rule: Callable[[Ref, Tail], tuple[Ref, Tail]],
        repository_id: str | None = None,
    ) -> Ref:
        """Apply ``rule`` to the ref and its consumed tail; store what it returns."""

        def run(con: sqlite3.Connection) -> Ref:
            self._check_repository_id(con, repo, repository_id)
            cur, tail = self._load_with_tail(con, repo, name)
            new, new_tail = rule(cur, tail)
            if new != cur or new_tail != tail:
                self._store(con, repo, name, new, new_tail)
            return new

        return await self._write(run)

    # --- repositories --------------------------------------------------------------

    async def _create_repository(self, repo: Repository) -> None:
        def run(con: sqlite3.Connection) -> None:
            cur = con.execute(
                f"INSERT INTO repositories ({_REPO_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (
                    repo.name,
                    repo.storage_namespace,
                    repo.default_branch,
                    float(repo.created_at),
                    encode_metadata(repo.metadata),
                    repo.uid,
                    repo.location,
                ),
            )
            if cur.rowcount == 0:
                raise RefExistsError(f"repository already exists: {repo.name}")

        await self._write(run)

    @staticmethod
    def _repository(row: tuple[str, str, str, float, str, str, str]) -> Repository:
        name, ns, default_branch, created_at, metadata, uid, location = row
        return Repository(name, ns, default_branch, created_at, json.loads(metadata), uid, location)

    async def _get_repository(self, name: str) -> Repository:
        def run(con: sqlite3.Connection) -> Repository:
            row = con.execute(
                f"SELECT {_REPO_COLUMNS} FROM repositories WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                raise RepositoryNotFoundError(f"repository not found: {name}")
            return self._repository(row)

        return await self._read(run)

    async def _list_repositories(self, after: str | None, limit: int) -> list[Repository]:
        def run(con: sqlite3.Connection) -> list[Repository]:
            rows = con.execute(
                f"SELECT {_REPO_COLUMNS} FROM repositories WHERE name > ? ORDER BY name LIMIT ?",
                (after or "", limit),
            )
            return [self._repository(r) for r in rows]

        return await self._read(run)

    async def _delete_repository(self, name: str) -> None:
        def run(con: sqlite3.Connection) -> None:
            if con.execute("DELETE FROM repositories WHERE name = ?", (name,)).rowcount == 0:
                raise RepositoryNotFoundError(f"repository not found: {name}")
            con.execute("DELETE FROM refs WHERE repo = ?", (name,))
            con.execute("DELETE FROM workspaces WHERE repo = ?", (name,))

        await self._write(run)

    # --- refs ----------------------------------------------------------------------

    async def _get_ref(self, repo: str, name: str) -> Ref:
        return await self._read(lambda con: self._load(con, repo, name))

    async def _get_refs(self, repo: str, names: list[str]) -> dict[str, Ref]:
        def run(con: sqlite3.Connection) -> dict[str, Ref]:
            self._require_repository(con, repo)
            found: dict[str, Ref] = {}
            for i in range(0, len(names), 500):
                chunk = names[i : i + 500]
                rows = con.execute(
                    f"SELECT name, {_REF_COLUMNS} FROM refs "
                    f"WHERE repo = ? AND name IN ({','.join('?' * len(chunk))})",
                    (repo, *chunk),
                )
                for name, *row in rows:
                    found[name] = _ref(tuple(row))
            return found

        return await self._read(run)

    async def _list_refs(
        self, repo: str, prefix: str, after: str | None, limit: int, kind: RefKind | None
    ) -> list[tuple[str, Ref]]:
        def run(con: sqlite3.Connection) -> list[tuple[str, Ref]]:
            self._require_repository(con, repo)
            where, args = ["repo = ?"], [repo]
            if prefix:
                where.append("name >= ?")
                args.append(prefix)
                end = prefix_end(prefix)
                if end is not None:
                    where.append("name < ?")
                    args.append(end)
            if after is not None:
                where.append("name > ?")
                args.append(after)
            rows = con.execute(
                f"SELECT name, {_REF_COLUMNS} FROM refs WHERE {' AND '.join(where)} "
                "ORDER BY name LIMIT ?",
                (*args, limit),
            )
            page = [(name, _ref(tuple(row))) for name, *row in rows]
            return [(n, r) for n, r in page if kind is None or r.kind == kind]

        return await self._read(run)

    async def _create_ref(self, repo: str, name: str, ref: Ref) -> None:
        def run(con: sqlite3.Connection) -> None:
            self._require_repository(con, repo)
            cur = con.execute(
                f"INSERT INTO refs (repo, name, {_REF_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (repo, name, *_row(ref)),
            )
            if cur.rowcount == 0:
                raise RefExistsError(f"ref already exists: {repo}/{name}")

        await self._write(run)

    async def _delete_ref(self, repo: str, name: str, expected: Ref) -> None:
        def run(con: sqlite3.Connection) -> None:
            transitions.delete(f"{repo}/{name}", self._load(con, repo, name), expected)
            con.execute("DELETE FROM refs WHERE repo = ? AND name = ?", (repo, name))

        await self._write(run)

    # --- branch operations -------------------------------------------------------------

    async def _append_l1(
        self, repo: str, branch: str, file_id: str, repository_id: str | None
    ) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            lambda cur, tail: (transitions.append_l1(where, cur, file_id, tail), tail),
            repository_id,
        )

    async def _swap_compacted(
        self,
        repo: str,
        branch: str,
        base: str,
        l2_old: tuple[str, ...],
        l1_prefix: tuple[str, ...],
        l2_new: tuple[str, ...],
    ) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            lambda cur, tail: (
                transitions.swap_compacted(where, cur, base, l2_old, l1_prefix, l2_new),
                transitions.consume(tail, l1_prefix),
            ),
        )

    async def _swap_committed(
        self,
        repo: str,
        branch: str,
        base: str,
        l2_old: tuple[str, ...],
        l1_prefix: tuple[str, ...],
        new_base: str,
    ) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            lambda cur, tail: (
                transitions.swap_committed(where, cur, base, l2_old, l1_prefix, new_base),
                transitions.consume(tail, l1_prefix),
            ),
        )

    async def _set_base(self, repo: str, branch: str, expected_base: str, new_base: str) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            lambda cur, tail: (transitions.set_base(where, cur, expected_base, new_base), tail),
        )

    async def _append_l1_many(
        self, repo: str, branch: str, file_ids: tuple[str, ...], repository_id: str | None
    ) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            lambda cur, tail: (transitions.append_l1_many(where, cur, file_ids, tail), tail),
            repository_id,
        )

    async def _append_l1_group(
        self,
        repo: str,
        branch: str,
        group_id: str,
        file_ids: tuple[str, ...],
        repository_id: str | None,
    ) -> Ref:
        where = f"{repo}/{branch}"

        def run(con: sqlite3.Connection) -> Ref:
            self._check_repository_id(con, repo, repository_id)
            cur, tail = self._load_with_tail(con, repo, branch)
            groups = self._load_groups(con, repo, branch)
            new, new_groups = transitions.append_group(where, cur, group_id, file_ids, tail, groups)
            if new_groups != groups:
                self._store(con, repo, branch, new, tail)
                con.execute(
                    "UPDATE refs SET groups = ? WHERE repo = ? AND name = ?",
                    (encode_ids(new_groups), repo, branch),
                )
            return new

        return await self._write(run)

    # --- workspaces ------------------------------------------------------------------

    async def _stash_workspace(
        self, repo: str, branch: str, name: str, expected: Ref, created_at: float
    ) -> Ref:
        where = f"{repo}/{branch}"

        def run(con: sqlite3.Connection) -> Ref:
            cur, tail = self._load_with_tail(con, repo, branch)
            new, ws = transitions.stash(where, cur, expected, branch, name, created_at)
            inserted = con.execute(
                "INSERT INTO workspaces VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (repo, name, branch, ws.base, encode_ids(ws.l2), encode_ids(ws.l1), created_at),
            )
            if inserted.rowcount == 0:
                raise WorkspaceExistsError(f"workspace already exists: {repo}/{name}")
            self._store(con, repo, branch, new, transitions.consume(tail, cur.l1))
            self._bump_moves(con, repo)
            return new

        return await self._write(run)

    async def _pop_workspace(self, repo: str, name: str, branch: str) -> Ref:
        where = f"{repo}/{branch}"

        def run(con: sqlite3.Connection) -> Ref:
            ws = self._load_workspace(con, repo, name)
            cur, tail = self._load_with_tail(con, repo, branch)
            new = transitions.pop(where, cur, ws, branch)
            self._store(con, repo, branch, new, tail)
            con.execute("DELETE FROM workspaces WHERE repo = ? AND name = ?", (repo, name))
            self._bump_moves(con, repo)
            return new

        return await self._write(run)

    async def _get_workspace(self, repo: str, name: str) -> Workspace:
        return await self._read(lambda con: self._load_workspace(con, repo, name))

    async def _list_workspaces(self, repo: str, after: str | None, limit: int) -> list[Workspace]:
        def run(con: sqlite3.Connection) -> list[Workspace]:
            self._require_repository(con, repo)
            rows = con.execute(
                "SELECT name, branch, base, l2, l1, created_at FROM workspaces "
                "WHERE repo = ? AND name > ? ORDER BY name LIMIT ?",
                (repo, after or "", limit),
            )
            return [self._workspace(r) for r in rows]

        return await self._read(run)

    async def _drop_workspace(self, repo: str, name: str) -> None:
        def run(con: sqlite3.Connection) -> None:
            self._require_repository(con, repo)
            cur = con.execute("DELETE FROM workspaces WHERE repo = ? AND name = ?", (repo, name))
            if cur.rowcount == 0:
                raise WorkspaceNotFoundError(f"workspace not found: {repo}/{name}")

        await self._write(run)

    async def _move_count(self, repo: str) -> int:
        def run(con: sqlite3.Connection) -> int:
            self._require_repository(con, repo)
            row = con.execute("SELECT n FROM moves WHERE repo = ?", (repo,)).fetchone()
            return int(row[0]) if row else 0

        return await self._read(run)

    # --- records -------------------------------------------------------------------------

    async def _put_record(self, kind: str, name: str, value: bytes, if_absent: bool) -> None:
        def run(con: sqlite3.Connection) -> None:
            action = "NOTHING" if if_absent else "UPDATE SET value = excluded.value"
            cur = con.execute(
                f"INSERT INTO records VALUES (?, ?, ?) ON CONFLICT (kind, name) DO {action}",
                (kind, name, value),
            )
            if cur.rowcount == 0:
                raise RecordExistsError(f"record already exists: {kind}/{name}")

        await self._write(run)

    async def _get_record(self, kind: str, name: str) -> bytes:
        def run(con: sqlite3.Connection) -> bytes:
            row = con.execute(
                "SELECT value FROM records WHERE kind = ? AND name = ?", (kind, name)
            ).fetchone()
            if row is None:
                raise RecordNotFoundError(f"record not found: {kind}/{name}")
            return bytes(row[0])

        return await self._read(run)

    async def _list_records(
        self, kind: str, after: str | None, limit: int
    ) -> list[tuple[str, bytes]]:
        def run(con: sqlite3.Connection) -> list[tuple[str, bytes]]:
            rows = con.execute(
                "SELECT name, value FROM records WHERE kind = ? AND name > ? ORDER BY name LIMIT ?",
                (kind, after or "", limit),
            )
            return [(n, bytes(v)) for n, v in rows]

        return await self._read(run)

    async def _delete_record(self, kind: str, name: str) -> None:
        def run(con: sqlite3.Connection) -> None:
            cur = con.execute("DELETE FROM records WHERE kind = ? AND name = ?", (kind, name))
            if cur.rowcount == 0:
                raise RecordNotFoundError(f"record not found: {kind}/{name}")

        await self._write(run)

    # --- window counters -------------------------------------------------------------

    async def _count_in_window(self, name: str, window_s: float, now: float) -> WindowCount:
        def run(con: sqlite3.Connection) -> WindowCount:
            con.execute(
                "DELETE FROM counters WHERE name IN (SELECT name FROM counters "
                "WHERE ends_at <= ? AND name != ? LIMIT ?)",
                (now, name, _COUNTER_SWEEP),
            )
            row = con.execute(
                "INSERT INTO counters VALUES (?, 1, ?) ON CONFLICT (name) DO UPDATE SET "
                "value = CASE WHEN ends_at <= ? THEN 1 ELSE value + 1 END, "
                "ends_at = CASE WHEN ends_at <= ? THEN excluded.ends_at ELSE ends_at END "
                "RETURNING value, ends_at",
                (name, now + window_s, now, now),
            ).fetchone()
            return WindowCount(int(row[0]), float(row[1]))

        return await self._write(run)

    async def _read_window_count(self, name: str, now: float) -> WindowCount:
        def run(con: sqlite3.Connection) -> WindowCount:
            row = con.execute(
                "SELECT value, ends_at FROM counters WHERE name = ? AND ends_at > ?", (name, now)
            ).fetchone()
            return WindowCount(int(row[0]), float(row[1])) if row else WindowCount(0, 0.0)

        return await self._read(run)

    # --- leases ----------------------------------------------------------------------

    async def _acquire_lease(self, key: str, owner: str, ttl_seconds: float) -> bool:
        def run(con: sqlite3.Connection) -> bool:
            now = self._clock()
            row = con.execute("SELECT owner, expires FROM leases WHERE key = ?", (key,)).fetchone()
            holder, expires = row if row is not None else (None, 0.0)
            if not transitions.lease_available(holder, expires, owner, now):
                return False
            con.execute(
                "INSERT INTO leases VALUES (?, ?, ?) ON CONFLICT (key) "
                "DO UPDATE SET owner = excluded.owner, expires = excluded.expires",
                (key, owner, now + ttl_seconds),
            )
            return True

        return await self._write(run)

    async def _release_lease(self, key: str, owner: str) -> None:
        def run(con: sqlite3.Connection) -> None:
            con.execute("DELETE FROM leases WHERE key = ? AND owner = ?", (key, owner))

        await self._write(run)

    # --- life cycle ----------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._shutdown)

    def _shutdown(self) -> None:
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        with self._lock:
            for con in self._connections:
                con.close()
            self._connections.clear()
