"""lsm:// and lakefs:// URIs: the parts, what a command requires, typed errors."""

from __future__ import annotations

import pytest

from lsmstore.errors import InvalidURLError
from lsmstore.uri import LsmURI, is_uri, parse_uri


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("lsm://repo", LsmURI("repo")),
        ("lsm://repo/", LsmURI("repo")),
        ("lsm://repo/main", LsmURI("repo", "main")),
        ("lsm://repo/main/", LsmURI("repo", "main")),
        ("LAKEFS://repo/main~2/a/b.csv", LsmURI("repo", "main~2", "a/b.csv")),
        ("lsm://repo/v1^2/dir/", LsmURI("repo", "v1^2", "dir/")),
        ("lsm://repo/main/a b/%20?x#y", LsmURI("repo", "main", "a b/%20?x#y")),
    ],
)
def test_parse(text: str, expected: LsmURI) -> None:
    assert parse_uri(text) == expected
    assert is_uri(text)


def test_str_is_canonical_lsm() -> None:
    assert str(parse_uri("lakefs://repo/main/a/b")) == "lsm://repo/main/a/b"
    assert str(LsmURI("r")) == "lsm://r" and str(LsmURI("r", "dev")) == "lsm://r/dev"
    assert LsmURI("r", "dev", "d").join("f") == LsmURI("r", "dev", "d/f")
    assert LsmURI("r", "dev").join("f") == LsmURI("r", "dev", "f")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("s3://bucket/key", "unknown URI scheme 's3'"),
        ("http://host/x", "unknown URI scheme 'http'"),
        ("repo/main", "is not a URI"),
        ("lsm://", "names no repository"),
        ("lsm:///main", "names no repository"),
        ("lsm://Repo/main", "invalid repository name"),
        ("lsm://repo//a", "empty ref"),
        ("lsm://repo/ma in/a", "whitespace"),
        ("lsm://repo/main/a\x00b", "NUL"),
    ],
)
def test_malformed(text: str, fragment: str) -> None:
    with pytest.raises(InvalidURLError, match=fragment.replace("(", r"\(")):
        parse_uri(text)


def test_require() -> None:
    uri = parse_uri("lsm://repo")
    with pytest.raises(InvalidURLError, match="expected lsm://repository/ref"):
        uri.require(ref=True)
    with pytest.raises(InvalidURLError, match="no branch or ref"):
        _ = uri.ref_or_error
    with pytest.raises(InvalidURLError, match="expected an object path"):
        parse_uri("lsm://repo/main").require(path=True)
    with pytest.raises(InvalidURLError, match="expected no object path"):
        parse_uri("lsm://repo/main/x").require(no_path=True)
    assert parse_uri("lsm://repo/main/x").require(path=True).path == "x"
