"""The example deployment configuration must stay loadable as the settings evolve."""

from __future__ import annotations

from pathlib import Path

from lsmstore.config import load_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def test_example_config_loads_with_every_key_known() -> None:
    cfg = load_config(config=DEPLOY / "lsmstore.toml", environ={})
    assert cfg.refstore.startswith("redis://")
    assert cfg.compaction_in_process_enabled is False
    assert cfg.cache_ram_bytes == 1 << 30
    assert cfg.commit_max_staged_bytes == 256 << 20


def test_service_units_start_the_console_scripts() -> None:
    pyproject = (DEPLOY.parent / "pyproject.toml").read_text()
    for worker in ("compactor", "committer"):
        unit = (DEPLOY / "systemd" / f"lsmstore-{worker}.service").read_text()
        assert f"lsmstore-{worker} --config" in unit
        assert f'lsmstore-{worker} = "{worker}.__main__:main"' in pyproject
