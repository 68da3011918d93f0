"""Running the server: the Store, the app under uvicorn (uvloop, httptools), and drain.

Stack: a plain ASGI app under uvicorn with uvloop and httptools, chosen by measurement
(BENCHMARKS.md, "ASGI stack"): it ran a tiny JSON endpoint as fast as granian embedded
in the same process, 1.5x faster than the same endpoint on Starlette, and it leaves
the process model (one process, our event loop, our signal handling) to us.  Under the
server's own routes (``python -m bench asgi_stack real``) granian embedded was within
the noise of it and uvicorn's h11 protocol twice as costly (docs/decisions.md, "The
HTTP core").  Its
protocol sends each response in one write (:mod:`lsmstore.server.protocol`).

**Drain** (SIGTERM or SIGINT): readiness turns 503 at once; the listening sockets
close; idle keep-alive connections close and busy ones close after their current
response; requests in flight run to their end -- a write is answered only once it is
durable and appended, so every 2xx is a durable write; then every branch writer is
flushed and the Store closed.  All of it within ``server_drain_timeout_s``; past the
deadline requests still running are cancelled (their clients get no answer and must
treat the outcome as unknown) and the process exits with code 1.  A second signal
ends the drain at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import resource
import secrets
import signal
import sys
import threading
import time
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import uvicorn

from lsmstore.affinity import Membership
from lsmstore.client import Store
from lsmstore.config import Config
from lsmstore.errors import LsmError, UnavailableError
from lsmstore.gcfreeze import freeze_startup_state
from lsmstore.operations.imports import check_grants
from lsmstore.refstore.base import RefStore
from lsmstore.refstore.url import open_refstore
from lsmstore.server import secret
from lsmstore.server.app import App
from lsmstore.server.auth import Authenticator, RecordStore
from lsmstore.server.context import Context
from lsmstore.server.forwarding import Forwarder
from lsmstore.server.instrument import Timed
from lsmstore.server.metrics import Metrics
from lsmstore.server.probes import ServerProbes
from lsmstore.server.protocol import ConnectionLimits, limited_protocol
from lsmstore.server.throttle import AuthThrottle, WindowCounters
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store

log = logging.getLogger("lsmstore.server")

VERSION = "0.1.0"


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling (ours drains the Store too)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def make_context(
    config: Config, store: Store | None = None, *, signing_key: bytes | None = None
) -> Context:
    """The server's state.  ``signing_key`` (:mod:`.secret`) signs login tokens; None
    for processes that issue none (the credentials commands)."""
    metrics = Metrics()
    if store is None:
        refstore = cast(RefStore, Timed(open_refstore(config.refstore_url), "refstore", metrics))
        store = Store(
            config,
            refstore=refstore,
            open_objects=lambda url: cast(
                ObjectStore,
                Timed(open_object_store(url, local_sync=config.local_sync), "objects", metrics),
            ),
        )
    store.add_append_listener(metrics.on_append)
    throttle = AuthThrottle(
        cast(WindowCounters, store.refstore),
        window_s=config.server_auth_failure_window_s,
        max_per_key=config.server_auth_max_failures_per_key,
        max_per_client=config.server_auth_max_failures_per_client,
        registry=metrics.registry,
    )
    auth = Authenticator(
        cast(RecordStore, store.refstore),
        signing_key=signing_key,
        revalidate_s=config.server_auth_revalidate_s,
        throttle=throttle,
    )
    return Context(store, config, auth, metrics)


def uvicorn_config(app: Any, config: Config, metrics: Metrics) -> uvicorn.Config:
    refused = metrics.connections_refused
    return uvicorn.Config(
        app,
        host=config.server_host,
        port=config.server_port,
        http=limited_protocol(
            ConnectionLimits(
                max_header_bytes=config.server_max_header_bytes,
                header_timeout_s=config.server_header_timeout_s,
                idle_timeout_s=config.server_keepalive_s,
                max_connections=config.server_max_connections,
                on_refused=lambda reason: refused.labels(reason).inc(),
            )
        ),
        lifespan="off",
        access_log=False,
        log_config=None,
        server_header=False,
        # The peer's address is the client's: an X-Forwarded-For header is not believed
        # (from a loopback peer uvicorn would, by default), so that no client picks the
        # address its failed authentications count under (docs/security.md).
        proxy_headers=False,
        timeout_keep_alive=int(max(1, config.server_keepalive_s)),
        timeout_graceful_shutdown=int(max(1, config.server_drain_timeout_s)),
        ssl_certfile=config.server_tls_cert or None,
        ssl_keyfile=config.server_tls_key or None,
        backlog=4096,
    )


#: Threads of the server's executor (``asyncio.to_thread``): asyncio's default size.
EXECUTOR_THREADS = min(32, (os.cpu_count() or 1) + 4)
#: Seconds the executor's threads may take to start (a warning past it, not an error).
THREADS_START_S = 60.0


async def start_threads(loop: asyncio.AbstractEventLoop) -> None:
    """Give ``loop`` a default executor of :data:`EXECUTOR_THREADS` threads, all started
    now.  An executor starts a thread when a call finds none idle, and ``Thread.start``
    waits on the event loop's thread until the new thread runs: on a loaded machine
    that held the loop for up to hundreds of milliseconds in the middle of a batch
    (docs/server.md, "Health probes during maximal batches")."""
    executor = ThreadPoolExecutor(EXECUTOR_THREADS, thread_name_prefix="lsmstore-server")
    loop.set_default_executor(executor)
    # each call waits for all the others: every one of them needs a thread of its own
    barrier = threading.Barrier(EXECUTOR_THREADS)
    try:
        await asyncio.gather(
            *(loop.run_in_executor(None, barrier.wait, THREADS_START_S)
              for _ in range(EXECUTOR_THREADS))
        )  # fmt: skip
    except threading.BrokenBarrierError:  # advisory: threads start on demand then
        log.warning("the executor's threads did not start within %.0f s", THREADS_START_S)


#: Open files the server needs besides its connections (object store, RefStore,
#: staging files, the worker's pipes), for the start-up check of the open-file limit.
FILES_BESIDE_CONNECTIONS = 256


def _check_open_files(config: Config) -> None:
    """Warn when the open-file limit is below ``server_max_connections`` and what the
    server needs beside them: the kernel would then refuse connections before the
    server's own limit answers them (docs/security.md, "Limits")."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = config.server_max_connections + FILES_BESIDE_CONNECTIONS
    if soft != resource.RLIM_INFINITY and soft < need:
        log.warning(
            "the open-file limit (%d) is below server_max_connections + %d (%d): raise it "
            "(ulimit -n, LimitNOFILE) or lower server_max_connections",
            soft, FILES_BESIDE_CONNECTIONS, need,
            extra={"fields": {"event": "open_file_limit", "limit": soft, "needed": need}},
        )  # fmt: skip


