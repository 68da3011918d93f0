"""An object store on a local filesystem: the embedded default (``file:///abs/path``).

Key ``a/b/c`` is the file ``<root>/a/b/c``.  A put writes a temp file in the target
directory, makes it durable, publishes it atomically -- ``os.link`` for CREATE (fails if
the key exists, so check and write are one step), ``os.replace`` for OVERWRITE -- and
makes the name durable (and any directory it had to create: fsynced at once).  Readers
therefore see no object or the whole object; a crash mid-put leaves at most a temp
file (``.lsm-tmp.*``), which ``list`` never shows and no key can name.  Deletes are not
fsynced (a lost delete is redone by garbage collection) and leave empty directories
behind.

**Two ways to be durable** (``sync``, :data:`SYNC_MODES`; the ``local_sync`` setting).
Either way a put returns only once its bytes and its name survive a crash.

* ``file``: the temp file is fsynced before the link or rename and the directory after
  it (shared, below).
* ``filesystem`` (``auto``'s choice where ``syncfs`` reports write-back errors: Linux
  5.8 and later, on a filesystem of :data:`SYNCFS_FILESYSTEMS`): no per-file fsync; a
  put waits for a ``syncfs(2)`` of the whole filesystem that *began after its write*,
  one shared by every put that finished writing while the previous one ran
  (:class:`_GroupSync`), and a put through a temp file waits for a second one that
  began after its link or rename.  One syncfs
  writes back the group's file data, their inodes and the directory entries, and
  commits the journal: the fsync cost is paid once per group instead of once per
  object.  The price: a syncfs also writes back whatever *else* is dirty on that
  filesystem (another program's unsynced writes), and the puts of that group wait for
  it (docs/storage.md, "Group durability").

Crash states in ``filesystem`` mode.  *Before the first sync* a crash leaves the temp
file missing, empty or partial: invisible, as in ``file`` mode.  *Between the two
syncs* (data durable, link or rename not yet): the old state, or the new name naming
the whole, durable file.  The data is durable before the name is published because a
CREATE of a content-addressed key (ranges, metaranges, commits: a put that finds the
key takes the object as already written) must never find a partial file under that
name after a crash; publishing first and syncing once would allow exactly that (the
filesystem may persist the link before the data).  A fresh put (below) writes under
its unique key directly and needs one sync: until it ends, nothing durable names the
key, and a crash may leave it missing, empty or partial, as the contract allows.

Write-back errors: a syncfs reports an error that occurred since its descriptor was
opened, once, to whichever syncfs runs next.  Each filesystem's group therefore keeps
one descriptor open for the life of the process (opened before the first put's write),
and a put fails when *any* syncfs that ended after it began writing failed, not only
its own: an error is never lost to a put whose group did not see it.

**Group commit.** Concurrent puts share durability work: they run in a pool of
:data:`WRITE_THREADS` threads of their own (the filesystem merges concurrent file
fsyncs into one journal commit; the default pool's few threads would serialise them),
and in ``file`` mode puts into one directory share its fsync (:class:`_GroupSync`): a
put returns once an fsync of the directory that *began after its link or rename* has
ended, and while one runs, every put published meanwhile waits for the next, which one
of them starts.  Each acknowledged put is therefore covered by a directory fsync of its
own entry -- the guarantee of one fsync per put, at the cost of one per group.  The
``filesystem`` mode's syncfs is shared the same way, per filesystem.

Limits of the mapping: one key cannot be both an object and a "directory" of other keys
(``a`` and ``a/b``): the second put raises :class:`InvalidNameError`.  The filesystem must
support hard links.  ``list`` walks the directories under the prefix in key order,
reading one directory at a time: its cost is proportional to the number of entries under
the prefix (subtrees entirely at or before ``after`` are skipped).

**Fresh puts** (:meth:`LocalStore.put_fresh`, a data object under a new unique key):
the file is written under its key directly, and the caller goes on (stages the
entry naming it) while the same worker thread fsyncs the file and then the directory
(``filesystem`` mode: waits for a shared syncfs); the caller's writer waits for that
before the entry becomes durable.  A crash before
then leaves the file missing, empty or partial, and nothing durable names it.

**Incremental write-back** (:data:`SYNC_BYTES`, RocksDB's ``bytes_per_sync``): a put
whose file reaches that size is written in pieces of that size, and after each piece the kernel is
asked to start writing it back (``sync_file_range(SYNC_FILE_RANGE_WRITE)``, which
waits for nothing and makes nothing durable).  A large file (a compaction's L2 output)
then reaches its own fsync with little left to write, instead of handing the journal
commit that a concurrent small put's fsync triggers several MiB to write first.
Durability still rests on the fsyncs (or syncfs) alone.  Where the call is missing (not Linux), the
pieces are written without it.

All file I/O runs in worker threads (reads in the default pool, puts in the write pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import itertools
import os
import re
import secrets
import sys
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import BinaryIO, TypeVar

from lsmstore import private
from lsmstore.errors import (
    InvalidInputError,
    InvalidNameError,
    NotAvailableError,
    ObjectExistsError,
    ObjectNotFoundError,
    UnavailableError,
)
from lsmstore.storage.base import STREAM_CHUNK, ObjectMeta, ObjectStore, PutMode, check_key

#: Temp files start with this; a key segment may not (so no key names a temp file).
TMP_MARK = ".lsm-tmp."

#: Threads of the pool that runs puts (write, fsync, publish, directory fsync): enough
#: concurrent fsyncs for the filesystem to batch them (BENCHMARKS.md, "Server").
WRITE_THREADS = 64

#: A put whose file reaches this size is written in pieces of this size, each one's write-back
#: started before the next (module docstring); 0 turns it off.
SYNC_BYTES = 1 << 20

_NOT_FOUND = (FileNotFoundError, NotADirectoryError, IsADirectoryError)

T = TypeVar("T")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _find_sync_file_range() -> Callable[[int, int, int], None] | None:
    """``sync_file_range(fd, offset, n, SYNC_FILE_RANGE_WRITE)`` from the C library, or
    None where there is none (it is Linux's; Python's os module does not carry it)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    write = 2  # SYNC_FILE_RANGE_WRITE: start write-back of the range's dirty pages

    def start(fd: int, offset: int, n: int) -> None:
        fn(fd, offset, n, write)  # a hint: a failure leaves the work to the fsync

    return start


