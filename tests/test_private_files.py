"""Local state is private whatever the umask: lsmstore.private, the embedded RefStore
narrowing files an older version made wider, and the embedded default's generated
token signing secret (one secret however many processes start on one home)."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lsmstore import private
from lsmstore.config import Config
from lsmstore.errors import InvalidInputError
from lsmstore.refstore.base import Repository
from lsmstore.refstore.embedded import FILENAME, EmbeddedRefStore
from lsmstore.server.secret import MIN_SECRET_CHARS, SECRET_FILE, signing_key


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most permissive umask: whatever is private is so by lsmstore's doing."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_directories_and_files_are_private_under_any_umask(
    tmp_path: Path, open_umask: None
) -> None:
    target = tmp_path / "a" / "b" / "c"
    private.make_dirs(target)
    for d in (tmp_path / "a", tmp_path / "a" / "b", target):
        assert mode(d) == 0o700, d
    private.write_file(target / "f", b"one", b"two")
    assert (target / "f").read_bytes() == b"onetwo" and mode(target / "f") == 0o600
    assert sorted(p.name for p in target.iterdir()) == ["f"]  # no temp file left
    os.close(private.create_file(target / "g"))
    assert mode(target / "g") == 0o600
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(NotADirectoryError):
        private.make_dirs(tmp_path / "file" / "sub")


async def test_the_embedded_refstore_narrows_what_an_older_version_made_wide(
    tmp_path: Path,
) -> None:
    refs = tmp_path / "refs"
    refs.mkdir(mode=0o755)
    os.chmod(refs, 0o755)
    con = sqlite3.connect(refs / FILENAME)  # a database made under a 022 umask
    con.execute("CREATE TABLE t (x)")
    con.close()
    os.chmod(refs / FILENAME, 0o644)
    async with EmbeddedRefStore(refs) as store:  # an empty database is initialised
        await store.create_repository(Repository("rep", "file:///d", "main"))
    assert mode(refs) == 0o700
    for f in refs.iterdir():
        assert mode(f) & 0o077 == 0, (f, oct(mode(f)))


async def test_a_new_embedded_refstore_is_private(tmp_path: Path, open_umask: None) -> None:
    async with EmbeddedRefStore(tmp_path / "home" / "refs") as store:
        await store.create_repository(Repository("rep", "file:///d", "main"))
        files = sorted(p.name for p in (tmp_path / "home" / "refs").iterdir())
        assert {FILENAME, FILENAME + "-wal"} <= set(files)
        for name in files:
            assert mode(tmp_path / "home" / "refs" / name) == 0o600, name
    assert mode(tmp_path / "home") == 0o700
    assert mode(tmp_path / "home" / "refs") == 0o700


def test_the_embedded_default_generates_one_secret(tmp_path: Path, open_umask: None) -> None:
    config = Config(home=tmp_path / "home")
    keys: list[bytes] = []
    threads = [threading.Thread(target=lambda: keys.append(signing_key(config))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 8 and len(set(keys)) == 1 and len(keys[0]) >= MIN_SECRET_CHARS
    assert mode(tmp_path / "home" / SECRET_FILE) == 0o600
    assert mode(tmp_path / "home") == 0o700
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == [SECRET_FILE]
    assert signing_key(config) == keys[0]  # read again, not made anew


def test_a_shared_refstore_takes_only_a_configured_secret(tmp_path: Path) -> None:
    shared = Config(home=tmp_path, refstore="redis://127.0.0.1:1/0")
    with pytest.raises(InvalidInputError, match="server_auth_secret_key"):
        signing_key(shared)
    with pytest.raises(InvalidInputError, match="at least 32"):
        signing_key(shared.replace(server_auth_secret_key="x" * 31))
    secret = "y" * 40
    assert signing_key(shared.replace(server_auth_secret_key=secret)) == secret.encode()
    assert signing_key(Config(home=tmp_path, server_auth_secret_key=secret)) == secret.encode()
    assert not (tmp_path / SECRET_FILE).exists()
