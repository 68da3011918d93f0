"""The committed value encoding: round trips, lakeFS (Go binary.PutVarint) bytes, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lsmstore.errors import CorruptFileError, InvalidInputError
from lsmstore.graveler.value import decode_value, encode_value, encode_values


def go_put_varint(n: int) -> bytes:
    """Go's binary.PutVarint, written out independently: zigzag, then LEB128."""
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if u < 0x80:
            out.append(u)
            return bytes(out)
        out.append(u & 0x7F | 0x80)
        u >>= 7


@given(st.binary(max_size=300), st.binary(max_size=20_000))
def test_round_trip_and_layout(identity: bytes, data: bytes) -> None:
    enc = encode_value(identity, data)
    assert enc == go_put_varint(len(identity)) + identity + go_put_varint(len(data)) + data
    assert decode_value(enc) == (identity, data)


def test_known_bytes() -> None:
    assert encode_value(b"id-1", b"hello").hex(" ") == "08 69 64 2d 31 0a 68 65 6c 6c 6f"
    assert encode_value(b"", b"") == b"\x00\x00"
    enc = encode_value(b"\x07" * 32, b"x" * 150)
    assert enc[:1] == b"\x40" and enc[33:35] == b"\xac\x02" and len(enc) == 185
    big = encode_value(b"i", b"d" * (1 << 20))
    assert big[2:6] == bytes.fromhex("80 80 80 01")
    assert decode_value(big) == (b"i", b"d" * (1 << 20))


@pytest.mark.parametrize(
    "buf",
    [
        b"",
        b"\x08id",  # identity truncated
        b"\x02i",  # data length missing
        b"\x02i\x0ahell",  # data truncated
        b"\x02i\x02dX",  # trailing byte
        b"\x01i\x00",  # negative identity length
        b"\x02i\x03d",  # negative data length
        b"\x80\x80",  # unterminated varint
        b"\xff" * 11 + b"\x01",  # varint too long
    ],
)
def test_malformed_values_raise_corrupt_file_error_naming_the_file(buf: bytes) -> None:
    with pytest.raises(CorruptFileError) as info:
        decode_value(buf, "ranges/abc")
    assert info.value.name == "ranges/abc"
    assert str(info.value).startswith("ranges/abc: ")


@given(st.lists(st.tuples(st.binary(max_size=1100), st.binary(max_size=1100)), max_size=8))
def test_encode_values_is_encode_value_of_each(pairs: list[tuple[bytes, bytes]]) -> None:
    identities = [i for i, _ in pairs]
    data = [d for _, d in pairs]
    assert encode_values(identities, data) == [encode_value(i, d) for i, d in pairs]


def test_encode_values_wants_columns_of_one_length() -> None:
    with pytest.raises(InvalidInputError, match="2 identities for 1 values"):
        encode_values([b"a", b"b"], [b"x"])
