"""open_refstore: one URL per backend; anything malformed is InvalidURLError."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsmstore.errors import InvalidURLError
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.refstore.url import open_refstore


async def test_local(tmp_path: Path) -> None:
    store = open_refstore(f"local://{tmp_path}/refs")
    assert isinstance(store, EmbeddedRefStore)
    assert store.path == tmp_path / "refs"
    await store.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "",
        "refs",
        "/abs/dir",
        "ftp://host/x",
        "local://relative/dir",
        "local://host/abs",
        "local:relative",
        "local:///a/../b",
        "local:///a?synchronous=OFF",
        "local:///a?nope=1",
        "local:///a?synchronous=FULL&synchronous=FULL",
        "local:///a#frag",
    ],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidURLError):
        open_refstore(url)


def test_not_a_string() -> None:
    with pytest.raises(InvalidURLError):
        open_refstore(None)  # type: ignore[arg-type]
