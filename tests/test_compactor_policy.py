"""The compaction policy (pure, clock injected) and its configuration."""

from __future__ import annotations

import pytest

from lsmstore.compaction.policy import Policy, file_time
from lsmstore.config import load_config
from lsmstore.errors import InvalidInputError
from lsmstore.staging.files import new_file_id

T0 = 1_700_000_000.0  # a fixed "now"


def ids_at(*times: float) -> list[str]:
    """File ids created at the given times (seconds since the epoch)."""
    return [new_file_id(clock=float(t).__float__, randbits=lambda n: 7) for t in times]


def test_file_time_reads_the_id_timestamp() -> None:
    (fid,) = ids_at(T0 + 0.123)
    assert file_time(fid) == pytest.approx(T0 + 0.123, abs=1e-3)
    assert file_time("zz") is None
    assert file_time("not-hex-at-all-xxxxxxxxxxxxxx") is None


def test_no_l1_means_nothing_to_do() -> None:
    p = Policy(max_l1_files=2, max_l1_bytes=10, max_l1_age_s=1)
    assert p.reason([], [], T0) is None
    assert p.reason([], None, T0 + 1e6) is None


def test_file_count_trigger_is_strictly_more_than() -> None:
    p = Policy(max_l1_files=3, max_l1_bytes=10**9, max_l1_age_s=1e9)
    assert p.reason(ids_at(T0, T0, T0), None, T0) is None
    assert p.reason(ids_at(T0, T0, T0, T0), None, T0) == "files"


def test_byte_trigger_uses_sizes_when_known() -> None:
    p = Policy(max_l1_files=100, max_l1_bytes=1000, max_l1_age_s=1e9)
    ids = ids_at(T0, T0)
    assert p.reason(ids, [500, 500], T0) is None
    assert p.reason(ids, [500, 501], T0) == "bytes"
    assert p.reason(ids, None, T0) is None  # sizes unknown: only count and age


def test_age_trigger_uses_the_oldest_file() -> None:
    p = Policy(max_l1_files=100, max_l1_bytes=10**9, max_l1_age_s=60)
    ids = ids_at(T0 + 50, T0)  # the oldest need not be first
    assert p.reason(ids, [1, 1], T0 + 60) is None
    assert p.reason(ids, [1, 1], T0 + 60.5) == "age"
    assert p.cheap_reason(ids, T0 + 61) == "age"


def test_ids_without_a_timestamp_never_trigger_age() -> None:
    p = Policy(max_l1_files=100, max_l1_bytes=10**9, max_l1_age_s=1)
    assert p.reason(["custom_id"], [1], T0) is None


def test_select_prefix_is_bounded_by_files_and_bytes() -> None:
    ids = ids_at(*(T0 + i for i in range(10)))
    p = Policy(job_files=4, job_bytes=1000)
    assert p.select_prefix(ids, [100] * 10) == ids[:4]
    assert p.select_prefix(ids, [400] * 10) == ids[:2]
    # always at least one file, however large
    assert p.select_prefix(ids, [5000] * 10) == ids[:1]
    # sizes may cover only a head of the list
    assert p.select_prefix(ids, [100, 100]) == ids[:2]
    assert p.select_prefix([], []) == []
    with pytest.raises(ValueError):
        p.select_prefix(ids[:1], [1, 2])


def test_policy_from_config() -> None:
    cfg = load_config(
        environ={},
        compaction_l1_files=5,
        compaction_l1_bytes="1MiB",
        compaction_l1_age_s=7,
        compaction_job_files=9,
        compaction_job_bytes="2MiB",
    )
    assert Policy.from_config(cfg) == Policy(5, 1 << 20, 7.0, 9, 2 << 20)


def test_compaction_settings_validate_and_parse() -> None:
    cfg = load_config(environ={"LSMSTORE_COMPACTION_GRACE_S": "0.5"})
    assert cfg.compaction_grace_s == 0.5
    with pytest.raises(InvalidInputError, match="compaction_job_files"):
        load_config(environ={}, compaction_job_files=0)
    with pytest.raises(InvalidInputError, match="compaction_grace_s"):
        load_config(environ={}, compaction_grace_s=0)
    with pytest.raises(InvalidInputError, match="compaction_in_process"):
        load_config(environ={}, compaction_in_process="sometimes")


@pytest.mark.parametrize(
    ("refstore", "setting", "enabled"),
    [
        (None, None, True),  # the embedded default
        ("local:///tmp/x", "auto", True),
        ("redis://127.0.0.1:6379/0", None, False),
        ("dynamodb://t?region=us-east-1", "auto", False),
        ("redis://127.0.0.1:6379/0", True, True),
        ("redis://127.0.0.1:6379/0", "on", True),
        (None, False, False),
        (None, "off", False),
    ],
)
def test_in_process_switch(refstore: str | None, setting: object, enabled: bool) -> None:
    cfg = load_config(refstore, environ={}, compaction_in_process=setting)
    assert cfg.compaction_in_process_enabled is enabled


def test_in_process_switch_from_environment() -> None:
    cfg = load_config(environ={"LSMSTORE_COMPACTION_IN_PROCESS": "false"})
    assert cfg.compaction_in_process == "off" and not cfg.compaction_in_process_enabled