_start_writeback = _find_sync_file_range()


def _find_syncfs() -> Callable[[int], None] | None:
    """``syncfs(fd)`` from the C library where it reports write-back errors (Linux 5.8
    and later: before, it returned 0 whatever happened), raising OSError; None
    elsewhere (Python's os module does not carry it)."""
    version = re.match(r"(\d+)\.(\d+)", os.uname().release) if sys.platform == "linux" else None
    if version is None or (int(version[1]), int(version[2])) < (5, 8):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int

    def syncfs(fd: int) -> None:
        if fn(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    return syncfs


_syncfs = _find_syncfs()

#: Filesystems whose ``syncfs`` writes back and commits everything a per-file fsync
#: would, and reports write-back errors (``auto`` chooses ``filesystem`` only on these):
#: not FUSE (``syncfs`` never asks the FUSE server to persist; an fsync does), not
#: network filesystems, not overlayfs (older kernels do not pass the upper
#: filesystem's write-back errors up).
SYNCFS_FILESYSTEMS = frozenset({"ext4", "ext3", "xfs", "btrfs", "f2fs", "tmpfs"})


def filesystem_type(path: str, mountinfo: str | None = None) -> str:
    """The type of the filesystem holding ``path`` (or its nearest existing ancestor)
    from ``/proc/self/mountinfo`` (``mountinfo``: that file's text, a test's hook); ""
    when it cannot be told."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
                mountinfo = f.read(1 << 20)
        except OSError:
            return ""
    path = os.path.realpath(path)
    best, kind = -1, ""
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields = head.split(" ")
        if not sep or len(fields) < 5 or not tail:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:  # the last of equal mounts is on top
            best, kind = len(point), tail.split(" ")[0]
    return kind


#: How a put is made durable (``LocalStore(sync=...)``, the ``local_sync`` setting):
#: ``file`` fsyncs each file and its directory; ``filesystem`` shares one ``syncfs`` of
#: the whole filesystem among the puts of a group (module docstring); ``auto`` is
#: ``filesystem`` where ``syncfs`` is available and the root's filesystem is one of
#: :data:`SYNCFS_FILESYSTEMS`, else ``file``.
SYNC_MODES = ("auto", "file", "filesystem")


def _write_all(fd: int, data: bytes | memoryview, offset: int = 0) -> None:
    """Write ``data`` to ``fd``, which is at ``offset``; once the file reaches
    :data:`SYNC_BYTES`, in pieces of that size, each one's write-back started."""
    view = memoryview(data)
    hint = _start_writeback if SYNC_BYTES and offset + len(view) >= SYNC_BYTES else None
    step = SYNC_BYTES if hint is not None else len(view)
    while view:
        part, view = view[:step], view[step:]
        n = len(part)
        while part:
            part = part[os.write(fd, part) :]
        if hint is not None:
            hint(fd, offset, n)
        offset += n


class _GroupSync:
    """One sync (a directory's fsync, a filesystem's syncfs) shared by the threads that
    need one (module docstring).

    Syncs run one at a time and are numbered.  A thread that asks while number ``n - 1``
    has begun (running or done) needs number ``n``: it either starts it (none running)
    or waits for it.  The sync numbered ``n`` begins after every thread that drew ``n``
    asked, so after their writes and links.  A failed sync fails exactly the threads
    that drew its number (a later put starts afresh) -- and, for a caller that passes
    ``since`` (a :meth:`mark` taken before it wrote), also when any sync that ended
    after that mark failed: a filesystem-wide sync reports a write-back error once, to
    whichever sync runs next, which may be one its caller did not draw."""

    #: Failed sync numbers remembered for their waiters (most recent).
    KEEP_FAILURES = 64

    def __init__(self, sync: Callable[[str], None] = _fsync_dir) -> None:
        self._sync = sync
        self._cond = threading.Condition(threading.Lock())
        self._begun = 0  # number of the last sync begun
        self._done = 0  # number of the last sync ended
        self._running = False
        self._failed: dict[int, OSError] = {}
        self._last_failed = 0  # number of the last failed sync
        self.waiting = 0  # threads waiting for a sync another one runs
        self.users = 0  # threads inside sync() (guarded by the registry's lock)
        self.runs = 0  # syncs run so far

    def mark(self) -> int:
        """The number of the last sync ended: pass it to :meth:`sync` as ``since``."""
        with self._cond:
            return self._done

    def sync(self, path: str, since: int | None = None) -> None:
        with self._cond:
            mine = self._begun + 1
            while True:
                if self._done >= mine:
                    self._raise_failure(mine, since)
                    return
                if not self._running:
                    self._running = True
                    self._begun = mine
                    break
                self.waiting += 1
                self._cond.wait()
                self.waiting -= 1
        error = None
        try:
            self._sync(path)
        except OSError as e:
            error = e
        with self._cond:
            self._running = False
            self._done = mine
            self.runs += 1
            if error is not None:
                self._failed[mine] = error
                self._last_failed = mine
                while len(self._failed) > self.KEEP_FAILURES:
                    del self._failed[min(self._failed)]
            self._cond.notify_all()
            self._raise_failure(mine, since)

    def _raise_failure(self, mine: int, since: int | None) -> None:
        """Raise the error of sync ``mine``, or (``since`` given) of a failed sync
        numbered after ``since`` (called holding the lock)."""
        error = self._failed.get(mine)
        if error is None and since is not None and self._last_failed > since:
            error = self._failed.get(self._last_failed) or OSError(
                errno.EIO, "an earlier sync of this filesystem failed"
            )
        if error is not None:
            raise error


_SYNCS: dict[str, _GroupSync] = {}
_SYNCS_LOCK = threading.Lock()


def _sync_dir(path: str) -> None:
    """fsync ``path`` (a directory), shared with concurrent callers (:class:`_GroupSync`)."""
    with _SYNCS_LOCK:
        ds = _SYNCS.get(path)
        if ds is None:
            ds = _SYNCS[path] = _GroupSync()
        ds.users += 1
    try:
        ds.sync(path)
    finally:
        with _SYNCS_LOCK:
            ds.users -= 1
            if ds.users == 0:
                del _SYNCS[path]


#: A filesystem's shared syncfs, by (device, syncfs function): each keeps a descriptor
#: of a directory on that filesystem open for the life of the process (syncfs reports
#: a write-back error to a descriptor opened before it); at most one per filesystem
#: and function, so bounded.  The device number cannot name another filesystem while
#: the entry lives: the open descriptor keeps the filesystem's superblock, and so its
#: number, in use even after an unmount (which it also turns into EBUSY unless lazy).
#: Emptied in a forked child (its locks may be held).
_FS_SYNCS: dict[tuple[int, Callable[[int], None]], _GroupSync] = {}
_FS_SYNCS_LOCK = threading.Lock()


def _forget_fs_syncs() -> None:
    """In a forked child: no group of the parent's (their locks may have been held by
    a thread the child does not have), and a fresh lock."""
    global _FS_SYNCS_LOCK
    _FS_SYNCS.clear()
    _FS_SYNCS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_fs_syncs)


