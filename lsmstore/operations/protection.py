"""Branch protection (lakeFS's branch protection rules): the rules of a repository,
read and replaced with an ETag, and the one check every guarded operation calls.

A rule is a glob ``pattern`` (``fnmatch``: ``*``, ``?``, ``[...]``) over branch names.
A branch matching any rule is *protected*: it refuses staging writes (puts, deletes,
uploads, links, copies, staged SSTs, Spark jobs), commits (and reverts and
cherry-picks, which write a commit onto it), resets and deletion with
:class:`~lsmstore.errors.ProtectedBranchError` (403), and accepts merges -- as lakeFS
does.  Reads are never affected.

**Storage.**  The rules live in the RefStore's small records, kind
``branch-protection``, one record per version named ``<repository id>:<version>``
(the repository's ``uid``, so a deleted and re-created repository starts without
rules; the version zero-padded so names sort by it).  Replacing the rules writes
version N+1 with ``if_absent``: of two concurrent replacements based on version N
exactly one is written, the other gets :class:`PreconditionFailedError` -- the
compare-and-swap the ETag (``"<version>"``) promises, built on the RefStore's
create-only write.  The older version is deleted afterwards; a crash in between leaves
it behind, and readers take the highest version, so it changes nothing.

**Cost and freshness.**  The rules are read from the RefStore by every guarded call:
a staging write checks them once per batch it appends (not per put), a commit, reset
or deletion once.  Nothing is cached, so a rule applies to the next batch appended
after it is set, in every process.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lsmstore import namespace
from lsmstore.errors import (
    InvalidInputError,
    PreconditionFailedError,
    ProtectedBranchError,
    RecordExistsError,
    RecordNotFoundError,
)
from lsmstore.refstore.base import RefStore
from lsmstore.refstore.base import Repository as RepositoryInfo
from lsmstore.types import BranchProtection

if TYPE_CHECKING:
    from lsmstore.client import Repository

KIND = "branch-protection"
#: At most this many rules per repository (lakeFS has no documented bound; ours keeps
#: the record small).
MAX_RULES = 100
MAX_PATTERN_CHARS = 256
_WIDTH = 12


def check_patterns(patterns: object) -> tuple[str, ...]:
    """A list of non-empty glob patterns (unique, at most MAX_RULES), or
    InvalidInputError."""
    if isinstance(patterns, str | bytes) or not isinstance(patterns, Sequence):
        raise InvalidInputError("branch protection rules must be a list of patterns")
    if len(patterns) > MAX_RULES:
        raise InvalidInputError(f"{len(patterns)} branch protection rules: at most {MAX_RULES}")
    out: list[str] = []
    for p in patterns:
        if not isinstance(p, str) or not p or len(p) > MAX_PATTERN_CHARS:
            raise InvalidInputError(
                f"branch protection pattern {p!r}: a non-empty string of at most "
                f"{MAX_PATTERN_CHARS} characters"
            )
        if any(ord(c) < 0x20 for c in p):
            raise InvalidInputError(f"branch protection pattern {p!r}: control character")
        if p in out:
            raise InvalidInputError(f"branch protection pattern {p!r} given twice")
        out.append(p)
    return tuple(out)


def _prefix(info: RepositoryInfo) -> str:
    return f"{namespace.owner_id(info)}:"


async def _latest(refstore: RefStore, info: RepositoryInfo) -> tuple[int, tuple[str, ...]]:
    """The highest stored version and its patterns ((0, ()) when never set)."""
    prefix = _prefix(info)
    found: tuple[int, bytes] | None = None
    after = prefix
    while True:
        page = await refstore.list_records(KIND, after=after, limit=100)
        mine = [(n, v) for n, v in page if n.startswith(prefix)]
        for n, v in mine:
            found = (int(n[len(prefix) :]), v)
        if len(mine) < len(page) or len(page) < 100:
            break
        after = page[-1][0]
    if found is None:
        return 0, ()
    doc = json.loads(found[1])
    return found[0], tuple(str(p) for p in doc["patterns"])


async def rules_of(refstore: RefStore, info: RepositoryInfo) -> BranchProtection:
    version, patterns = await _latest(refstore, info)
    return BranchProtection(patterns, str(version))


async def get_rules(repo: Repository) -> BranchProtection:
    """The repository's rules and their ETag."""
    return await rules_of(repo.store.refstore, repo.info)


async def set_rules(
    repo: Repository, patterns: Sequence[str], *, if_match: str | None
) -> BranchProtection:
    """Replace the repository's rules; with ``if_match`` only while the current ETag is
    that one (PreconditionFailedError otherwise, nothing changed).  Returns the new
    rules and ETag."""
    checked = check_patterns(patterns)
    refstore = repo.store.refstore
    version, _ = await _latest(refstore, repo.info)
    if if_match is not None and if_match.strip('"') != str(version):
        raise PreconditionFailedError(
            f"{repo.name}: branch protection rules changed (ETag {version}, not {if_match})"
        )
    prefix = _prefix(repo.info)
    body = json.dumps({"patterns": list(checked)}).encode()
    try:
        await refstore.put_record(KIND, f"{prefix}{version + 1:0{_WIDTH}d}", body, if_absent=True)
    except RecordExistsError:
        raise PreconditionFailedError(
            f"{repo.name}: branch protection rules were replaced meanwhile; read them again"
        ) from None
    if version:
        try:
            await refstore.delete_record(KIND, f"{prefix}{version:0{_WIDTH}d}")
        except RecordNotFoundError:
            pass
    return BranchProtection(checked, str(version + 1))


async def check(refstore: RefStore, info: RepositoryInfo, branch: str, action: str) -> None:
    """ProtectedBranchError when ``branch`` matches one of the repository's rules;
    ``action`` says what was refused ("write to", "commit to", "reset", "delete")."""
    rules = await rules_of(refstore, info)
    if rules.protects(branch):
        raise ProtectedBranchError(
            f"{info.name}/{branch} is a protected branch: cannot {action} it "
            "(merge into it instead)"
        )


async def guard(repo: Repository, branch: str, action: str) -> None:
    """:func:`check` for a repository handle."""
    await check(repo.store.refstore, repo.info, branch, action)
