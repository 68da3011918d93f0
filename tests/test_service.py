"""lsmstore.service: JSON log lines with a request id, backoff with jitter, readiness
(logged once per change, served over HTTP, kept in a status file), the shared flags,
stop signals and exit codes."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import os
import random
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lsmstore.errors import ObjectNotFoundError, UnavailableError
from lsmstore.service import (
    Backoff,
    ExitCode,
    HealthServer,
    Readiness,
    Service,
    Shutdown,
    StatusFile,
    add_common_flags,
    add_worker_flags,
    capture_events,
    configure_logging,
    request_context,
)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_service_request_id_and_fields(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging("info", "json", service="compactor", stream=out)
    log = logging.getLogger("x")
    log.info("outside", extra={"fields": {"event": "e1", "n": 1}})
    with request_context() as rid:
        log.info("hello %s", "there", extra={"fields": {"event": "e2"}})
        with request_context("fixed-id"):
            log.warning("inner")
        log.debug("not at info level")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [d["msg"] for d in lines] == ["outside", "hello there", "inner", "failed"]
    assert {"ts", "level", "service", "logger", "msg"} <= set(lines[0])
    assert lines[0]["service"] == "compactor" and lines[0]["n"] == 1
    assert lines[0]["ts"].endswith("+00:00")
    assert "request_id" not in lines[0] and "request_id" not in lines[3]
    assert lines[1]["request_id"] == rid and len(rid) == 16
    assert lines[2]["request_id"] == "fixed-id" and lines[2]["level"] == "warning"
    assert "ValueError: boom" in lines[3]["exc"]


async def test_request_id_follows_tasks(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging("info", "json", stream=out)

    async def job(name: str) -> None:
        with request_context(name):
            await asyncio.sleep(0)
            await asyncio.create_task(child())

    async def child() -> None:
        logging.getLogger("x").info("child")

    await asyncio.gather(job("a"), job("b"))
    ids = sorted(json.loads(x)["request_id"] for x in out.getvalue().splitlines())
    assert ids == ["a", "b"]


def test_text_format_and_bad_settings(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging("debug", "text", stream=out)
    with request_context("r1"):
        logging.getLogger("x").debug("hi", extra={"fields": {"event": "e", "k": "v"}})
    line = out.getvalue().strip()
    assert " debug x [r1] hi " in line and 'k="v"' in line
    with pytest.raises(ValueError):
        configure_logging("loud")
    with pytest.raises(ValueError):
        configure_logging("info", "xml")


def test_backoff_grows_with_jitter_up_to_the_cap() -> None:
    b = Backoff(0.1, 2.0, rng=random.Random(7))
    delays = [b.next_delay() for _ in range(10)]
    for n, d in enumerate(delays):
        top = min(2.0, 0.1 * 2**n)
        assert top / 2 <= d <= top
    assert len(set(delays[5:])) == 5  # capped, yet not in lock-step
    again = Backoff(0.1, 2.0, rng=random.Random(7))
    assert [again.next_delay() for _ in range(10)] == delays  # seeded: reproducible
    b.reset()
    assert b.next_delay() <= 0.1
    with pytest.raises(ValueError):
        Backoff(0, 1)


async def test_backoff_wait_ends_early_on_stop() -> None:
    stop = asyncio.Event()
    b = Backoff(3600, 3600)
    waiting = asyncio.create_task(b.wait(stop))
    await asyncio.sleep(0)
    stop.set()
    assert await waiting is False
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    assert await Backoff(1, 4, sleep=sleep, rng=random.Random(1)).wait() is True
    assert len(slept) == 1 and 0.5 <= slept[0] <= 1


async def test_readiness_logs_each_change_once() -> None:
    r = Readiness("svc", clock=lambda: 100.0)
    with capture_events("lsmstore.service") as cap:
        assert not r.ready and r.status == "starting"
        r.set_started()
        assert r.ready
        for _ in range(5):
            r.down("refstore", UnavailableError("connection refused"))
        assert not r.ready and r.status == "unavailable"
        assert r.snapshot()["dependencies"]["refstore"]["failures"] == 5
        r.up("refstore")
        r.up("refstore")

        async def ok() -> None:
            raise ObjectNotFoundError("k")  # an answer: reachable

        async def down() -> None:
            raise UnavailableError("reset")

        assert await r.check("objects", ok)
        assert not await r.check("objects", down)
        assert not await r.check("objects", down)
        with pytest.raises(ValueError):
            await r.check("objects", _raise_value_error)
        r.set_stopping()
    events = [(d["event"], d.get("dependency", d.get("ready"))) for d in cap.docs]
    assert events == [
        ("readiness", True),
        ("dependency_down", "refstore"),
        ("readiness", False),
        ("dependency_up", "refstore"),
        ("readiness", True),
        ("dependency_down", "objects"),
        ("readiness", False),
    ]
    assert r.snapshot()["status"] == "stopping"


async def _raise_value_error() -> None:
    raise ValueError("a bug, not an outage")


async def _http_get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, object]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(body)


async def test_health_server_answers_healthz_and_readyz() -> None:
    r = Readiness("committer")
    server = HealthServer(r, "127.0.0.1", 0)
    await server.start()
    try:
        assert server.port > 0
        assert await _http_get(server.port, "/healthz") == (
            200,
            {"service": "committer", "status": "alive"},
        )
        status, body = await _http_get(server.port, "/readyz")
        assert (status, body["status"]) == (503, "starting")
        r.set_started()
        status, body = await _http_get(server.port, "/readyz?verbose=1")
        assert (status, body["ready"]) == (200, True)
        r.down("refstore", "connection refused")
        status, body = await _http_get(server.port, "/readyz")
        assert status == 503
        assert body["dependencies"] == {
            "refstore": {
                "up": False,
                "since": body["dependencies"]["refstore"]["since"],  # type: ignore[index]
                "error": "connection refused",
                "failures": 1,
            }
        }
        assert (await _http_get(server.port, "/api/v1/repositories"))[0] == 404
        assert (await _http_get(server.port, "/readyz", "POST"))[0] == 405
        assert (await _http_get(server.port, "/readyz", "BOGUS LINE"))[0] == 400
    finally:
        await server.aclose()


async def test_status_file_follows_changes(tmp_path: Path) -> None:
    r = Readiness("compactor")
    path = tmp_path / "status.json"
    sf = StatusFile(r, path)
    await sf.start()
    assert json.loads(path.read_text())["status"] == "starting"
    r.set_started()
    r.down("refstore", "gone")
    await sf.aclose()  # writes the final state
    doc = json.loads(path.read_text())
    assert doc["pid"] == os.getpid() and doc["ready"] is False
    assert doc["dependencies"]["refstore"]["error"] == "gone"
    assert await asyncio.to_thread(os.listdir, tmp_path) == ["status.json"]  # no temporary


async def test_status_file_closes_with_the_last_state_after_a_slow_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change's write still running in its thread when the file is closed: the
    final state is written after it, never overwritten by it.  The slow write waits
    (at most a second) for the final state to be written first: a close that does
    not wait for it lets it land last."""
    r = Readiness("server")
    path = tmp_path / "status.json"
    sf = StatusFile(r, path)
    await sf.start()
    entered, final, slow_done = threading.Event(), threading.Event(), threading.Event()
    real = sf._write

    def write(doc: dict[str, Any]) -> None:
        if doc["status"] == "unavailable":
            entered.set()
            final.wait(1.0)
            real(doc)
            slow_done.set()
            return
        real(doc)
        if doc["status"] == "stopping":
            final.set()

    monkeypatch.setattr(sf, "_write", write)
    r.set_started()
    r.down("refstore", "gone")  # the background write of "unavailable" starts
    assert await asyncio.to_thread(entered.wait, 30)
    r.set_stopping()
    await sf.aclose()
    assert await asyncio.to_thread(slow_done.wait, 30)  # both writes are over
    assert json.loads(path.read_text())["status"] == "stopping"


