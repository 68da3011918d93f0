"""LocalStore: the shared contract plus crash safety and the filesystem mapping."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lsmstore.errors import (
    InvalidInputError,
    InvalidNameError,
    ObjectExistsError,
    ObjectNotFoundError,
    UnavailableError,
)
from lsmstore.storage import local
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.storage.local import TMP_MARK, LocalStore
from lsmstore.testing.store_contract import StoreContract, collect


class TestLocalStore(StoreContract):
    @pytest.fixture(params=["file", "filesystem"])
    async def store(
        self, tmp_path: Path, request: pytest.FixtureRequest
    ) -> AsyncIterator[ObjectStore]:
        async with LocalStore(tmp_path / "root", sync=request.param) as s:
            assert s.sync == request.param
            yield s


def test_root_must_be_absolute() -> None:
    with pytest.raises(InvalidInputError):
        LocalStore(Path("relative/dir"))


async def test_keys_are_files_under_the_root(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    assert store.url == tmp_path.as_uri()
    await store.put("a/b/c.sst", b"data")
    assert (tmp_path / "a" / "b" / "c.sst").read_bytes() == b"data"
    names = await asyncio.to_thread(lambda: sorted(p.name for p in tmp_path.rglob("*")))
    assert names == ["a", "b", "c.sst"]  # no temp file left behind


async def test_root_is_created_on_first_put(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "not" / "yet")
    assert await collect(store) == []
    with pytest.raises(ObjectNotFoundError):
        await store.get("k")
    await store.put("k", b"v")
    assert (tmp_path / "not" / "yet" / "k").read_bytes() == b"v"


async def test_temp_files_are_never_listed_or_named(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.put("d/k", b"v")
    (tmp_path / "d" / f"{TMP_MARK}k.deadbeef").write_bytes(b"partial")  # a crashed put
    (tmp_path / f"{TMP_MARK}x.0").write_bytes(b"partial")
    assert await collect(store) == ["d/k"]
    assert await collect(store, "d/") == ["d/k"]
    with pytest.raises(InvalidNameError):
        await store.get(f"d/{TMP_MARK}k.deadbeef")
    with pytest.raises(InvalidNameError):
        await store.put(f"{TMP_MARK}y", b"v")


async def test_object_and_directory_cannot_share_a_key(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.put("a/b", b"v")
    with pytest.raises(InvalidNameError):
        await store.put("a", b"v")
    with pytest.raises(InvalidNameError):
        await store.put("a", b"v", PutMode.OVERWRITE)
    with pytest.raises(InvalidNameError):
        await store.put("a/b/c", b"v")
    with pytest.raises(ObjectNotFoundError):
        await store.get("a")
    with pytest.raises(ObjectNotFoundError):
        await store.head("a")
    with pytest.raises(ObjectNotFoundError):
        await store.get("a/b/c")
    await store.delete("a")  # a directory is not an object: nothing to delete
    assert await collect(store) == ["a/b"]


_WRITER = """
import asyncio, sys
from pathlib import Path
from typing import Any
from lsmstore.storage.local import LocalStore

async def main():
    store = LocalStore(Path(sys.argv[1]))
    size = int(sys.argv[2])
    for i in range(1000):
        data = bytes([i % 251]) * size
        print(i, flush=True)
        await store.put(f"obj/{i:04d}", data)

asyncio.run(main())
"""


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob(f"{TMP_MARK}*") if p.stat().st_size > 0]


def _write_and_kill(root: Path, size: int) -> None:
    """Start a process writing objects of ``size`` bytes and SIGKILL it mid-write."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(root), str(size)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        while int(proc.stdout.readline()) < 2:  # two objects written, the third in progress
            pass
        # Wait (bounded) until the third object's temp file holds some bytes: the
        # writer is another process, so there is no event to wait on.
        deadline = time.monotonic() + 30
        while not _temp_files(root) and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()


async def test_kill_mid_write_leaves_no_partial_object(tmp_path: Path) -> None:
    size = 48 << 20
    await asyncio.to_thread(_write_and_kill, tmp_path, size)
    assert _temp_files(tmp_path), "the writer was not caught mid-write"
    store = LocalStore(tmp_path)
    listed = [m async for m in store.list()]
    assert len(listed) >= 2
    for meta in listed:
        i = int(meta.key.split("/")[1])
        assert meta.size == size
        digest = hashlib.sha256(await store.get(meta.key)).digest()
        assert digest == hashlib.sha256(bytes([i % 251]) * size).digest()
    unfinished = f"obj/{len(listed):04d}"
    with pytest.raises(ObjectNotFoundError):
        await store.get(unfinished)
    await store.put(unfinished, b"done")  # the leftover temp file does not block the key
    assert await store.get(unfinished) == b"done"


