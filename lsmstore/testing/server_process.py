"""A real ``lsmstore serve`` process on a free loopback port, for tests and benchmarks.

:func:`start_server` runs ``python -m lsmstore.server --port 0 --init`` with a private
``$LSMSTORE_HOME``, reads the admin key it prints once and the URL of its
``listening`` log line, and keeps reading its log (``ServerProcess.log_lines``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from signal import SIGTERM
from typing import IO, Any


@dataclass
class ServerProcess:
    proc: subprocess.Popen[str]
    url: str
    home: Path
    env: dict[str, str]
    admin: tuple[str, str]
    log_lines: list[dict[str, Any]] = field(default_factory=list)
    #: What the server printed on standard output (the admin key of ``--init``).
    out_lines: list[str] = field(default_factory=list)

    @property
    def api(self) -> str:
        return self.url + "/api/v1"

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lsmstore.server", *args],
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def create_key(
        self, role: str, repositories: tuple[str, ...] = (), key_id: str | None = None
    ) -> tuple[str, str]:
        args = ["credentials", "create", "--role", role]
        for r in repositories:
            args += ["--repository", r]
        if key_id:
            args += ["--access-key-id", key_id]
        out = self.cli(*args)
        if out.returncode != 0:
            raise RuntimeError(f"credentials create failed: {out.stderr}")
        return _parse_key(out.stdout)

    def stop(self, sig: int = SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in list(self.log_lines) if line.get("event") == name]


def _parse_key(stdout: str) -> tuple[str, str]:
    fields = dict(
        line.split(": ", 1) for line in stdout.splitlines() if ": " in line and "_" in line
    )
    return fields["access_key_id"].strip(), fields["secret_access_key"].strip()


def _pump(stream: IO[str], sink: list[dict[str, Any]], raw: list[str]) -> None:
    for line in stream:
        raw.append(line)
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            sink.append(doc)


def start_server(
    home: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    admin: tuple[str, str] | None = None,
    init: bool = True,
) -> ServerProcess:
    """Start the server (``args`` are extra flags) and wait until it listens.  On a
    home that has keys already, pass the ``admin`` key (nothing is printed then).
    ``init=False`` starts it without ``--init`` (no key is created; ``admin`` is then
    ``("", "")`` unless given).  On
    a shared RefStore (``--refstore redis://...``) the environment must name the token
    signing secret (``LSMSTORE_SERVER_AUTH_SECRET_KEY``)."""
    home.mkdir(parents=True, exist_ok=True)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LSMSTORE_")}
    full_env["LSMSTORE_HOME"] = str(home)
    full_env.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "lsmstore.server", "--host", "127.0.0.1", "--port", "0",
         *(["--init"] if init else []), *args],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[dict[str, Any]] = []
    raw: list[str] = []
    threading.Thread(target=_pump, args=(proc.stderr, lines, raw), daemon=True).start()
    out: list[str] = []
    threading.Thread(target=lambda: out.extend(proc.stdout or []), daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        listening = [e for e in list(lines) if e.get("event") == "listening"]
        if listening:
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"server did not start:\n{''.join(raw)}")
        time.sleep(0.02)
    url = str(listening[0]["url"])
    if not init:
        admin = admin or ("", "")
    if admin is not None:
        return ServerProcess(proc, url, home, full_env, admin, lines, out)
    # The key is printed before the server listens; stdout may still be in flight.
    while not any(line.startswith("secret_access_key") for line in out):
        if time.monotonic() > deadline:
            raise RuntimeError("the server printed no admin key (--init on a used home?)")
        time.sleep(0.01)
    admin = _parse_key("".join(out))
    return ServerProcess(proc, url, home, full_env, admin, lines, out)