def _filesystem_sync(dev: int, directory: str, syncfs: Callable[[int], None]) -> _GroupSync:
    """The shared syncfs of the filesystem ``dev`` (``directory`` is on it)."""
    with _FS_SYNCS_LOCK:
        group = _FS_SYNCS.get((dev, syncfs))
        if group is None:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)  # kept (above)

            def run(_path: str, fd: int = fd) -> None:
                syncfs(fd)

            group = _FS_SYNCS[(dev, syncfs)] = _GroupSync(run)
        return group


#: A put's share of a filesystem sync: the sync, and its mark taken before the put wrote.
_Group = tuple[_GroupSync, int]

_write_pool: ThreadPoolExecutor | None = None
_write_pool_pid = 0


def _write_pool_submit(fn: Callable[..., T], *args: object) -> Future[T]:
    """Start ``fn(*args)`` in the write pool (created on first use, anew in a forked
    child); the thread's own future, which ends only when ``fn`` does."""
    global _write_pool, _write_pool_pid
    pool = _write_pool
    if pool is None or _write_pool_pid != os.getpid():
        pool = _write_pool = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="lsm-put")
        _write_pool_pid = os.getpid()
    return pool.submit(fn, *args)


def _write_pool_future(fn: Callable[..., T], *args: object) -> asyncio.Future[T]:
    """Start ``fn(*args)`` in the write pool; its future on the running loop."""
    return asyncio.wrap_future(_write_pool_submit(fn, *args))


