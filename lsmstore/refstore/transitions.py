"""The RefStore's rules as pure functions: check a condition, compute the new value.

Each function takes the current :class:`Ref` (the caller has read it inside its
atomic step) and either returns the value to store or raises the typed error the
contract names.  The embedded backend applies them directly inside one SQLite
transaction; the Redis scripts and the DynamoDB condition expressions implement the
same rules server-side, and when the server rejects an operation those backends call
the function on the value the server saw, so every backend raises the same error
with the same message.  ``where`` names the ref in messages (``repo/branch``).

A branch's consumed tail (:func:`consume`) is stored beside its :class:`Ref` and is
not part of it: only :func:`append_l1` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence

from lsmstore.errors import ConflictError, EntryTooLargeError
from lsmstore.refstore.base import MAX_CONSUMED_IDS, MAX_FILE_IDS, Ref


def starts_with(l1: Sequence[str], prefix: Sequence[str]) -> bool:
    return len(prefix) <= len(l1) and tuple(l1[: len(prefix)]) == tuple(prefix)


def check_size(where: str, ref: Ref) -> Ref:
    """EntryTooLargeError if ``ref`` holds more than :data:`MAX_FILE_IDS` file ids."""
    n = len(ref.l1) + len(ref.l2)
    if n > MAX_FILE_IDS:
        raise EntryTooLargeError(f"{where}: {n} file ids would exceed the limit of {MAX_FILE_IDS}")
    return ref


def _branch(where: str, cur: Ref, op: str) -> None:
    if not cur.is_branch:
        raise ConflictError(f"{where} is a {cur.kind}, not a branch: cannot {op}", found=cur)


def _check_swap(
    where: str, cur: Ref, base: str, l2_old: Sequence[str], prefix: Sequence[str]
) -> None:
    if cur.base != base:
        raise ConflictError(f"{where}: base is {cur.base!r}, expected {base!r}", found=cur)
    if cur.l2 != tuple(l2_old):
        raise ConflictError(f"{where}: L2 is {list(cur.l2)}, expected {list(l2_old)}", found=cur)
    if not starts_with(cur.l1, prefix):
        raise ConflictError(
            f"{where}: L1 ({len(cur.l1)} ids) does not start with the "
            f"{len(prefix)}-id prefix {list(prefix[:3])}{'...' if len(prefix) > 3 else ''}",
            found=cur,
        )


def append_l1(where: str, cur: Ref, file_id: str, consumed: Sequence[str] = ()) -> Ref:
    """``l1 += [file_id]`` unless it is in L1 or in the branch's ``consumed`` tail
    (then ``cur`` unchanged: a retried append never re-stages a consumed file)."""
    _branch(where, cur, "append to L1")
    if file_id in cur.l1 or file_id in consumed:
        return cur
    return check_size(where, Ref("branch", cur.base, cur.l2, (*cur.l1, file_id)))


def consume(consumed: Sequence[str], l1_prefix: Sequence[str]) -> tuple[str, ...]:
    """The consumed tail after a swap took ``l1_prefix`` out of L1: newest last, the
    last :data:`MAX_CONSUMED_IDS` ids but never less than the whole ``l1_prefix``.

    Both swaps apply it on success (failed swaps change nothing); ``set_base`` keeps
    the tail; a ref starts with an empty one.
    """
    if not l1_prefix:
        return tuple(consumed)
    keep = max(MAX_CONSUMED_IDS, len(l1_prefix))
    return (*consumed, *l1_prefix)[-keep:]


def swap_compacted(
    where: str,
    cur: Ref,
    base: str,
    l2_old: Sequence[str],
    l1_prefix: Sequence[str],
    l2_new: Sequence[str],
) -> Ref:
    _branch(where, cur, "swap in a compaction")
    _check_swap(where, cur, base, l2_old, l1_prefix)
    return check_size(where, Ref("branch", cur.base, tuple(l2_new), cur.l1[len(l1_prefix) :]))


def swap_committed(
    where: str,
    cur: Ref,
    base: str,
    l2_old: Sequence[str],
    l1_prefix: Sequence[str],
    new_base: str,
) -> Ref:
    _branch(where, cur, "swap in a commit")
    _check_swap(where, cur, base, l2_old, l1_prefix)
    return Ref("branch", new_base, (), cur.l1[len(l1_prefix) :])


def set_base(where: str, cur: Ref, expected_base: str, new_base: str) -> Ref:
    _branch(where, cur, "set its base")
    if cur.base != expected_base:
        raise ConflictError(f"{where}: base is {cur.base!r}, expected {expected_base!r}", found=cur)
    return Ref("branch", new_base, cur.l2, cur.l1)


def delete(where: str, cur: Ref, expected: Ref) -> None:
    """Allow the delete only if the stored value equals ``expected`` exactly."""
    if cur != expected:
        raise ConflictError(f"{where}: value changed, not deleted", found=cur)


def lease_available(holder: str | None, expires: float, owner: str, now: float) -> bool:
    """A lease can be taken or renewed if free, expired (``expires <= now``) or ours."""
    return holder is None or holder == owner or expires <= now
