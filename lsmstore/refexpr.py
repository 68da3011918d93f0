"""Ref expressions: naming a commit the way lakeFS and git do.

Grammar::

    expression := base modifier*
    base       := a branch name, a tag name, a full commit ID or a commit-ID prefix
    modifier   := "~" [N]      the first parent, N times (``~`` alone is ``~1``)
                | "^" [N]      the N-th parent (``^`` alone is ``^1``; ``^2`` is the
                               source side of a merge commit)

``N`` is a decimal number of at most :data:`MAX_DIGITS` digits; ``~0`` and ``^0`` name
the commit itself.  Modifiers apply left to right: ``main~2^2`` is the second parent of
the grandparent of ``main``.  The base follows the branch-name rules
(:func:`lsmstore.refstore.names.check_ref_name`), which reserve ``~ ^ : ? * [ \\ @``.

Resolution of the base, in order:

1. a branch or a tag of that name (one RefStore read: both live in one table);
2. a full commit ID (64 lowercase hex digits) that is stored;
3. a unique prefix of a stored commit ID: at least :data:`MIN_PREFIX` lowercase hex
   digits; found by listing ``_lsm/commits/<prefix>`` on the object store.

A branch resolves to its *committed* state (its base commit), never to its staged
writes.  Once the base is a commit ID, everything else reads immutable commit objects:
no RefStore call.

Errors: :class:`InvalidRefExpressionError` for a malformed expression (nothing is read);
:class:`AmbiguousRefError` for a prefix matching several commits;
:class:`RefNotFoundError` when nothing matches, a branch has no commit yet, or a
modifier walks past the first commit (``main~5`` on a history of 3 commits).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from lsmstore import layout
from lsmstore.errors import (
    AmbiguousRefError,
    InvalidNameError,
    InvalidRefExpressionError,
    RefNotFoundError,
)
from lsmstore.refstore.base import Ref
from lsmstore.refstore.names import check_ref_name

if TYPE_CHECKING:
    from lsmstore.versioning.context import RepoContext

#: Shortest commit-ID prefix accepted (git's default abbreviation is 7; lakeFS shows 6+).
MIN_PREFIX = 6
#: Longest N of a modifier: ``~9999999`` at most.
MAX_DIGITS = 7
#: Commits named in an AmbiguousRefError.
AMBIGUOUS_SHOWN = 5

_FULL_ID = re.compile(r"^[0-9a-f]{64}$")
_PREFIX = re.compile(rf"^[0-9a-f]{{{MIN_PREFIX},63}}$")
_MODIFIER = re.compile(r"([~^])([0-9]*)")

ModifierKind = Literal["~", "^"]
BaseKind = Literal["branch", "tag", "commit"]


@dataclass(frozen=True, slots=True)
class Modifier:
    kind: ModifierKind
    n: int

    def __str__(self) -> str:
        return f"{self.kind}{self.n}"


@dataclass(frozen=True, slots=True)
class RefExpression:
    """A parsed expression: its base name and modifiers, in order."""

    base: str
    modifiers: tuple[Modifier, ...] = ()

    def __str__(self) -> str:
        return self.base + "".join(map(str, self.modifiers))


@dataclass(frozen=True, slots=True)
class ResolvedRef:
    """What an expression named.

    ``kind`` and ``name`` describe the base (``name`` is the branch or tag name, or the
    full commit ID a commit ID or prefix matched); ``ref`` is the branch or tag value
    read while resolving (None for commits).  ``commit_id`` is the commit reached after
    the modifiers.
    """

    expression: str
    commit_id: str
    kind: BaseKind
    name: str
    ref: Ref | None
    modified: bool

    @property
    def branch(self) -> str | None:
        """The branch named by a bare branch expression (no modifiers), else None."""
        return self.name if self.kind == "branch" and not self.modified else None


def _invalid(text: object, why: str) -> InvalidRefExpressionError:
    return InvalidRefExpressionError(f"invalid ref expression {text!r}: {why}")


def parse(text: str) -> RefExpression:
    """Parse ``text``; InvalidRefExpressionError names what is wrong."""
    if not isinstance(text, str):
        raise _invalid(text, f"expected a string, not {type(text).__name__}")
    cut = min((i for i in (text.find("~"), text.find("^")) if i >= 0), default=len(text))
    base, rest = text[:cut], text[cut:]
    if not base:
        raise _invalid(text, "no branch, tag or commit before the modifiers")
    try:
        check_ref_name(base, "ref")
    except InvalidNameError as e:
        raise _invalid(text, str(e)) from None
    modifiers: list[Modifier] = []
    pos = 0
    while pos < len(rest):
        m = _MODIFIER.match(rest, pos)
        if m is None:
            raise _invalid(text, f"unexpected {rest[pos:]!r} after {base + rest[:pos]!r}")
        digits = m.group(2)
        if len(digits) > MAX_DIGITS:
            raise _invalid(text, f"{m.group(0)!r}: a count has at most {MAX_DIGITS} digits")
        kind: ModifierKind = "~" if m.group(1) == "~" else "^"
        modifiers.append(Modifier(kind, int(digits) if digits else 1))
        pos = m.end()
    return RefExpression(base, tuple(modifiers))


async def _find_prefix(ctx: RepoContext, prefix: str, text: str) -> str:
    matches: list[str] = []
    listing = ctx.objects.list(layout.COMMITS + prefix)
    async with contextlib.aclosing(listing) as objects:  # type: ignore[type-var]
        async for meta in objects:
            cid = meta.key[len(layout.COMMITS) :]
            if _FULL_ID.match(cid):
                matches.append(cid)
            if len(matches) > AMBIGUOUS_SHOWN:
                break
    if not matches:
        raise RefNotFoundError(
            f"{ctx.name}: no branch, tag or commit matches {text!r}"
            if text == prefix
            else f"{ctx.name}: no branch, tag or commit matches {prefix!r} (in {text!r})"
        )
    if len(matches) > 1:
        shown = ", ".join(m[: len(prefix) + 4] for m in matches[:AMBIGUOUS_SHOWN])
        more = ", ..." if len(matches) > AMBIGUOUS_SHOWN else ""
        raise AmbiguousRefError(
            f"{ctx.name}: commit prefix {prefix!r} is ambiguous: it matches {shown}{more}; "
            "give more digits",
            matches[:AMBIGUOUS_SHOWN],
        )
    return matches[0]


async def _resolve_base(ctx: RepoContext, base: str, text: str) -> tuple[BaseKind, str, Ref | None]:
    """``(kind, commit id, ref value)`` of the base name."""
    try:
        ref = await ctx.refstore.get_ref(ctx.name, base)
    except RefNotFoundError:
        pass
    else:
        if not ref.base:
            raise RefNotFoundError(f"{ctx.name}: {ref.kind} {base!r} has no commit yet")
        return ref.kind, ref.base, ref
    if _FULL_ID.match(base):
        await ctx.commit(base)  # RefNotFoundError when no such commit is stored
        return "commit", base, None
    if _PREFIX.match(base):
        return "commit", await _find_prefix(ctx, base, text), None
    raise RefNotFoundError(f"{ctx.name}: no branch, tag or commit named {base!r}")


async def walk(ctx: RepoContext, commit_id: str, modifiers: tuple[Modifier, ...], text: str) -> str:
    """Apply ``modifiers`` to ``commit_id`` (reads commit objects only)."""
    where = commit_id
    for i, mod in enumerate(modifiers):
        if mod.n == 0:
            continue
        if mod.kind == "~":
            for step in range(mod.n):
                parents = (await ctx.commit(where)).parents
                if not parents:
                    raise RefNotFoundError(
                        f"{ctx.name}: {text!r}: commit {where[:12]} has no parent "
                        f"({step} of {mod.n} steps of {mod} taken)"
                    )
                where = parents[0]
        else:
            parents = (await ctx.commit(where)).parents
            if mod.n > len(parents):
                have = f"{len(parents)} parent{'s' if len(parents) != 1 else ''}"
                raise RefNotFoundError(
                    f"{ctx.name}: {text!r}: commit {where[:12]} has {have}, "
                    f"so modifier {i + 1} ({mod}) names nothing"
                )
            where = parents[mod.n - 1]
    return where


async def resolve(ctx: RepoContext, text: str | RefExpression) -> ResolvedRef:
    """Resolve a ref expression in ``ctx``'s repository (see the module docstring)."""
    expr = text if isinstance(text, RefExpression) else parse(text)
    shown = str(text)
    kind, commit_id, ref = await _resolve_base(ctx, expr.base, shown)
    name = commit_id if kind == "commit" else expr.base
    if expr.modifiers:
        commit_id = await walk(ctx, commit_id, expr.modifiers, shown)
    return ResolvedRef(shown, commit_id, kind, name, ref, bool(expr.modifiers))
