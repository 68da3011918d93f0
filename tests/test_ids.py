"""Record and file identities, checked against hashlib and the worked example of docs/format.md."""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lsmstore.errors import InvalidInputError
from lsmstore.graveler.ids import FileIdHasher, file_id, record_id
from lsmstore.graveler.record import Record, tombstone

FORMAT_DOC = Path(__file__).resolve().parent.parent / "docs" / "format.md"


def sha(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


@given(st.binary(), st.binary())
def test_record_id_is_hash_of_hashes(key: bytes, identity: bytes) -> None:
    rid = record_id(key, identity)
    assert rid == sha(sha(key) + sha(identity))
    assert len(rid) == 32


def test_record_id_separates_key_and_identity() -> None:
    # concatenation would confuse these; hashing each part first does not
    assert record_id(b"ab", b"c") != record_id(b"a", b"bc")
    assert record_id(b"a", b"b") != record_id(b"b", b"a")


@given(st.lists(st.tuples(st.binary(min_size=1), st.binary()), max_size=20))
def test_file_id_hashes_record_ids_in_order(pairs: list[tuple[bytes, bytes]]) -> None:
    records = [Record(k, i, b"value") for k, i in pairs]
    expected = hashlib.sha256(b"".join(record_id(k, i) for k, i in pairs)).hexdigest()
    assert file_id(records) == expected
    hasher = FileIdHasher()
    for k, i in pairs:
        hasher.add(k, i)
    assert hasher.hexdigest() == expected
    assert re.fullmatch(r"[0-9a-f]{64}", expected)


def test_file_id_ignores_values_and_digest_does_not_end_hashing() -> None:
    a = [Record(b"k1", b"id", b"one"), Record(b"k2", b"id2", b"two")]
    b = [Record(b"k1", b"id", b"other bytes"), Record(b"k2", b"id2", b"")]
    assert file_id(a) == file_id(b)
    hasher = FileIdHasher()
    hasher.add(b"k1", b"id")
    first = hasher.hexdigest()
    assert first == file_id(a[:1])
    hasher.add(b"k2", b"id2")
    assert hasher.hexdigest() == file_id(a) != first
    assert file_id([]) == hashlib.sha256(b"").hexdigest()


def test_file_id_refuses_tombstones() -> None:
    with pytest.raises(InvalidInputError, match="b'gone'"):
        file_id([Record(b"a", b"i", b"v"), tombstone(b"gone")])


def test_worked_example_in_format_doc() -> None:
    text = FORMAT_DOC.read_text()
    block = text.split("Worked example", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    records = re.findall(r'record \d: key = (b"[^"]*")\s+identity = (b"[^"]*")', block)
    h_keys = re.findall(r"h\(key\)\s+= ([0-9a-f]{64})", block)
    h_ids = re.findall(r"h\(identity\) = ([0-9a-f]{64})", block)
    rids = re.findall(r"recordID\s+= ([0-9a-f]{64})", block)
    fid = re.findall(r"fileID\s+= ([0-9a-f]{64})", block)
    assert len(records) == len(h_keys) == len(h_ids) == len(rids) == 2 and len(fid) == 1
    parsed = [(ast.literal_eval(k), ast.literal_eval(i)) for k, i in records]
    for (key, identity), hk, hi, rid in zip(parsed, h_keys, h_ids, rids, strict=True):
        assert sha(key).hex() == hk
        assert sha(identity).hex() == hi
        assert record_id(key, identity).hex() == rid
    assert file_id([Record(k, i, b"") for k, i in parsed]) == fid[0]
