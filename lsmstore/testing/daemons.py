"""Several ``lsmstore serve`` daemons, a compactor and a committer on one RefStore and one
S3 server, as real processes on loopback: the deployment of docs/server.md ("Several
daemons"), for tests and benchmarks.

:func:`start_cluster` starts them (the first daemon with ``--init`` creates the admin
key, the others reuse it), every process with its own home and so its own cache
directory; :meth:`Cluster.stop` ends whatever still runs.  Daemons are members of the
RefStore's group (``server_affinity``) unless ``affinity`` is False, with short
heartbeats so that a killed one drops out within ``member_ttl_s``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from signal import SIGKILL, SIGTERM

import httpx

from lsmstore.testing.server_process import ServerProcess, start_server
from lsmstore.testing.servers import MOTO_ENV

#: The token signing secret every daemon of a cluster shares.
SECRET = "the-signing-secret-of-one-test-cluster-" + "s" * 16


@dataclass
class Cluster:
    daemons: list[ServerProcess]
    workers: dict[str, subprocess.Popen[bytes]]
    env: dict[str, str]
    refstore_url: str
    workdir: Path
    killed: set[int] = field(default_factory=set)

    @property
    def admin(self) -> tuple[str, str]:
        return self.daemons[0].admin

    def live(self) -> list[ServerProcess]:
        return [d for i, d in enumerate(self.daemons) if i not in self.killed]

    def member_name(self, daemon: ServerProcess) -> str:
        return str(daemon.events("listening")[0]["member"])

    def kill(self, daemon: ServerProcess) -> None:
        """kill -9 (no drain, no withdrawal: its member record expires)."""
        self.killed.add(self.daemons.index(daemon))
        daemon.stop(SIGKILL)

    def stop(self) -> None:
        for d in self.daemons:
            d.stop(SIGKILL)
        for p in self.workers.values():
            if p.poll() is None:
                p.send_signal(SIGTERM)
        for p in self.workers.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def metric(daemon: ServerProcess, name: str, **labels: str) -> float:
    """The value of one sample of a daemon's ``/metrics`` (0 when absent)."""
    text = httpx.get(daemon.url + "/metrics", auth=daemon.admin, timeout=60).text
    sel = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{re.escape(name)}{re.escape('{' + sel + '}') if sel else ''} (\S+)$"
    m = re.search(pattern, text, re.M)
    return float(m.group(1)) if m else 0.0


def start_cluster(
    workdir: Path,
    *,
    redis_url: str,
    s3_endpoint: str,
    daemons: int = 3,
    affinity: bool = True,
    member_heartbeat_s: float = 0.2,
    member_ttl_s: float = 2.0,
    workers: bool = True,
    env: dict[str, str] | None = None,
) -> Cluster:
    """Start the processes (on a fresh key prefix of the Redis RefStore at ``redis_url``);
    API callers may name ``s3_endpoint`` in their namespaces."""
    refstore = f"{redis_url}?prefix=cluster-{uuid.uuid4().hex[:8]}:"
    full = {
        **MOTO_ENV,
        "LSMSTORE_REFSTORE": refstore,
        "LSMSTORE_SERVER_AUTH_SECRET_KEY": SECRET,
        "LSMSTORE_SERVER_AFFINITY": "on" if affinity else "off",
        "LSMSTORE_SERVER_MEMBER_HEARTBEAT_S": str(member_heartbeat_s),
        "LSMSTORE_SERVER_MEMBER_TTL_S": str(member_ttl_s),
        "LSMSTORE_SERVER_NAMESPACE_ENDPOINTS": s3_endpoint,
        **(env or {}),
    }
    cluster = Cluster([], {}, full, refstore, workdir)
    try:
        for i in range(daemons):
            admin = cluster.daemons[0].admin if cluster.daemons else None
            cluster.daemons.append(start_server(workdir / f"serve{i}", env=full, admin=admin))
        if workers:
            for name in ("compactor", "committer"):
                home = workdir / name
                home.mkdir(parents=True, exist_ok=True)
                log = (home / "log").open("wb")
                cluster.workers[name] = subprocess.Popen(
                    [sys.executable, "-m", name, "--refstore", refstore, "--interval", "0.2",
                     "--owner", f"cluster-{name}"],
                    env={**cluster.daemons[0].env, "LSMSTORE_HOME": str(home)},
                    stdout=subprocess.DEVNULL, stderr=log,
                )  # fmt: skip
                log.close()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def s3_namespace(bucket: str, name: str, endpoint: str) -> str:
    return f"s3://{bucket}/{name}?endpoint_url={endpoint}&path_style=true"
