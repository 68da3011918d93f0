"""Name rules: every name that reaches a backend or an object path is checked first."""

from __future__ import annotations

from pathlib import Path

import pytest

import lsmstore
from lsmstore.errors import InvalidNameError
from lsmstore.refstore.base import Ref
from lsmstore.refstore.names import (
    check_commit_id,
    check_file_id,
    check_lease_name,
    check_new_branch_name,
    check_new_repository_name,
    check_new_tag_name,
    check_ref_name,
    check_repository_name,
)
from lsmstore.testing.refstore_contract import (
    BAD_FILE_IDS,
    BAD_REF_NAMES,
    BAD_REPOSITORY_NAMES,
)


@pytest.mark.parametrize("name", ["a", "repo1", "my-repo_2", "0", "x" * 63])
def test_good_repository_names(name: str) -> None:
    assert check_repository_name(name) == name


@pytest.mark.parametrize("name", [*BAD_REPOSITORY_NAMES, "a\n", None, 3])
def test_bad_repository_names(name: str) -> None:
    with pytest.raises(InvalidNameError):
        check_repository_name(name)


@pytest.mark.parametrize(
    "name", ["main", "feature-1", "a.b", "v1.0.0", "_x", "a{b}", "日本", "é" * 127, "x" * 255]
)
def test_good_ref_names(name: str) -> None:
    assert check_ref_name(name) == name


@pytest.mark.parametrize("name", [*BAD_REF_NAMES, None, b"main"])
def test_bad_ref_names(name: str) -> None:
    with pytest.raises(InvalidNameError):
        check_ref_name(name)


def test_ref_name_message_names_the_kind_and_value() -> None:
    with pytest.raises(InvalidNameError, match=r"invalid tag name 'a/b'"):
        check_ref_name("a/b", "tag")


@pytest.mark.parametrize("file_id", ["f", "01HZX3Q9-abc_DEF", "x" * 64])
def test_good_file_ids(file_id: str) -> None:
    assert check_file_id(file_id) == file_id


@pytest.mark.parametrize("file_id", [*BAD_FILE_IDS, None])
def test_bad_file_ids(file_id: str) -> None:
    with pytest.raises(InvalidNameError):
        check_file_id(file_id)


@pytest.mark.parametrize("commit", ["", "c1", "a" * 64, "sha256:ab.cd_-", "x" * 128])
def test_good_commit_ids(commit: str) -> None:
    assert check_commit_id(commit) == commit


@pytest.mark.parametrize("commit", ["x" * 129, "a b", "a/b", "c1\n", "é", None])
def test_bad_commit_ids(commit: str) -> None:
    with pytest.raises(InvalidNameError):
        check_commit_id(commit)


@pytest.mark.parametrize("name", ["compact/repo1/main", "worker 1@host:42", "é" * 256])
def test_good_lease_names(name: str) -> None:
    assert check_lease_name(name) == name


@pytest.mark.parametrize("name", ["", "a\nb", "a\x00", "x" * 513, "a\ud800", None])
def test_bad_lease_names(name: str) -> None:
    with pytest.raises(InvalidNameError):
        check_lease_name(name)


# --- lakeFS's rules for new names -----------------------------------------------------


@pytest.mark.parametrize("name", ["abc", "repo-1", "0ab", "a" * 63, "my-data-2024"])
def test_new_repository_names_lakefs_accepts(name: str) -> None:
    assert check_new_repository_name(name) == name


@pytest.mark.parametrize("name", ["a", "ab", "a_b", "-ab", "Abc", "a" * 64, "a.b", "a b"])
def test_new_repository_names_lakefs_refuses(name: str) -> None:
    with pytest.raises(InvalidNameError, match=r"lakeFS|must match"):
        check_new_repository_name(name)


@pytest.mark.parametrize("name", ["main", "feature-1", "_x", "A_b-C", "9", "x" * 255])
def test_new_branch_names_lakefs_accepts(name: str) -> None:
    assert check_new_branch_name(name) == name


@pytest.mark.parametrize("name", ["a.b", "v1.0", "-x", "a{b}", "日本", "a b", "a/b", "x" * 256])
def test_new_branch_names_lakefs_refuses(name: str) -> None:
    with pytest.raises(InvalidNameError):
        check_new_branch_name(name)


@pytest.mark.parametrize("name", ["v1.0.0", "release-1", "a{b}", "日本"])
def test_new_tag_names(name: str) -> None:
    assert check_new_tag_name(name) == name


@pytest.mark.parametrize("name", ["x.lock", "a/b", "a..b", "a b", "@", "v1.", "a^b", "a:b"])
def test_new_tag_names_refused(name: str) -> None:
    with pytest.raises(InvalidNameError):
        check_new_tag_name(name)


@pytest.mark.parametrize("name", ["a", "a_b", "ab"])
def test_existing_repository_names_stay_valid(name: str) -> None:
    """Names created before lakeFS's rules applied are still read and written."""
    assert check_repository_name(name) == name


async def test_only_new_names_follow_lakefs_rules(tmp_path: Path) -> None:
    """A repository and branch recorded under older rules (as an older version wrote
    them) keep working; creating such names is refused, by every creation path."""
    async with lsmstore.connect(home=str(tmp_path / "home"), batch_interval_ms=1) as store:
        with pytest.raises(InvalidNameError, match="lakeFS"):
            await store.create_repository("a_b", storage_namespace=(tmp_path / "n").as_uri())
        repo = await store.create_repository("old-one", storage_namespace=(tmp_path / "o").as_uri())
        main = repo.branch("main")
        await main.upload("f", b"1")
        await main.commit("c")
        with pytest.raises(InvalidNameError, match="lakeFS"):
            await repo.create_branch("v1.0", source="main")
        with pytest.raises(InvalidNameError):
            await repo.create_tag("v1.lock", "main")
        # A branch an older version created under a name lakeFS refuses: written,
        # read and committed as before.
        head = await main.head()
        await store.refstore.create_ref("old-one", "feature.x", Ref("branch", head.base))
        old = repo.branch("feature.x")
        await old.upload("g", b"2")
        assert await (await old.open("g")).read() == b"2"
        await old.commit("on an old name")
        assert "feature.x" in await repo.list_branches()
        # Reading a repository under an old-style name is a lookup, not a refusal.
        with pytest.raises(lsmstore.RepositoryNotFoundError):
            await store.get_repository("a_b")
