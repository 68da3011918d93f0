"""The typed checks of lsmstore.validate, used by the client, configuration and URLs
(and meant for the server and the object layer)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from lsmstore import validate
from lsmstore.errors import InvalidInputError, InvalidNameError, InvalidURLError


def test_preview_is_bounded() -> None:
    assert validate.preview("short") == "'short'"
    long = validate.preview("x" * 10_000)
    assert len(long) < 100 and "(10000 characters)" in long
    assert "(5000 bytes)" in validate.preview(b"y" * 5000)
    assert len(validate.preview(list(range(1000)))) < 80


@pytest.mark.parametrize(
    ("value", "kw"),
    [
        (None, {}),
        (b"x", {}),
        ("", {}),
        ("\udc80", {}),
        ("x" * 11, {"max_bytes": 10}),
        ("é" * 6, {"max_bytes": 10}),
        ("a\x00b", {"control_ok": False}),
        ("a\nb", {"control_ok": False}),
    ],
)
def test_check_str_refuses(value: Any, kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError, match="the thing"):
        validate.check_str(value, "the thing", **kw)


def test_check_str_accepts_and_picks_the_error() -> None:
    assert validate.check_str("", "x", empty_ok=True) == ""
    assert validate.check_str("a\nb", "x") == "a\nb"
    assert validate.check_optional_str(None, "x") is None
    with pytest.raises(InvalidNameError):
        validate.check_str("", "name", error=InvalidNameError)


@pytest.mark.parametrize("value", [True, 1.0, "1", None, 11, -1])
def test_check_int(value: Any) -> None:
    with pytest.raises(InvalidInputError, match="n"):
        validate.check_int(value, "n", min_value=0, max_value=10)
    assert validate.check_int(10, "n", min_value=0, max_value=10) == 10
    assert validate.check_optional_int(None, "n") is None


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, "1", 10**400, 0, 11])
def test_check_number(value: Any) -> None:
    with pytest.raises(InvalidInputError, match="rate"):
        validate.check_number(value, "rate", min_value=0, max_value=10, min_exclusive=True)
    assert validate.check_number(3, "rate", min_value=0, max_value=10) == 3.0


def test_check_bool_bytes_items() -> None:
    assert validate.check_bool(False, "flag") is False
    for bad in ("no", 0, None):
        with pytest.raises(InvalidInputError, match="flag"):
            validate.check_bool(bad, "flag")
    assert validate.check_bytes(bytearray(b"ab"), "v") == b"ab"
    with pytest.raises(InvalidInputError):
        validate.check_bytes("ab", "v")
    assert list(validate.check_items([1, 2], "items")) == [1, 2]
    assert list(validate.check_items((i for i in range(2)), "items")) == [0, 1]
    for bad in ("ab", b"ab", {"k": 1}, None, 5):
        with pytest.raises(InvalidInputError, match="items"):
            validate.check_items(bad, "items")


def test_check_metadata() -> None:
    assert validate.check_metadata(None) == {}
    assert validate.check_metadata({"a": ""}) == {"a": ""}
    for bad in ([("a", "b")], {1: "x"}, {"": "x"}, {"a": 1}, {"a": "\udc80"}, "a=b"):
        with pytest.raises(InvalidInputError, match="metadata"):
            validate.check_metadata(bad)
    with pytest.raises(InvalidInputError, match="entries"):
        validate.check_metadata({str(i): "" for i in range(validate.MAX_METADATA_ENTRIES + 1)})


def test_check_committer_and_message() -> None:
    assert validate.check_committer(None) is None
    assert validate.check_committer("Ada <ada@example.com>") == "Ada <ada@example.com>"
    for bad in ("", "a\nb", 5, "x" * (validate.MAX_COMMITTER_BYTES + 1)):
        with pytest.raises(InvalidInputError, match="committer"):
            validate.check_committer(bad)
    assert validate.check_message("") == ""
    with pytest.raises(InvalidInputError, match="message"):
        validate.check_message(b"m")


def test_check_path(tmp_path: Path) -> None:
    assert validate.check_path(tmp_path, "p") == tmp_path
    assert validate.check_path(str(tmp_path), "p") == tmp_path
    for bad in ("", "a\x00b", "\ud800", b"/tmp", 5, None):
        with pytest.raises(InvalidInputError, match="p"):
            validate.check_path(bad, "p")


def test_check_url_text() -> None:
    assert validate.check_url_text("s3://b/p", "url") == "s3://b/p"
    for bad in ("", " s3://b", "s3://b\n", "file:///a\x00", 5, "x" * 5000):
        with pytest.raises(InvalidURLError, match="url"):
            validate.check_url_text(bad, "url", InvalidURLError)
