"""Private local files: what lsmstore creates on the local disk is its owner's alone.

Every directory lsmstore creates for its state (the home, the embedded RefStore, the
cache, ``local://`` namespaces) is made ``0700`` and every file ``0600``, whatever the
process's umask: the RefStore, cached data and staged objects hold other users' data
and the signing secret would let its reader act as any key.  Directories that exist
already keep their mode (an operator may have chosen it), except the ones lsmstore
owns outright (the embedded RefStore's directory), which :func:`tighten` narrows.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_dirs(path: str | os.PathLike[str]) -> None:
    """Create ``path`` and its missing parents, each new one ``0700``."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        make_dirs(parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        if not os.path.isdir(path):  # a file where a directory must be, as makedirs says
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path) from None
        return
    os.chmod(path, DIR_MODE)  # mkdir's mode is masked by the umask: 0700 at most anyway


def create_file(path: str | os.PathLike[str], *, exclusive: bool = False) -> int:
    """Open ``path`` for writing, created ``0600`` if absent (FileExistsError when it
    exists and ``exclusive``); a file descriptor."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else 0)
    return os.open(path, flags, FILE_MODE)


def write_file(path: str | os.PathLike[str], *chunks: bytes, tmp_mark: str = ".tmp-") -> None:
    """Replace ``path`` with ``chunks`` atomically: a ``0600`` temp file beside it
    (``<path><tmp_mark><random>``) renamed over it."""
    path = os.fspath(path)
    make_dirs(os.path.dirname(path) or ".")
    tmp = f"{path}{tmp_mark}{secrets.token_hex(6)}"
    fd = create_file(tmp, exclusive=True)
    try:
        with open(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def tighten(path: str | os.PathLike[str]) -> None:
    """Narrow an existing file to ``0600`` or directory to ``0700`` (one lsmstore owns)."""
    st = os.stat(path)
    want = DIR_MODE if stat.S_ISDIR(st.st_mode) else FILE_MODE
    if stat.S_IMODE(st.st_mode) & ~want:
        os.chmod(path, want)
