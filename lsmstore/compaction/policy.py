"""When to compact a branch, and which L1 files one job takes.  Pure functions.

A branch needs compaction when its L1 list

* holds more than ``max_l1_files`` files (read amplification: a point read may visit
  every L1 file whose key range and bloom filter admit the key), or
* holds more than ``max_l1_bytes`` bytes (sizes come from the sidecars), or
* its oldest file is older than ``max_l1_age_s`` seconds (file ids start with their
  creation time in milliseconds, see :func:`lsmstore.staging.files.new_file_id`), so
  a branch that stopped receiving writes still ends up with one tidy L2.

One job takes the *oldest prefix* of L1, at most ``job_files`` files and
``job_bytes`` bytes (always at least one file), so its memory and time stay bounded
however far behind the compactor is; the next job takes the next prefix.

The clock is an argument: ``now`` is seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lsmstore.config import Config

#: Hex digits of a staging file id that encode its creation time in milliseconds.
_TIME_DIGITS = 13


def file_time(file_id: str) -> float | None:
    """Creation time (seconds since the epoch) encoded in a staging file id, or None
    when the id does not start with 13 hex digits (not made by ``new_file_id``)."""
    head = file_id[:_TIME_DIGITS]
    if len(head) != _TIME_DIGITS:
        return None
    try:
        return int(head, 16) / 1000.0
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Policy:
    max_l1_files: int = 16
    max_l1_bytes: int = 64 << 20
    max_l1_age_s: float = 300.0
    job_files: int = 128
    job_bytes: int = 256 << 20

    @classmethod
    def from_config(cls, config: Config) -> Policy:
        return cls(
            max_l1_files=config.compaction_l1_files,
            max_l1_bytes=config.compaction_l1_bytes,
            max_l1_age_s=config.compaction_l1_age_s,
            job_files=config.compaction_job_files,
            job_bytes=config.compaction_job_bytes,
        )

    def cheap_reason(self, l1: Sequence[str], now: float) -> str | None:
        """The reason to compact that needs no sidecar: ``"files"``, ``"age"`` or None."""
        if len(l1) > self.max_l1_files:
            return "files"
        if l1:
            times = [t for t in map(file_time, l1) if t is not None]
            if times and now - min(times) > self.max_l1_age_s:
                return "age"
        return None

    def reason(self, l1: Sequence[str], sizes: Sequence[int] | None, now: float) -> str | None:
        """Why the branch with L1 list ``l1`` needs compaction, or None if it does not.

        ``sizes`` are the SST sizes of ``l1``'s files in the same order (None when not
        known: only the file-count and age triggers are checked).
        """
        cheap = self.cheap_reason(l1, now)
        if cheap is not None:
            return cheap
        if sizes is not None and sum(sizes) > self.max_l1_bytes:
            return "bytes"
        return None

    def select_prefix(self, l1: Sequence[str], sizes: Sequence[int]) -> list[str]:
        """The oldest files of ``l1`` one job merges: at most ``job_files`` files and
        ``job_bytes`` bytes, and never nothing when ``l1`` is not empty.

        ``sizes`` may be shorter than ``l1`` (the caller fetched sidecars of a prefix).
        """
        if len(sizes) > len(l1):
            raise ValueError("more sizes than L1 files")
        out: list[str] = []
        total = 0
        for fid, size in zip(l1, sizes, strict=False):
            if len(out) >= self.job_files or (out and total + size > self.job_bytes):
                break
            out.append(fid)
            total += size
        return out