async def _in_write_pool(fn: Callable[..., T], *args: object) -> T:
    """Run ``fn(*args)`` in the write pool."""
    return await _write_pool_future(fn, *args)


def _settle(fut: asyncio.Future[None], error: BaseException | None) -> None:
    """Resolve ``fut`` (on its loop) unless its waiter gave up."""
    if not fut.done():
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)


def _tell(
    loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None], error: BaseException | None
) -> None:
    """From a worker thread: resolve ``fut`` on ``loop`` (nothing if the loop is closed:
    its waiter is gone, and the thread still finishes its work)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_settle, fut, error)


def _retrieved(fut: asyncio.Future[None]) -> None:
    """Mark a future's exception seen: its waiter may be gone (it re-raises nowhere)."""
    if not fut.cancelled():
        fut.exception()


def _write_parts(fd: int, parts: list[bytes], offset: int) -> None:
    """:func:`_write_all` of ``parts`` joined (in the worker thread, not the caller's)."""
    _write_all(fd, b"".join(parts), offset)


def _discard(tmp: str, f: BinaryIO, after: Future[None] | None = None) -> None:
    """Close and remove a temp file (a leftover one is invisible anyway); ``after``: a
    write to its descriptor that may still run -- it ends first, else its thread
    could write into whatever file reuses the descriptor's number."""
    if after is not None:
        wait([after])
    with contextlib.suppress(OSError):
        f.close()
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def _copy_files(out: int, paths: Sequence[tuple[str, str]]) -> int:
    """Append the files ``(key, path)`` to descriptor ``out`` (at its start); the bytes
    written.  ObjectNotFoundError names a missing one."""
    pos = 0
    for key, path in paths:
        try:
            src = os.open(path, os.O_RDONLY)
        except _NOT_FOUND as e:
            raise ObjectNotFoundError(key) from e
        try:
            size = os.fstat(src).st_size
            done = 0
            while done < size:
                try:
                    n = os.copy_file_range(src, out, size - done, done, pos)
                except OSError as e:
                    if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    n = os.pwrite(out, os.pread(src, min(size - done, 8 << 20), done), pos)
                if n == 0:
                    break  # the file shrank under us: it cannot (data files are immutable)
                done += n
                pos += n
        finally:
            os.close(src)
    return pos


