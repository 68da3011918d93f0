"""The example deployment configuration must stay loadable as the settings evolve."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from committer import __main__ as committer_main
from compactor import __main__ as compactor_main
from lsmstore.config import load_config
from lsmstore.service import ExitCode

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


def _unit(worker: str) -> dict[str, str]:
    settings: dict[str, str] = {}
    for line in (DEPLOY / "systemd" / f"lsmstore-{worker}.service").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings[key] = value
    return settings


@pytest.mark.parametrize("worker", ["compactor", "committer"])
def test_service_unit_flags_parse(worker: str) -> None:
    """The unit's command line is accepted by the worker's own parser, and the unit
    agrees with it on the exit codes and the shutdown deadline."""
    parser = {"compactor": compactor_main.parser, "committer": committer_main.parser}[worker]
    unit = _unit(worker)
    argv = shlex.split(unit["ExecStart"])
    assert argv[0].endswith(f"/lsmstore-{worker}")
    args = parser().parse_args(argv[1:])
    assert args.config == "/etc/lsmstore/lsmstore.toml"
    assert args.health_port is not None and args.health_host == "127.0.0.1"
    assert args.status_file.startswith(f"/run/{unit['RuntimeDirectory']}/")
    # systemd waits longer than the drain deadline before it sends SIGKILL
    assert float(unit["TimeoutStopSec"]) > args.shutdown_timeout
    assert unit["KillSignal"] == "SIGTERM"
    assert unit["RestartPreventExitStatus"] == str(int(ExitCode.USAGE))


def test_every_unit_has_its_own_cache_directory() -> None:
    """The units share ``lsmstore.toml`` and so its ``home``; the disk cache serves one
    process (docs/storage.md), so each unit's environment names its own directory."""
    caches = set()
    for service in ("server", "compactor", "committer"):
        text = (DEPLOY / "systemd" / f"lsmstore-{service}.service").read_text()
        environ = dict(
            line.removeprefix("Environment=").split("=", 1)
            for line in text.splitlines()
            if line.startswith("Environment=")
        )
        cfg = load_config(config=DEPLOY / "lsmstore.toml", environ=environ)
        caches.add(cfg.cache_path)
    assert len(caches) == 3
    assert load_config(config=DEPLOY / "lsmstore.toml", environ={}).cache_path not in caches