async def test_shutdown_first_signal_drains_second_forces() -> None:
    sd = Shutdown(deadline_s=5)
    calls: list[str] = []
    sd.on_request(lambda: calls.append("stop"))
    sd.install()
    try:
        with capture_events("lsmstore.service") as cap:
            os.kill(os.getpid(), signal.SIGTERM)
            await sd.requested.wait()
            assert calls == ["stop"] and not sd.forced.is_set()
            os.kill(os.getpid(), signal.SIGINT)
            await sd.forced.wait()
        assert [d["event"] for d in cap.docs] == ["stopping", "stop_forced"]
        assert cap.docs[0]["deadline_s"] == 5
        late: list[str] = []
        sd.on_request(lambda: late.append("late"))  # registered after: runs at once
        assert late == ["late"]
    finally:
        sd.uninstall()


def test_flags_are_shared_and_checked() -> None:
    p = add_worker_flags(add_common_flags(argparse.ArgumentParser()))
    args = p.parse_args(["--refstore", "redis://x", "--once", "--health-port", "0"])
    assert (args.refstore, args.once, args.health_port, args.log_format) == (
        "redis://x",
        True,
        0,
        "json",
    )
    assert args.shutdown_timeout == 30.0 and args.health_host == "127.0.0.1"
    for bad in (
        ["--interval", "0"],
        ["--concurrency", "0"],
        ["--health-port", "70000"],
        ["--log-format", "xml"],
        ["--shutdown-timeout", "x"],
    ):
        with pytest.raises(SystemExit) as e:
            p.parse_args(bad)
        assert e.value.code == ExitCode.USAGE