def test_puts_into_one_directory_share_its_fsync() -> None:
    """Group commit of directory fsyncs (lsmstore.storage.local._GroupSync): while one
    fsync runs, the threads asking meanwhile wait for the *next* one -- one fsync for
    all of them, begun after they asked -- and its failure fails exactly them."""
    from concurrent.futures import ThreadPoolExecutor

    from lsmstore.storage.local import _GroupSync

    calls: list[int] = []
    release = [threading.Event() for _ in range(3)]

    def fsync(path: str) -> None:
        n = len(calls)
        calls.append(n)
        assert release[n].wait(60)
        if n == 1:
            raise OSError(5, "EIO")

    ds = _GroupSync(fsync)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(ds.sync, "/d")
        deadline = time.monotonic() + 60
        while not calls:  # the first thread runs fsync 0
            assert time.monotonic() < deadline
            time.sleep(0.001)
        second = [pool.submit(ds.sync, "/d") for _ in range(2)]
        while ds.waiting < 2:  # both drew fsync 1: it begins after they asked
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert not second[0].done() and not second[1].done()
        release[0].set()
        assert first.result(60) is None
        release[1].set()
        for f in second:
            with pytest.raises(OSError):
                f.result(60)
        assert calls == [0, 1]  # one fsync for both waiters
        third = pool.submit(ds.sync, "/d")  # a later put starts afresh
        release[2].set()
        assert third.result(60) is None
    assert calls == [0, 1, 2]


