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
from lsmstore.refstore.base import (
    MAX_CONSUMED_IDS,
    MAX_FILE_IDS,
    MAX_GROUP_IDS,
    MAX_QUALIFIED_BYTES,
    Ref,
    Workspace,
)
from lsmstore.refstore.names import entry_for, is_qualified, locate_entry


def starts_with(l1: Sequence[str], prefix: Sequence[str]) -> bool:
    return len(prefix) <= len(l1) and tuple(l1[: len(prefix)]) == tuple(prefix)


def check_size(where: str, ref: Ref) -> Ref:
    """EntryTooLargeError if ``ref`` holds more than :data:`MAX_FILE_IDS` file ids, or
    qualified entries of more than :data:`MAX_QUALIFIED_BYTES`."""
    n = len(ref.l1) + len(ref.l2)
    if n > MAX_FILE_IDS:
        raise EntryTooLargeError(f"{where}: {n} file ids would exceed the limit of {MAX_FILE_IDS}")
    q = qualified_bytes(ref.l1)
    if q > MAX_QUALIFIED_BYTES:
        raise EntryTooLargeError(
            f"{where}: {q} bytes of entries from other branches would exceed the limit of "
            f"{MAX_QUALIFIED_BYTES}"
        )
    return ref


def qualified_bytes(entries: Sequence[str]) -> int:
    return sum(len(e) for e in entries if is_qualified(e))


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


def append_l1_many(
    where: str, cur: Ref, file_ids: Sequence[str], consumed: Sequence[str] = ()
) -> Ref:
    """``l1 += file_ids``, in order, skipping those in L1 or in ``consumed``."""
    _branch(where, cur, "append to L1")
    present = set(cur.l1) | set(consumed)
    new = tuple(f for f in file_ids if f not in present)
    if not new:
        return cur
    return check_size(where, Ref("branch", cur.base, cur.l2, (*cur.l1, *new)))


def append_group(
    where: str,
    cur: Ref,
    group_id: str,
    file_ids: Sequence[str],
    consumed: Sequence[str] = (),
    groups: Sequence[str] = (),
) -> tuple[Ref, tuple[str, ...]]:
    """``l1 += file_ids`` (those not in L1 or ``consumed``) and the group ids after it;
    ``(cur, groups)`` unchanged when ``group_id`` is among ``groups``."""
    _branch(where, cur, "append to L1")
    if group_id in groups:
        return cur, tuple(groups)
    return append_l1_many(where, cur, file_ids, consumed), (*groups, group_id)[-MAX_GROUP_IDS:]


def stash(
    where: str, cur: Ref, expected: Ref, branch: str, name: str, created_at: float
) -> tuple[Ref, Workspace]:
    """The branch's value after a stash (staging empty) and the new workspace.

    The caller also checks that no workspace ``name`` exists, and consumes the moved
    L1 entries into the branch's tail (:func:`consume`)."""
    _branch(where, cur, "stash its changes")
    if cur != expected:
        raise ConflictError(f"{where}: value changed, not stashed", found=cur)
    return Ref("branch", cur.base), Workspace(name, branch, cur.base, cur.l2, cur.l1, created_at)


def pop(where: str, cur: Ref, workspace: Workspace, branch: str) -> Ref:
    """The branch's value after the workspace is put on top of its L1.

    Each file of the workspace, oldest first (its L2 files, which do not overlap, then
    its L1 files), is appended to L1 as ``branch``'s L1 list names it: plain if the
    file lives in ``branch``'s L1 directory, qualified otherwise.  A file the branch
    already holds is not added again.
    """
    _branch(where, cur, "apply a workspace")
    held = {locate_entry(branch, "L1", e) for e in cur.l1}
    held |= {locate_entry(branch, "L2", e) for e in cur.l2}
    adds: list[str] = []
    for entry in workspace.entries:
        place = locate_entry(branch, "L1", entry)
        if place not in held:
            held.add(place)
            adds.append(entry_for(branch, "L1", entry))
    return check_size(where, Ref("branch", cur.base, cur.l2, (*cur.l1, *adds)))


def consume(consumed: Sequence[str], l1_prefix: Sequence[str]) -> tuple[str, ...]:
    """The consumed tail after a swap took ``l1_prefix`` out of L1: newest last, the
    last :data:`MAX_CONSUMED_IDS` ids but never less than the whole ``l1_prefix``.

    Both swaps apply it on success (failed swaps change nothing); ``set_base`` keeps
    the tail; a ref starts with an empty one.  Qualified entries (files of popped
    workspaces) are left out: ``append_l1`` only ever appends plain ids.
    """
    plain = tuple(e for e in l1_prefix if not is_qualified(e))  # never appended
    if not plain:
        return tuple(consumed)
    keep = max(MAX_CONSUMED_IDS, len(plain))
    return (*consumed, *plain)[-keep:]


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
