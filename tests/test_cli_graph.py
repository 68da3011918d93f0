"""The ASCII commit graph of ``lsmstore log --graph``."""

from __future__ import annotations

from lsmstore.cli.graph import Graph


def draw(commits: list[tuple[str, list[str]]]) -> list[str]:
    g = Graph()
    lines = []
    for cid, parents in commits:
        for text, is_commit in g.rows(cid, parents):
            lines.append(f"{text} {cid}" if is_commit else text)
    return lines


def test_linear() -> None:
    assert draw([("c", ["b"]), ("b", ["a"]), ("a", [])]) == ["* c", "* b", "* a"]


def test_merge_with_either_side_first() -> None:
    dev_first = draw([("m", ["x", "d"]), ("d", ["b"]), ("x", ["b"]), ("b", [])])
    assert dev_first == ["* m", "|\\", "| * d", "* | x", "|/", "* b"]
    main_first = draw([("m", ["x", "d"]), ("x", ["b"]), ("d", ["b"]), ("b", [])])
    assert main_first == ["* m", "|\\", "* | x", "| * d", "|/", "* b"]


def test_two_merges_in_a_row() -> None:
    lines = draw(
        [
            ("m2", ["m1", "f"]),
            ("m1", ["a", "e"]),
            ("f", ["a"]),
            ("e", ["a"]),
            ("a", []),
        ]
    )
    assert lines == ["* m2", "|\\", "* | m1", "|\\|", "| | * f", "| |/", "| * e", "|/", "* a"]