async def test_put_fresh_is_durable_when_its_future_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``put_fresh`` returns once the file is written and readable; its future ends
    after the file's fsync and then the directory's; a failed fsync fails the future
    (the put itself had returned)."""
    store = LocalStore(tmp_path, sync="file")
    await store.put("data/first", b"")  # the directory exists: no fsync of a new one
    order: list[str] = []
    gate = threading.Event()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        assert gate.wait(60)
        real_fsync(fd)
        order.append("file")

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(local, "_sync_dir", lambda path: order.append(path))
    durable = await store.put_fresh("data/x", b"fresh")
    assert await store.get("data/x") == b"fresh"
    assert not durable.done() and order == []
    gate.set()
    await durable
    assert order == ["file", str(tmp_path / "data")]
    assert [p.name for p in (tmp_path / "data").iterdir() if p.name.startswith(TMP_MARK)] == []

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    durable = await store.put_fresh("data/y", b"lost?")
    with pytest.raises(UnavailableError, match="Input/output error") as e:
        await durable
    assert e.value.outcome_unknown


async def test_large_puts_start_write_back_piece_by_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put past ``SYNC_BYTES`` is written in pieces of that size, each piece's
    write-back started once it is written (consecutive ranges covering the file, the
    bytes already there); a smaller put starts none.  The objects read back whole."""
    piece = 4096
    monkeypatch.setattr(local, "SYNC_BYTES", piece)
    started: list[tuple[str, int, int]] = []

    def start(fd: int, offset: int, n: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        assert os.path.getsize(path) == offset + n  # the piece is written
        started.append((os.path.basename(path), offset, n))

    monkeypatch.setattr(local, "_start_writeback", start)
    store = LocalStore(tmp_path)
    data = os.urandom(3 * piece + 100)

    await store.put("big", data)
    assert await store.get("big") == data
    assert [(o, n) for _, o, n in started] == [
        (0, piece),
        (piece, piece),
        (2 * piece, piece),
        (3 * piece, 100),
    ]
    assert all(name.startswith(TMP_MARK) for name, _, _ in started)

    started.clear()
    await store.put("small", data[: piece - 1])
    durable = await store.put_fresh("fresh", data[:100])
    await durable
    assert started == []

    started.clear()
    durable = await store.put_fresh("fresh-big", data)
    await durable
    assert await store.get("fresh-big") == data
    assert [(o, n) for _, o, n in started][-1] == (3 * piece, 100)

    async def source() -> AsyncIterator[bytes]:
        for i in range(0, len(data), 1000):
            yield data[i : i + 1000]

    started.clear()
    monkeypatch.setattr(LocalStore, "WRITE_BYTES", 2 * piece)
    await store.put_stream("streamed", source())
    assert await store.get("streamed") == data
    offsets = [(o, n) for _, o, n in started]
    assert offsets[0][0] == 0 and all(a + m == b for (a, m), (b, _) in itertools.pairwise(offsets))
    assert sum(n for _, n in offsets) == len(data)


def test_write_back_hint_is_found_on_linux() -> None:
    assert local._start_writeback is not None or not sys.platform.startswith("linux")


async def test_a_cancelled_streamed_put_closes_its_file_after_its_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed put cancelled while a piece is being written in its thread: the temp
    file is closed only once that write is over -- a descriptor closed under a running
    write could be reused by another open and receive the rest of the data.  The write
    waits (at most a second) for the close to come first: a put that does not wait for
    its write lets the close come first."""
    store = LocalStore(tmp_path)
    entered, closed, checked = threading.Event(), threading.Event(), threading.Event()
    fd_was_open: list[bool] = []
    real_write, real_discard = local._write_all, local._discard

    def write_all(fd: int, data: bytes | memoryview, offset: int = 0) -> None:
        entered.set()
        closed.wait(1.0)
        try:
            os.fstat(fd)
            fd_was_open.append(True)
        except OSError:
            fd_was_open.append(False)
        checked.set()
        if fd_was_open[-1]:
            real_write(fd, data, offset)

    def discard(tmp: str, f: Any, after: Any = None) -> None:
        real_discard(tmp, f, after)
        closed.set()

    monkeypatch.setattr(local, "_write_all", write_all)
    monkeypatch.setattr(local, "_discard", discard)

    async def chunks() -> AsyncIterator[bytes]:
        yield b"x" * LocalStore.WRITE_BYTES
        await asyncio.Event().wait()

    task = asyncio.create_task(store.put_stream("k", chunks()))
    assert await asyncio.to_thread(entered.wait, 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(checked.wait, 30)
    assert fd_was_open == [True]
    assert not await asyncio.to_thread(os.path.exists, tmp_path / "k")
    left = await asyncio.to_thread(lambda: [p for p in tmp_path.rglob("*") if p.is_file()])
    assert left == []  # no temp file either


def test_sync_mode_is_checked() -> None:
    with pytest.raises(InvalidInputError, match="sync mode"):
        LocalStore(Path("/x"), sync="sometimes")
    assert LocalStore(Path("/x"), sync="file").sync == "file"
    assert local._syncfs is not None or not sys.platform.startswith("linux")
    assert LocalStore(Path("/x")).sync == ("file" if local._syncfs is None else "filesystem")


async def test_concurrent_puts_share_one_syncfs_and_its_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``filesystem`` mode: no put fsyncs its file or directory; puts asking while a
    syncfs runs wait for the next one -- one syncfs for all of them -- and its failure
    fails every one of them (UnavailableError, outcome unknown); a later put starts
    afresh."""
    calls: list[int] = []
    release = [threading.Event() for _ in range(3)]

    def syncfs(fd: int) -> None:
        os.fstat(fd)  # a real descriptor, kept open
        n = len(calls)
        calls.append(n)
        assert release[n].wait(60)
        if n == 1:
            raise OSError(errno.EIO, "Input/output error")

    store = LocalStore(tmp_path, sync="filesystem", syncfs=syncfs)
    await asyncio.to_thread(os.mkdir, tmp_path / "d")
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))

    async def until(check: Any) -> None:
        deadline = time.monotonic() + 60
        while not check():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.001)

    first = await store.put_fresh("d/a", b"a")
    await until(lambda: calls == [0])  # the first put runs syncfs 0
    group = local._FS_SYNCS[((await asyncio.to_thread(os.stat, tmp_path)).st_dev, syncfs)]
    second = [await store.put_fresh(f"d/{k}", k.encode()) for k in "bc"]
    await until(lambda: group.waiting == 2)  # both drew syncfs 1: it begins after they wrote
    assert not first.done() and not any(f.done() for f in second)
    release[0].set()
    await first
    release[1].set()
    for f in second:
        with pytest.raises(UnavailableError, match="Input/output error") as e:
            await f
        assert e.value.outcome_unknown
    assert calls == [0, 1]  # one syncfs for both
    release[2].set()
    await (await store.put_fresh("d/d", b"d"))  # a later put starts afresh
    assert calls == [0, 1, 2] and fsyncs == []
    assert [await store.get(f"d/{k}") for k in "abcd"] == [b"a", b"b", b"c", b"d"]


