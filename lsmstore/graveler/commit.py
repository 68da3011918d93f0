"""Commit objects: immutable, named by the SHA-256 of their canonical serialisation.

The serialisation (docs/format.md, "Ranges, metaranges and commits") is, in order, with
big-endian integers and UTF-8 strings each preceded by its byte length as a u32::

    b"LSMC"  0x01                    magic, version
    metarange_id                     64 ASCII hex bytes
    u64 generation   u64 created_at  (seconds since the Unix epoch)
    u8 n  parent_1 .. parent_n       64 ASCII hex bytes each, n <= 2, in the given order
    str committer   str message
    u32 m  (str key, str value) * m  metadata, keys in increasing byte order, unique

The object stored at ``layout.commit_key(id)`` is exactly these bytes, so
``id == sha256(object)``: a reader verifies it and so detects any corruption.
``generation`` is 1 for a commit without parents, else ``max(parent generations) + 1``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

from lsmstore import layout
from lsmstore.errors import (
    CorruptFileError,
    ObjectExistsError,
    ObjectNotFoundError,
    RefNotFoundError,
)
from lsmstore.graveler.source import FileCacheLike
from lsmstore.storage.base import ObjectStore, PutMode
from lsmstore.types import MAGIC, U32, U64, VERSION, Commit, check_tree_id


def commit_id(commit: Commit) -> str:
    return commit.id


def next_generation(parents: Iterable[Commit]) -> int:
    """The generation of a commit whose parents are ``parents``."""
    return max((p.generation for p in parents), default=0) + 1


class _Buf:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.p = 0

    def take(self, n: int) -> bytes:
        end = self.p + n
        if end > len(self.data):
            raise ValueError(f"truncated: {n} bytes wanted at offset {self.p}")
        out = self.data[self.p : end]
        self.p = end
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        return int(U32.unpack(self.take(4))[0])

    def u64(self) -> int:
        return int(U64.unpack(self.take(8))[0])

    def text(self) -> str:
        return self.take(self.u32()).decode("utf-8")

    def hex_id(self) -> str:
        return self.take(64).decode("ascii")


def decode_commit(data: bytes, name: str = "commit") -> Commit:
    """Parse and validate a serialised commit; :class:`CorruptFileError` naming ``name``
    for anything but the canonical serialisation of a valid commit."""
    try:
        buf = _Buf(data)
        if buf.take(4) != MAGIC:
            raise ValueError("bad magic (not a commit object)")
        version = buf.u8()
        if version != VERSION:
            raise ValueError(f"unknown commit format version {version}")
        metarange_id = buf.hex_id()
        generation = buf.u64()
        created_at = buf.u64()
        parents = tuple(buf.hex_id() for _ in range(buf.u8()))
        committer = buf.text()
        message = buf.text()
        metadata: dict[str, str] = {}
        for _ in range(buf.u32()):
            key = buf.text()
            metadata[key] = buf.text()
        if buf.p != len(data):
            raise ValueError(f"{len(data) - buf.p} trailing bytes")
        commit = Commit(metarange_id, parents, committer, message, created_at, metadata, generation)
    except (ValueError, UnicodeDecodeError) as e:  # InvalidInputError is a ValueError
        raise CorruptFileError(name, f"malformed commit object: {e}") from None
    if commit.serialize() != data:
        raise CorruptFileError(name, "commit object is not in canonical form")
    return commit


async def write_commit(store: ObjectStore, commit: Commit) -> str:
    """Store ``commit`` at ``layout.commit_key(id)`` in create mode; its ID.

    An object already there has the same bytes (the ID is their digest) and is kept.
    """
    data = commit.serialize()
    cid = hashlib.sha256(data).hexdigest()
    try:
        await store.put(layout.commit_key(cid), data, PutMode.CREATE)
    except ObjectExistsError:
        pass
    return cid


def _parser(cid: str) -> Callable[[bytes, str], Commit]:
    def parse(data: bytes, name: str) -> Commit:
        if hashlib.sha256(data).hexdigest() != cid:
            raise CorruptFileError(name, "commit object does not match its ID (SHA-256)")
        return decode_commit(data, name)

    return parse


async def read_commit(
    store: ObjectStore, cid: str, *, cache: FileCacheLike | None = None
) -> Commit:
    """The commit named ``cid`` (read through ``cache`` when given).

    Raises :class:`InvalidInputError` for a malformed ID, :class:`RefNotFoundError` when
    no such commit is stored, :class:`CorruptFileError` when the object is damaged.
    """
    check_tree_id(cid, "commit")
    key = layout.commit_key(cid)
    parse = _parser(cid)
    try:
        if cache is not None:
            return await cache.get(store, key, parse, kind="commit")
        return parse(await store.get(key), key)
    except ObjectNotFoundError as e:
        raise RefNotFoundError(f"commit {cid} not found in {store.url}") from e
