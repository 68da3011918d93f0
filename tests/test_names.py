"""Name rules: every name that reaches a backend or an object path is checked first."""

from __future__ import annotations

import pytest

from lsmstore.errors import InvalidNameError
from lsmstore.refstore.names import (
    check_commit_id,
    check_file_id,
    check_lease_name,
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
