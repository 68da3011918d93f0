"""deploy/: every command line in the systemd units, the compose file and the
Kubernetes manifests is accepted by the real command-line parser with its configuration,
every probe path answers 200 on a real server, and grace periods outlast the drain."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any

import botocore.session
import httpx
import pytest
import yaml

import committer.__main__ as committer_cli
import compactor.__main__ as compactor_cli
from lsmstore.config import load_config
from lsmstore.server import __main__ as server_cli
from lsmstore.testing.server_process import ServerProcess
from lsmstore.testing.servers import MOTO_ENV, WeedServer

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
CONFIG_PATH = "/etc/lsmstore/lsmstore.toml"


def _k8s() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for f in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


def _containers() -> list[dict[str, Any]]:
    return [
        c
        for d in _k8s()
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    ]


def _commands() -> list[list[str]]:
    cmds: list[list[str]] = []
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        line = re.search(r"^ExecStart=(.+)$", unit.read_text(), re.M)
        assert line, unit
        argv = shlex.split(line.group(1))
        cmds.append([Path(argv[0]).name, *argv[1:]])
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    for name in ("server", "compactor", "committer"):
        cmds.append(compose["services"][name]["command"])
    cmds += [c["command"] for c in _containers()]
    return cmds


def _config_file(tmp_path: Path) -> Path:
    """The ConfigMap's lsmstore.toml (the files the commands name are /etc paths)."""
    cm = next(d for d in _k8s() if d["kind"] == "ConfigMap")
    path = tmp_path / "configmap.toml"
    path.write_text(cm["data"]["lsmstore.toml"])
    return path


def test_every_command_line_is_accepted_by_the_real_cli(tmp_path: Path) -> None:
    configs = [DEPLOY / "lsmstore.toml", _config_file(tmp_path)]
    cmds = _commands()
    assert {c[0] for c in cmds} == {"lsmstore-server", "lsmstore-compactor", "lsmstore-committer"}
    for cmd in cmds:
        for config in configs:
            args = [str(config) if a == CONFIG_PATH else a for a in cmd[1:]]
            if cmd[0] == "lsmstore-server":
                parsed = server_cli.parser().parse_args(args)
                cfg = server_cli.config_from(parsed)
                assert cfg.server_port == 8000
            elif cmd[0] == "lsmstore-compactor":
                parsed = compactor_cli.parser().parse_args(args)
                load_config(parsed.refstore, config=parsed.config, environ={})
            else:
                parsed = committer_cli.parser().parse_args(args)
                load_config(parsed.refstore, config=parsed.config, environ={})


def test_grace_periods_outlast_the_drain(tmp_path: Path) -> None:
    drain = load_config(config=_config_file(tmp_path), environ={}).server_drain_timeout_s
    server = next(d for d in _k8s() if d["kind"] == "Deployment"
                  and d["metadata"]["name"] == "lsmstore-server")  # fmt: skip
    assert server["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain + 5
    unit = (DEPLOY / "systemd" / "lsmstore-server.service").read_text()
    stop = int(re.search(r"^TimeoutStopSec=(\d+)", unit, re.M).group(1))  # type: ignore[union-attr]
    deploy_drain = tomllib.loads((DEPLOY / "lsmstore.toml").read_text())["server"][
        "drain_timeout_s"
    ]
    assert stop > deploy_drain
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert int(compose["services"]["server"]["stop_grace_period"].rstrip("s")) > deploy_drain
    assert any(d["kind"] == "PodDisruptionBudget" for d in _k8s())


def test_every_probe_path_answers(server: ServerProcess) -> None:
    paths = set()
    for c in _containers():
        for probe in ("livenessProbe", "readinessProbe"):
            if probe in c:
                paths.add(c[probe]["httpGet"]["path"])
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    test = " ".join(compose["services"]["server"]["healthcheck"]["test"])
    paths |= set(re.findall(r"http://[^/]+(/[a-z]+)", test))
    assert paths == {"/healthz", "/readyz"}
    for p in paths:
        assert httpx.get(server.url + p).status_code == 200, p


def test_every_server_is_given_the_token_signing_secret(tmp_path: Path) -> None:
    """The deployments' RefStore is shared, so a server without the secret would not
    start: every way of running one here supplies it from a secret store."""
    from lsmstore.errors import InvalidInputError
    from lsmstore.server.secret import signing_key

    var = "LSMSTORE_SERVER_AUTH_SECRET_KEY"
    for config in (DEPLOY / "lsmstore.toml", _config_file(tmp_path)):
        with pytest.raises(InvalidInputError, match="server_auth_secret_key"):
            signing_key(load_config(config=config, environ={}))
    secrets = {d["metadata"]["name"]: d.get("stringData", {}) for d in _k8s()
               if d["kind"] == "Secret"}  # fmt: skip
    server = next(c for c in _containers() if c["name"] == "server")
    given = {k for ref in server["envFrom"] for k in secrets[ref["secretRef"]["name"]]}
    assert var in given
    value = next(s[var] for s in secrets.values() if var in s)
    config = load_config(config=_config_file(tmp_path), environ={var: value})
    assert signing_key(config) == value.encode()  # the placeholder has a usable length
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert var in compose["services"]["server"]["environment"]
    unit = (DEPLOY / "systemd" / "lsmstore-server.service").read_text()
    assert re.search(r"^EnvironmentFile=/", unit, re.M)
    for f in (DEPLOY / "systemd").glob("*.service"):
        assert re.search(r"^UMask=0077$", f.read_text(), re.M), f


def test_compose_bucket_service_creates_the_bucket(seaweed: WeedServer) -> None:
    """The compose file's ``bucket`` service, run as it is against a real SeaweedFS:
    it creates the bucket, and a second run (a restart) accepts the existing one."""
    service = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["bucket"]
    argv = service["command"]
    assert argv[:2] == ["python", "-c"]
    bucket = f"compose-{uuid.uuid4().hex[:8]}"
    env = {**service["environment"], **MOTO_ENV, "S3_ENDPOINT": seaweed.endpoint,
           "S3_BUCKET": bucket, "PATH": "/usr/bin:/bin"}  # fmt: skip
    for _ in range(2):
        done = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"bucket {bucket} ready" in done.stdout
    s3 = botocore.session.get_session().create_client(
        "s3",
        endpoint_url=seaweed.endpoint,
        region_name="us-east-1",
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    assert bucket in {b["Name"] for b in s3.list_buckets()["Buckets"]}


def test_every_container_is_probed_and_the_servers_run_with_affinity(tmp_path: Path) -> None:
    containers = {c["name"]: c for c in _containers()}
    assert set(containers) == {"server", "compactor", "committer"}
    for c in containers.values():
        for probe in ("livenessProbe", "readinessProbe"):
            port = c[probe]["httpGet"]["port"]
            assert port in {p["name"] for p in c["ports"]}, (c["name"], probe)
    for name in ("compactor", "committer"):  # the probes name the port the flags open
        argv = containers[name]["command"]
        assert argv[argv.index("--health-port") + 1] == str(
            containers[name]["ports"][0]["containerPort"]
        )
    server = next(
        d
        for d in _k8s()
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "lsmstore-server"
    )
    assert server["spec"]["replicas"] >= 3
    env = {
        e["name"]: e["value"].replace("$(POD_IP)", "10.0.0.7")
        for e in containers["server"]["env"]
        if "value" in e
    }
    assert all(k.startswith("LSMSTORE_") for k in env)
    cfg = load_config(config=_config_file(tmp_path), environ=env)
    assert cfg.server_affinity == "on"
    assert cfg.server_advertise_url == f"http://10.0.0.7:{cfg.server_port}"