class LocalStore(ObjectStore):
    #: Objects handed over per worker-thread hop of :meth:`list`.
    PAGE = 1000
    #: Bytes of a streamed put gathered per worker-thread hop.
    WRITE_BYTES = 1 << 20

    def __init__(
        self,
        root: Path | str,
        *,
        sync: str = "auto",
        syncfs: Callable[[int], None] | None = None,
    ) -> None:
        """``sync``: one of :data:`SYNC_MODES` (``filesystem`` raises NotAvailableError
        where ``syncfs`` is missing); ``syncfs``: the ``syncfs(fd)`` to call instead of
        the C library's (a test's hook)."""
        root = Path(root)
        if not root.is_absolute():
            raise InvalidInputError(f"local store root must be an absolute path, got {root}")
        if sync not in SYNC_MODES:
            raise InvalidInputError(
                f"local store sync mode must be one of {', '.join(SYNC_MODES)}, got {sync!r}"
            )
        syncfs = syncfs or _syncfs
        if sync == "filesystem" and syncfs is None:
            raise NotAvailableError(
                "local store sync mode 'filesystem' needs syncfs (Linux 5.8 or later)"
            )
        if sync == "auto" and filesystem_type(str(root)) not in SYNCFS_FILESYSTEMS:
            sync = "file"
        #: The filesystem-wide sync puts share, or None: each put fsyncs its own file.
        self._syncfs = None if sync == "file" else syncfs
        self.sync = "file" if self._syncfs is None else "filesystem"
        self.root = root
        self._root = os.path.normpath(root)
        self.url = root.as_uri()

    def _path(self, key: str) -> str:
        check_key(key)
        if any(part.startswith(TMP_MARK) for part in key.split("/")):
            raise InvalidNameError(
                f"invalid object key {key!r}: segments starting with {TMP_MARK!r} are reserved"
            )
        self._check_open()
        return os.path.join(self._root, key)

    def _unavailable(self, key: str, e: OSError, *, outcome_unknown: bool = False) -> Exception:
        return UnavailableError(
            f"local store {self._root}: {key}: {e.strerror or e}", outcome_unknown=outcome_unknown
        )

    # --- reads -----------------------------------------------------------------------

    def _read(self, key: str, path: str, start: int, end: int | None) -> bytes:
        try:
            with open(path, "rb") as f:
                if start:
                    f.seek(start)
                return f.read() if end is None else f.read(max(0, end - start))
        except _NOT_FOUND as e:
            raise ObjectNotFoundError(key) from e
        except OSError as e:
            raise self._unavailable(key, e) from e

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        return await asyncio.to_thread(self._read, key, path, 0, None)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        if start < 0:
            raise InvalidInputError(f"get_range of {key!r}: negative start {start}")
        path = self._path(key)
        return await asyncio.to_thread(self._read, key, path, start, max(start, end))

    def _stat(self, key: str, path: str) -> ObjectMeta:
        try:
            st = os.stat(path)
        except _NOT_FOUND as e:
            raise ObjectNotFoundError(key) from e
        except OSError as e:
            raise self._unavailable(key, e) from e
        if not os.path.isfile(path):
            raise ObjectNotFoundError(key)
        return ObjectMeta(key, st.st_size)

    async def head(self, key: str) -> ObjectMeta:
        path = self._path(key)
        return await asyncio.to_thread(self._stat, key, path)

    # --- writes ----------------------------------------------------------------------

    def _ensure_dir(self, key: str, directory: str) -> None:
        """Create ``directory`` and missing parents, fsyncing each new entry's parent."""
        if os.path.isdir(directory):
            return
        parent = os.path.dirname(directory)
        if directory == self._root:
            try:
                private.make_dirs(directory)
                _fsync_dir(parent)
            except OSError as e:  # the namespace itself is unusable, not the key
                raise UnavailableError(
                    f"local store root {self._root} cannot be created: {e.strerror or e}"
                ) from e
            return
        self._ensure_dir(key, parent)
        try:
            os.mkdir(directory, private.DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise InvalidNameError(
                    f"object key {key!r} conflicts with the existing object "
                    f"{os.path.relpath(directory, self._root)!r}"
                ) from None
            return
        _fsync_dir(parent)

    def _open_tmp(self, key: str, path: str) -> tuple[str, BinaryIO, _Group | None]:
        """A new temp file beside ``path`` (creating the directories), open for writing,
        and the filesystem sync its put will share (None in ``file`` mode)."""
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f"{TMP_MARK}{os.path.basename(path)}.{secrets.token_hex(8)}")
        fd = self._create(key, tmp, directory)
        try:
            group = self._group(key, fd, directory)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp, open(fd, "wb"), group  # closed by _publish/_discard

    def _group(self, key: str, fd: int, directory: str) -> _Group | None:
        """The shared syncfs of the filesystem holding ``fd`` and its mark, taken before
        the file is written (:class:`_GroupSync`); None in ``file`` mode."""
        if self._syncfs is None:
            return None
        try:
            group = _filesystem_sync(os.fstat(fd).st_dev, directory, self._syncfs)
        except OSError as e:
            raise self._unavailable(key, e) from e
        return group, group.mark()

    def _publish(
        self, key: str, path: str, tmp: str, f: BinaryIO, mode: PutMode, group: _Group | None
    ) -> None:
        """Make the temp file durable and close it, publish it under ``path``, make the
        name durable: in ``file`` mode an fsync of the file and one of the directory
        (shared), in ``filesystem`` mode a shared syncfs before the link or rename and
        one after.  The temp file is gone afterwards, whatever happens."""
        directory = os.path.dirname(path)
        published = False
        try:
            with f:
                f.flush()
                if group is None:
                    os.fsync(f.fileno())
            if group is not None:
                group[0].sync(directory, group[1])
            if mode is PutMode.CREATE:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    if os.path.isdir(path):
                        raise IsADirectoryError(errno.EISDIR, "is a directory") from None
                    # The caller takes the object as written: its name must be durable
                    # first (another put may have linked it and still be syncing).
                    if group is None:
                        _sync_dir(directory)
                    else:
                        group[0].sync(directory, group[1])
                    raise ObjectExistsError(key) from None
            else:
                os.replace(tmp, path)
            published = True
            if group is None:
                _sync_dir(directory)
            else:
                group[0].sync(directory, group[1])
        except (ObjectExistsError, UnavailableError):
            raise
        except (IsADirectoryError, NotADirectoryError) as e:
            raise InvalidNameError(
                f"object key {key!r} conflicts with an existing object or key prefix"
            ) from e
        except OSError as e:
            raise self._unavailable(key, e, outcome_unknown=published) from e
        finally:
            if mode is PutMode.CREATE or not published:
                _discard(tmp, f)

    def _put(self, key: str, path: str, data: bytes, mode: PutMode) -> None:
        tmp, f, group = self._open_tmp(key, path)
        try:
            _write_all(f.fileno(), data)
        except OSError as e:
            _discard(tmp, f)
            raise self._unavailable(key, e) from e
        self._publish(key, path, tmp, f, mode, group)

    async def put(self, key: str, data: bytes, mode: PutMode = PutMode.CREATE) -> None:
        path = self._path(key)
        await _in_write_pool(self._put, key, path, data, mode)

    def _put_fresh(
        self,
        key: str,
        path: str,
        data: bytes,
        loop: asyncio.AbstractEventLoop,
        written: asyncio.Future[None],
    ) -> None:
        """Write ``data`` straight to ``path`` (a fresh key: no temp file, no link),
        tell ``written`` on ``loop``, then fsync the file and its directory (``file``
        mode) or share a syncfs (``filesystem`` mode)."""
        directory = os.path.dirname(path)
        try:
            fd = self._create(key, path, directory)
            try:
                group = self._group(key, fd, directory)
                _write_all(fd, data)
            except (OSError, UnavailableError) as e:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(path)
                if isinstance(e, UnavailableError):
                    raise
                raise self._unavailable(key, e) from e
        except BaseException as e:
            _tell(loop, written, e)
            raise
        _tell(loop, written, None)
        try:
            try:
                if group is None:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if group is None:
                _sync_dir(directory)
            else:
                group[0].sync(directory, group[1])
        except OSError as e:
            raise self._unavailable(key, e, outcome_unknown=True) from e

    def _create(self, key: str, path: str, directory: str) -> int:
        """A new file at ``path`` (creating the directories), open for writing."""
        try:
            self._ensure_dir(key, directory)
            return private.create_file(path, exclusive=True)
        except FileExistsError:
            if os.path.isdir(path):
                raise InvalidNameError(
                    f"object key {key!r} conflicts with an existing key prefix"
                ) from None
            raise ObjectExistsError(key) from None
        except (IsADirectoryError, NotADirectoryError) as e:
            raise InvalidNameError(
                f"object key {key!r} conflicts with an existing object or key prefix"
            ) from e
        except OSError as e:
            raise self._unavailable(key, e) from e

    async def put_fresh(self, key: str, data: bytes) -> asyncio.Future[None]:
        """One hop to the write pool: the file is written under its key directly (the
        key is fresh: no reader, no temp file to publish), the caller goes on once it
        is, and the thread goes on to fsync the file and the directory (shared with the
        directory's other puts): the returned future."""
        path = self._path(key)
        loop = asyncio.get_running_loop()
        written: asyncio.Future[None] = loop.create_future()
        durable = _write_pool_future(self._put_fresh, key, path, data, loop, written)
        durable.add_done_callback(_retrieved)
        await written
        return durable

    async def put_stream(
        self, key: str, chunks: AsyncIterable[bytes], mode: PutMode = PutMode.CREATE
    ) -> ObjectMeta:
        """Write chunks to a temp file as they come (one worker-thread hop per
        ``WRITE_BYTES`` gathered), then publish it as :meth:`put` does."""
        path = self._path(key)
        tmp, f, group = await _in_write_pool(self._open_tmp, key, path)
        size = 0
        writing: Future[None] | None = None  # the last write handed to a thread
        try:
            pending: list[bytes] = []
            gathered = 0
            async for chunk in chunks:
                if not chunk:
                    continue
                pending.append(bytes(chunk))
                gathered += len(chunk)
                if gathered >= self.WRITE_BYTES:
                    writing = _write_pool_submit(_write_parts, f.fileno(), pending, size)
                    await asyncio.wrap_future(writing)
                    size += gathered
                    pending, gathered = [], 0
            if pending:
                writing = _write_pool_submit(_write_parts, f.fileno(), pending, size)
                await asyncio.wrap_future(writing)
                size += gathered
        except OSError as e:
            await asyncio.shield(asyncio.to_thread(_discard, tmp, f, writing))
            raise self._unavailable(key, e) from e
        except BaseException:  # cancelled: a write may still run in its thread
            await asyncio.shield(asyncio.to_thread(_discard, tmp, f, writing))
            raise
        await asyncio.shield(_in_write_pool(self._publish, key, path, tmp, f, mode, group))
        return ObjectMeta(key, size)

    async def compose(self, key: str, sources: Sequence[str]) -> ObjectMeta:
        """The sources copied into a temp file by the kernel (``copy_file_range``: no
        bytes through this process; on a filesystem that shares extents, no copy at
        all), then published as :meth:`put` does."""
        path = self._path(key)
        paths = [(source, self._path(source)) for source in sources]
        tmp, f, group = await _in_write_pool(self._open_tmp, key, path)
        try:
            size = await _in_write_pool(_copy_files, f.fileno(), paths)
        except ObjectNotFoundError:
            await asyncio.shield(asyncio.to_thread(_discard, tmp, f))
            raise
        except OSError as e:
            await asyncio.shield(asyncio.to_thread(_discard, tmp, f))
            raise self._unavailable(key, e) from e
        except BaseException:
            await asyncio.shield(asyncio.to_thread(_discard, tmp, f))
            raise
        await asyncio.shield(
            _in_write_pool(self._publish, key, path, tmp, f, PutMode.CREATE, group)
        )
        return ObjectMeta(key, size)

    async def get_stream(
        self, key: str, start: int = 0, end: int | None = None, *, chunk_size: int = STREAM_CHUNK
    ) -> AsyncIterator[bytes]:
        if start < 0 or chunk_size < 1:
            raise InvalidInputError(
                f"get_stream of {key!r}: start {start} must be >= 0 and chunk_size >= 1"
            )
        path = self._path(key)

        def open_at() -> BinaryIO:
            try:
                f = open(path, "rb")  # closed below
            except _NOT_FOUND as e:
                raise ObjectNotFoundError(key) from e
            except OSError as e:
                raise self._unavailable(key, e) from e
            if start:
                f.seek(start)
            return f

        f = await asyncio.to_thread(open_at)
        try:
            pos = start
            while end is None or pos < end:
                n = chunk_size if end is None else min(chunk_size, end - pos)
                try:
                    chunk = await asyncio.to_thread(f.read, n)
                except OSError as e:
                    raise self._unavailable(key, e) from e
                if not chunk:
                    return
                pos += len(chunk)
                yield chunk
        finally:
            f.close()

    def _delete(self, key: str, path: str, missing_ok: bool) -> None:
        try:
            if not os.path.isdir(path):
                os.unlink(path)
                return
        except _NOT_FOUND:
            pass
        except OSError as e:
            raise self._unavailable(key, e) from e
        if not missing_ok:
            raise ObjectNotFoundError(key)

    async def delete(self, key: str, *, missing_ok: bool = True) -> None:
        path = self._path(key)
        await asyncio.to_thread(self._delete, key, path, missing_ok)

    # --- listing ---------------------------------------------------------------------

    def _walk(
        self, directory: str, key_prefix: str, name_prefix: str, after: str | None
    ) -> Iterator[ObjectMeta]:
        """Objects under ``directory`` in key order.

        A directory ``d`` sorts as ``d/``: every key below it starts with that string,
        so sorting entries that way and recursing yields keys in lexicographic order.
        """
        try:
            with os.scandir(directory) as it:
                entries = [
                    (e.name + "/" if e.is_dir(follow_symlinks=False) else e.name, e)
                    for e in it
                    if e.name.startswith(name_prefix) and not e.name.startswith(TMP_MARK)
                ]
        except _NOT_FOUND:
            return
        except OSError as e:
            raise self._unavailable(key_prefix or "/", e) from e
        entries.sort(key=lambda item: item[0])
        for name, entry in entries:
            key = key_prefix + name
            if name.endswith("/"):
                if after is not None and after > key and not after.startswith(key):
                    continue  # every key below sorts at or before `after`
                yield from self._walk(entry.path, key, "", after)
            elif after is None or key > after:
                try:
                    size = entry.stat().st_size
                except FileNotFoundError:
                    continue  # deleted while we listed
                yield ObjectMeta(key, size)

    async def list(
        self, prefix: str = "", *, after: str | None = None
    ) -> AsyncIterator[ObjectMeta]:
        self._check_open()
        dir_part, _, name_prefix = prefix.rpartition("/")
        if dir_part:
            try:
                self._path(dir_part)
            except InvalidNameError:
                return  # no valid key starts with this prefix
        walker = self._walk(
            os.path.join(self._root, dir_part) if dir_part else self._root,
            dir_part + "/" if dir_part else "",
            name_prefix,
            after,
        )
        while True:
            page = await asyncio.to_thread(lambda: [*itertools.islice(walker, self.PAGE)])
            for meta in page:
                yield meta
            if len(page) < self.PAGE:
                return
            self._check_open()
