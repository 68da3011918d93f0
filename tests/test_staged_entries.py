"""Staged entries: plain file ids and ids qualified with where their file lives."""

from __future__ import annotations

import pytest

from lsmstore.errors import InvalidNameError
from lsmstore.refstore.base import Workspace
from lsmstore.refstore.names import (
    check_staged_entry,
    encode_branch,
    entry_for,
    is_qualified,
    locate_entry,
    qualify_entry,
)


@pytest.mark.parametrize("branch", ["main", "feature-x", "ü✓", "a" * 255, "é" * 127])
def test_qualify_and_locate_round_trip(branch: str) -> None:
    for level in ("L1", "L2"):
        q = qualify_entry(branch, level, "0193abc")
        assert is_qualified(q) and check_staged_entry(q) == q
        assert locate_entry("other", "L1", q) == (branch, level, "0193abc")
        assert qualify_entry("other", "L1", q) == q  # already says where it lives
    assert locate_entry(branch, "L2", "0193abc") == (branch, "L2", "0193abc")


def test_entry_for_is_plain_only_where_the_file_lives() -> None:
    q = qualify_entry("dev", "L1", "f1")
    assert entry_for("dev", "L1", q) == "f1"
    assert entry_for("dev", "L2", q) == q
    assert entry_for("main", "L1", q) == q
    assert entry_for("main", "L1", "f1") == "f1"


def test_workspace_entries_oldest_first() -> None:
    ws = Workspace("w", "dev", "c1", ("g1", "g2"), ("f1", qualify_entry("x", "L2", "h1")))
    assert ws.entries == (
        qualify_entry("dev", "L2", "g1"),
        qualify_entry("dev", "L2", "g2"),
        qualify_entry("dev", "L1", "f1"),
        qualify_entry("x", "L2", "h1"),
    )


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "a.L3.bWFpbg",
        "a.L1.",
        "a.L1.bWFpbg=",  # padding is not part of the spelling
        "a.L1.bWFpbh",  # not the canonical spelling of any name
        f"a.L1.{encode_branch('a/b')}",  # decodes to an invalid branch name
        f"a.L1.{encode_branch('x' * 256)}",
        "a.L1.bWFpbg.extra",
        "a,b",
        "x" * 65,
    ],
)
def test_bad_entries(entry: str) -> None:
    with pytest.raises(InvalidNameError):
        check_staged_entry(entry)
    with pytest.raises(InvalidNameError):
        locate_entry("main", "L1", entry)