async def test_a_filesystem_mode_put_is_durable_before_its_name_appears(tmp_path: Path) -> None:
    """``filesystem`` mode, a put through a temp file: one syncfs ends before the link
    (so no crash leaves a CREATE key -- a range, a metarange -- naming a partial file
    that a later put would take as done) and one after it (the name itself)."""
    seen: list[list[str]] = []

    def syncfs(fd: int) -> None:
        seen.append(sorted(p.name for p in (tmp_path / "r").iterdir()))

    store = LocalStore(tmp_path, sync="filesystem", syncfs=syncfs)
    await store.put("r/k", b"range bytes")
    assert len(seen) == 2
    assert "k" not in seen[0] and any(n.startswith(TMP_MARK) for n in seen[0])
    assert "k" in seen[1]
    assert await store.get("r/k") == b"range bytes"

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    # The sync before the link fails: nothing is published, the temp file is gone, and
    # the outcome is known (the key was never there).
    store = LocalStore(tmp_path, sync="filesystem", syncfs=failing)
    with pytest.raises(UnavailableError, match="Input/output error") as e:
        await store.put("r/other", b"lost")
    assert not e.value.outcome_unknown
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["k"]


def test_a_failed_syncfs_fails_puts_that_wrote_before_it() -> None:
    """A syncfs reports a write-back error once, to whichever syncfs runs next: a put
    whose mark was taken before that failure fails even when its own syncfs succeeds;
    one that began writing after it does not."""
    from lsmstore.storage.local import _GroupSync

    results = iter([OSError(errno.EIO, "Input/output error"), None, None])

    def sync(path: str) -> None:
        error = next(results)
        if error is not None:
            raise error

    group = _GroupSync(sync)
    before = group.mark()
    with pytest.raises(OSError, match="Input/output error"):
        group.sync("/fs")
    with pytest.raises(OSError, match="Input/output error"):
        group.sync("/fs", before)  # its own syncfs succeeded, an earlier one did not
    group.sync("/fs", group.mark())


async def test_a_create_that_finds_its_key_returns_once_the_name_is_durable(
    tmp_path: Path,
) -> None:
    """A CREATE whose key exists answers ObjectExistsError -- which its caller takes as
    "already written" -- only after a sync that began after it found the key: the put
    that linked the name may still be waiting for its own."""
    calls: list[int] = []

    def syncfs(fd: int) -> None:
        calls.append(fd)

    store = LocalStore(tmp_path, sync="filesystem", syncfs=syncfs)
    await store.put("r/k", b"range bytes", PutMode.CREATE)
    assert len(calls) == 2  # data, then name
    with pytest.raises(ObjectExistsError):
        await store.put("r/k", b"range bytes", PutMode.CREATE)
    assert len(calls) == 4  # data, then the found name made durable


def test_auto_shares_syncfs_only_on_filesystems_whose_syncfs_persists() -> None:
    """``auto`` takes ``filesystem`` on the local filesystems of SYNCFS_FILESYSTEMS, and
    ``file`` elsewhere (FUSE, overlayfs, network and pseudo filesystems), by the type of
    the mount holding the root (/proc/self/mountinfo, octal escapes decoded, the deepest
    mount wins)."""
    mountinfo = (
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "40 27 0:50 / /mnt/my\\040data rw - fuse.s3fs s3fs rw\n"
        "41 27 0:51 / /srv rw - overlay overlay rw\n"
        "42 41 0:52 / /srv/fast rw - xfs /dev/vdb rw\n"
    )
    assert local.filesystem_type("/mnt/my data/ns", mountinfo) == "fuse.s3fs"
    assert local.filesystem_type("/srv/ns", mountinfo) == "overlay"
    assert local.filesystem_type("/srv/fast/ns", mountinfo) == "xfs"
    assert local.filesystem_type("/srvx/ns", mountinfo) == "ext4"
    assert local.filesystem_type("/x", "garbage\n\n - \n") == ""
    assert LocalStore(Path("/proc/lsmstore-x")).sync == "file"  # proc: never syncfs
    assert LocalStore(Path("/proc/lsmstore-x"), sync="file").sync == "file"


def test_a_forked_child_puts_while_the_parent_held_the_sync_registry(tmp_path: Path) -> None:
    """A child forked while another thread of the parent holds the shared-sync registry's
    lock starts with a registry of its own: its first put does not wait forever."""
    store = LocalStore(tmp_path, sync="filesystem")
    asyncio.run(store.put("before", b"parent"))
    with local._FS_SYNCS_LOCK:  # as a parent thread taking a put's group would
        pid = os.fork()
        if pid == 0:  # the child: one put, then out without the parent's clean-up
            code = 1
            try:
                asyncio.run(LocalStore(tmp_path, sync="filesystem").put("child", b"c"))
                code = 0
            finally:
                os._exit(code)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the child's put waited on the parent's registry lock")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert asyncio.run(store.get("child")) == b"c"