async def serve(
    config: Config,
    *,
    init: bool = False,
    health_host: str = "127.0.0.1",
    health_port: int | None = None,
    status_file: str | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT; the exit code (0: drained in time).  ``health_port``
    and ``status_file``: the common service flags (:mod:`lsmstore.server.probes`)."""
    await start_threads(asyncio.get_running_loop())  # before anything uses a thread
    ctx = make_context(config, signing_key=secret.signing_key(config))
    probes = ServerProbes(
        ctx, health_host=health_host, health_port=health_port, status_file=status_file
    )
    try:
        await probes.start()
    except OSError:
        await probes.aclose()
        await ctx.store.aclose()
        raise
    try:
        return await _serve(ctx, config, init, probes)
    finally:
        await probes.aclose()


async def _serve(ctx: Context, config: Config, init: bool, probes: ServerProbes) -> int:
    loop = asyncio.get_running_loop()
    if init:
        from lsmstore.server.credentials import init_admin

        await init_admin(ctx.auth)
    elif not await ctx.auth.has_keys():
        log.warning(
            "no access keys exist: every request will be refused; start once with --init "
            "or run 'credentials create --role admin'",
            extra={"fields": {"event": "no_keys"}},
        )
    _check_open_files(config)
    try:
        await check_grants(ctx.store.refstore, config)
    except UnavailableError as e:  # each import checks again when it starts
        log.warning(
            "the import sources could not be checked: %s", e,
            extra={"fields": {"event": "import_sources_unchecked", "error": str(e)}},
        )  # fmt: skip
    except LsmError:
        await ctx.store.aclose()
        raise
    app = App(ctx, VERSION)
    server = _Uvicorn(uvicorn_config(app, config, ctx.metrics))
    deadline: list[float] = []

    def drain(signum: int) -> None:
        if ctx.draining:
            log.warning(
                "second signal: stopping at once", extra={"fields": {"event": "force_exit"}}
            )
            server.force_exit = True
            return
        ctx.draining = True
        ctx.metrics.draining.set(1)
        probes.draining()
        deadline.append(time.monotonic() + config.server_drain_timeout_s)
        log.info(
            "draining",
            extra={"fields": {"event": "draining", "signal": signal.Signals(signum).name,
                              "deadline_s": config.server_drain_timeout_s}},
        )  # fmt: skip
        server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, drain, sig)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn has no event)
        await asyncio.sleep(0.01)
    if task.done():
        await ctx.store.aclose()
        task.result()
        return 1
    # what a first write would do, done before the first request (docs/server.md,
    # "Health probes during maximal batches"): the startup state out of the cyclic
    # collector's full collections, the encoder's worker process started (the
    # executor's threads are, in serve()); and the GIL handed to the event loop sooner
    if config.gc_freeze != "off":
        freeze_startup_state()
    ctx.store.encoder.start()
    sys.setswitchinterval(config.server_switch_interval_ms / 1000)
    sock = server.servers[0].sockets[0].getsockname()
    scheme = "https" if config.server_tls_cert else "http"
    listening = {
        "event": "listening",
        "url": f"{scheme}://{sock[0]}:{sock[1]}",
        "host": sock[0],
        "port": sock[1],
        "refstore": ctx.store.config.refstore_url,
        "gc_frozen": gc.get_freeze_count(),
        "switch_interval_ms": round(sys.getswitchinterval() * 1000, 3),
    }
    if probes.health is not None:
        listening["health_port"] = probes.health.port
    if config.server_affinity == "on":
        ctx.membership = Membership(
            ctx.store.refstore,
            name=f"serve-{secrets.token_hex(8)}",
            address=config.server_advertise_url or str(listening["url"]),
            heartbeat_s=config.server_member_heartbeat_s,
            ttl_s=config.server_member_ttl_s,
        )
        try:
            await ctx.membership.start()
        except LsmError as e:  # advisory: the daemon serves alone until a heartbeat works
            log.warning("announcing this daemon failed: %s", e)
        listening["member"] = ctx.membership.name
        if ctx.auth.signing_key is not None:
            forwarded = ctx.metrics.forwarded
            ctx.forwarder = Forwarder(
                ctx.membership,
                ctx.auth,
                ctx.auth.signing_key,
                max_body_bytes=config.server_forward_max_bytes,
                timeout_s=config.server_forward_timeout_s,
                connect_timeout_s=config.server_forward_connect_timeout_s,
                redirect=config.server_forward_mode == "redirect",
                outcomes=lambda outcome: forwarded.labels(outcome).inc(),
            )
    await probes.listening()
    log.info("listening", extra={"fields": listening})
    if init:
        from lsmstore.ui.assets import page_url

        print(f"Web UI: {page_url(scheme, sock[0], sock[1])} (log in with an access key)",
              flush=True)  # fmt: skip
    await task
    if ctx.membership is not None:
        await ctx.membership.aclose()  # withdraw: its branches move to the others now
    if ctx.forwarder is not None:
        await ctx.forwarder.aclose()
    code = 0
    remaining = (deadline[0] - time.monotonic()) if deadline else config.server_drain_timeout_s
    try:
        await asyncio.wait_for(ctx.store.aclose(), max(0.1, remaining))
    except TimeoutError:
        log.error(
            "drain deadline passed before the store closed",
            extra={"fields": {"event": "drain_timeout"}},
        )
        code = 1
    if server.force_exit:
        code = 1
    log.info("stopped", extra={"fields": {"event": "stopped", "exit_code": code}})
    return code
