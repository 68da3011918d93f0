"""Commit objects: canonical bytes, IDs, validation, storage and corruption."""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsmstore import layout
from lsmstore.cache import FileCache
from lsmstore.errors import (
    CorruptFileError,
    InvalidInputError,
    NotFoundError,
    RefNotFoundError,
)
from lsmstore.graveler.commit import (
    commit_id,
    decode_commit,
    next_generation,
    read_commit,
    write_commit,
)
from lsmstore.graveler.metarange import EMPTY_METARANGE_ID
from lsmstore.storage.local import LocalStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.testing.faulty_store import FaultyStore
from lsmstore.types import Commit

M = hashlib.sha256(b"metarange").hexdigest()
P1 = hashlib.sha256(b"p1").hexdigest()
P2 = hashlib.sha256(b"p2").hexdigest()


def sample(**changes: object) -> Commit:
    fields: dict[str, object] = {
        "metarange_id": M,
        "parents": (P1, P2),
        "committer": "ana",
        "message": "merge résumé",
        "created_at": 1_700_000_000,
        "metadata": {"b": "2", "a": "1"},
        "generation": 7,
    }
    fields.update(changes)
    return Commit(**fields)  # type: ignore[arg-type]


def text(s: str) -> bytes:
    data = s.encode("utf-8")
    return struct.pack(">I", len(data)) + data


def test_serialisation_byte_by_byte() -> None:
    expected = (
        b"LSMC\x01"
        + M.encode()
        + struct.pack(">QQ", 7, 1_700_000_000)
        + b"\x02"
        + P1.encode()
        + P2.encode()
        + text("ana")
        + text("merge résumé")
        + struct.pack(">I", 2)
        + text("a")
        + text("1")
        + text("b")
        + text("2")
    )
    commit = sample()
    assert commit.serialize() == expected
    assert commit.id == commit_id(commit) == hashlib.sha256(expected).hexdigest()


def test_id_is_deterministic_and_covers_every_field() -> None:
    commit = sample()
    assert sample(metadata={"a": "1", "b": "2"}).id == commit.id  # map order does not matter
    assert sample(parents=[P1, P2]).id == commit.id
    variants = [
        sample(metarange_id=EMPTY_METARANGE_ID),
        sample(parents=(P2, P1)),  # parent order is meaningful: first parent is the branch
        sample(parents=(P1,)),
        sample(committer="bob"),
        sample(message="merge"),
        sample(created_at=1_700_000_001),
        sample(metadata={"a": "1"}),
        sample(metadata={"a": "1", "b": "3"}),
        sample(generation=8),
    ]
    assert len({v.id for v in variants} | {commit.id}) == len(variants) + 1


def test_generation() -> None:
    root = Commit(M, (), "a", "init", 0)
    assert root.generation == 1 == next_generation([])
    child = Commit(M, (root.id,), "a", "c", 1, generation=next_generation([root]))
    assert child.generation == 2
    other = sample()  # generation 7
    assert next_generation([child, other]) == 8


@pytest.mark.parametrize(
    "changes",
    [
        {"metarange_id": "xyz"},
        {"metarange_id": M.upper()},
        {"parents": (P1, P2, M)},
        {"parents": (P1, P1)},
        {"parents": ("short",)},
        {"created_at": -1},
        {"created_at": 2**63},
        {"created_at": 1.5},
        {"generation": 1},  # has parents
        {"parents": (), "generation": 2},
        {"metadata": {"k": 1}},
        {"metadata": {2: "v"}},
        {"committer": "\ud800"},  # lone surrogate: not encodable
        {"message": None},
    ],
)
def test_invalid_commits_are_rejected(changes: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        sample(**changes)


@settings(max_examples=60, deadline=None)
@given(
    parents=st.lists(
        st.binary(min_size=1, max_size=4).map(lambda b: hashlib.sha256(b).hexdigest()),
        max_size=2,
        unique=True,
    ),
    committer=st.text(),
    message=st.text(),
    created_at=st.integers(0, 2**63 - 1),
    metadata=st.dictionaries(st.text(), st.text(), max_size=5),
    extra=st.integers(0, 5),
)
def test_round_trip(
    parents: list[str],
    committer: str,
    message: str,
    created_at: int,
    metadata: dict[str, str],
    extra: int,
) -> None:
    generation = 1 if not parents else 2 + extra
    commit = Commit(M, tuple(parents), committer, message, created_at, metadata, generation)
    assert decode_commit(commit.serialize()) == commit


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\x00", "trailing"),
        (lambda b: b"LSMX" + b[4:], "magic"),
        (lambda b: b[:4] + b"\x02" + b[5:], "version"),
        (lambda b: b[:5] + b"Z" + b[6:], "hex"),
        (lambda b: b[:69] + struct.pack(">Q", 0) + b[77:], "generation"),
        (lambda b: b"", "truncated"),
    ],
)
def test_malformed_bytes(mutate, problem: str) -> None:
    with pytest.raises(CorruptFileError, match=problem) as info:
        decode_commit(mutate(sample().serialize()), "_lsm/commits/x")
    assert info.value.name == "_lsm/commits/x"