def test_exit_codes_are_stable() -> None:
    # Part of the operations contract (docs/operations.md, systemd units).
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0,
        "FAILED": 1,
        "USAGE": 2,
        "UNAVAILABLE": 3,
        "INTERNAL": 70,
    }


def _service_docs(err: str) -> list[dict[str, Any]]:
    """The service's log lines of ``err``: every line is a JSON document, and those of
    the ``lsmstore.service`` logger carry events.  Others -- asyncio reporting an
    earlier test's leftovers, say, when the collector finds them during this one: the
    root logger is the process's -- are not the service's."""
    docs = [json.loads(line) for line in err.splitlines()]
    return [d for d in docs if d["logger"] == "lsmstore.service"]


def test_run_service_exits_after_the_deadline(capsys: pytest.CaptureFixture[str]) -> None:
    """A body that ignores the stop request (a long sweep) is cancelled one second
    after the drain deadline: the process always exits, with status 0."""
    from lsmstore.service import run_service

    async def body(service: Service) -> int:
        service.readiness.set_started()
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.Event().wait()  # never notices
        return int(ExitCode.FAILED)

    args = argparse.Namespace(shutdown_timeout=0.1, log_level="info", log_format="json")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        assert run_service("svc", args, body) == ExitCode.OK
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    events = [d["event"] for d in _service_docs(capsys.readouterr().err)]
    assert events[-4:] == ["stopping", "deadline_passed", "readiness", "exited"]
    assert events[0] == "started"


def test_run_service_maps_errors_to_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    from lsmstore.errors import InvalidInputError
    from lsmstore.service import run_service

    async def bad_config(service: Service) -> int:
        raise InvalidInputError("no such setting: x")

    async def bug(service: Service) -> int:
        raise KeyError("oops")

    args = argparse.Namespace(log_level="info", log_format="json")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        assert run_service("svc", args, bad_config) == ExitCode.USAGE
        assert run_service("svc", args, bug) == ExitCode.INTERNAL
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    docs = _service_docs(capsys.readouterr().err)
    assert [d["event"] for d in docs if d["event"] in ("config_error", "crashed")] == [
        "config_error",
        "crashed",
    ]
    crashed = next(d for d in docs if d["event"] == "crashed")
    assert "KeyError" in crashed["exc"]
    assert [d["code"] for d in docs if d["event"] == "exited"] == [2, 70]