def test_non_canonical_metadata_order_is_rejected() -> None:
    data = sample().serialize()
    canonical = text("a") + text("1") + text("b") + text("2")
    swapped = text("b") + text("2") + text("a") + text("1")
    assert canonical in data
    with pytest.raises(CorruptFileError, match="canonical"):
        decode_commit(data.replace(canonical, swapped))
    duplicated = text("a") + text("1") + text("a") + text("1")
    with pytest.raises(CorruptFileError, match="canonical"):
        decode_commit(data.replace(canonical, duplicated))


async def test_write_and_read(tmp_path) -> None:
    store = LocalStore(str(tmp_path))
    commit = sample()
    cid = await write_commit(store, commit)
    assert cid == commit.id
    assert (tmp_path / layout.commit_key(cid)).read_bytes() == commit.serialize()
    assert await write_commit(store, commit) == cid  # already there: fine
    assert await read_commit(store, cid) == commit


async def test_missing_commit() -> None:
    with pytest.raises(RefNotFoundError, match=P1) as info:
        await read_commit(MemoryStore(), P1)
    assert isinstance(info.value, KeyError) and isinstance(info.value, NotFoundError)
    with pytest.raises(InvalidInputError):
        await read_commit(MemoryStore(), "abc")


async def test_corrupt_stored_commit(tmp_path) -> None:
    store = LocalStore(str(tmp_path))
    cid = await write_commit(store, sample())
    path = tmp_path / layout.commit_key(cid)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # still well formed, but not the object named cid
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="does not match its ID"):
        await read_commit(store, cid)
    # Garbage stored under its own digest is caught by the decoder.
    junk = b"not a commit"
    junk_id = hashlib.sha256(junk).hexdigest()
    await store.put(layout.commit_key(junk_id), junk)
    with pytest.raises(CorruptFileError, match="magic"):
        await read_commit(store, junk_id)


def test_documented_example() -> None:
    # The worked example of docs/format.md ("Commits"): the format must not drift.
    commit = Commit(EMPTY_METARANGE_ID, (), "ana", "init", 1_700_000_000, {"k": "v"}, 1)
    data = commit.serialize()
    assert len(data) == 115
    assert data[:5] + data[69:] == bytes.fromhex(
        "4c534d4301"
        "0000000000000001"
        "000000006553f100"
        "00"
        "00000003616e61"
        "00000004696e6974"
        "00000001"
        "000000016b"
        "0000000176"
    )
    assert commit.id == "7c9d2addc0998f869ae66165fcd8e3eb185f7e6e01455554487878cae486a43d"


async def test_read_through_the_file_cache(tmp_path) -> None:
    store = FaultyStore(LocalStore(str(tmp_path)))
    cache = FileCache()
    commit = sample()
    cid = await write_commit(store, commit)
    # Raw bytes cached under the same key must not be mistaken for the parsed commit.
    await cache.get_bytes(store, layout.commit_key(cid))
    for _ in range(3):
        assert await read_commit(store, cid, cache=cache) == commit
    # One fetch for the raw entry, one for the parsed commit, then RAM hits.
    assert store.count("get", prefix=layout.commit_key(cid)) == 2
    with pytest.raises(RefNotFoundError):
        await read_commit(store, P1, cache=cache)
