"""Throttling of failed authentications: the authenticator over a real embedded
RefStore with an injected clock (windows pass without sleeping), and a real server
process with small limits (429 in lakeFS's shape with Retry-After, on login too,
counted in /metrics)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import httpx
import pytest
from prometheus_client import CollectorRegistry

import lsmstore
from lsmstore.errors import PermissionDeniedError, UnavailableError
from lsmstore.refstore.embedded import EmbeddedRefStore
from lsmstore.server.auth import Authenticator, RecordStore
from lsmstore.server.errors import ApiError
from lsmstore.server.throttle import AuthThrottle, counter_name
from lsmstore.testing.server_process import ServerProcess, start_server

WINDOW = 60.0


class Clock:
    """Wall time for the RefStore's windows and the throttle; monotonic for the key
    cache: one fake clock drives all of them."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def basic(key_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{key_id}:{secret}".encode()).decode()


@pytest.fixture
async def records(tmp_path: Path) -> AsyncIterator[EmbeddedRefStore]:
    """A real embedded RefStore timed by the test's clock (its window counters too)."""
    store = EmbeddedRefStore(tmp_path / "refs", clock=CLOCK)
    try:
        yield store
    finally:
        await store.aclose()


CLOCK = Clock()


@pytest.fixture(autouse=True)
def _reset_clock() -> None:
    CLOCK.now = 1000.0


def make_auth(
    records: EmbeddedRefStore, per_key: int = 3, per_client: int = 5
) -> tuple[Authenticator, AuthThrottle]:
    throttle = AuthThrottle(
        records, window_s=WINDOW, max_per_key=per_key, max_per_client=per_client, clock=CLOCK,
        registry=CollectorRegistry(),
    )  # fmt: skip
    auth = Authenticator(
        cast(RecordStore, records), clock=CLOCK, wall_clock=CLOCK, throttle=throttle
    )
    return auth, throttle


async def status(auth: Authenticator, header: str | None, client: str | None) -> int:
    try:
        await auth.authenticate(header, client)
    except ApiError as e:
        return e.status
    return 200


def count(throttle: AuthThrottle, outcome: str) -> float:
    return throttle.failures.labels(outcome)._value.get()


async def test_a_key_is_throttled_after_its_limit_and_free_after_the_window(
    records: EmbeddedRefStore,
) -> None:
    auth, throttle = make_auth(records, per_key=3, per_client=0)
    p, secret = await auth.create_key("writer")
    good, bad = basic(p.access_key_id, secret), basic(p.access_key_id, "wrong-secret")
    for i in range(3):
        CLOCK.now += 1
        assert await status(auth, bad, f"10.0.0.{i}") == 401  # spread over addresses
    with pytest.raises(ApiError) as e:
        await auth.authenticate(good, "10.0.0.9")  # the right secret too: no oracle
    assert e.value.status == 429
    assert e.value.headers["Retry-After"] == str(int(WINDOW) - 2)  # first failure + window
    assert (count(throttle, "rejected"), count(throttle, "throttled")) == (3, 1)
    other, other_secret = await auth.create_key("reader")
    assert await status(auth, basic(other.access_key_id, other_secret), "10.0.0.9") == 200

    CLOCK.now = 1001 + WINDOW  # the window (from the first failure) has ended
    assert await status(auth, good, "10.0.0.1") == 200
    for _ in range(3):
        assert await status(auth, bad, "10.0.0.1") == 401
    # credentials this server verified lately still work; new attempts do not
    assert await status(auth, good, "10.0.0.1") == 200
    assert await status(auth, bad, "10.0.0.1") == 429


async def test_an_address_is_throttled_whatever_key_it_names(records: EmbeddedRefStore) -> None:
    auth, throttle = make_auth(records, per_key=0, per_client=4)
    p, secret = await auth.create_key("admin")
    junk = [
        basic("NOSUCHKEY1", "x" * 10),
        basic(p.access_key_id, "wrong-secret"),
        "Bearer not.a-token",
        "Basic !!!",
    ]
    for header in junk:
        assert await status(auth, header, "192.0.2.7") == 401
    assert await status(auth, basic(p.access_key_id, secret), "192.0.2.7") == 429
    assert await status(auth, basic(p.access_key_id, secret), "192.0.2.8") == 200
    for _ in range(10):  # no credentials at all: 401, never counted
        assert await status(auth, None, "192.0.2.8") == 401
    assert await status(auth, basic(p.access_key_id, secret), "192.0.2.8") == 200
    assert count(throttle, "rejected") == 4
    # login is throttled the same way
    CLOCK.now += 10  # past the verified key's revalidation: the counters are asked
    with pytest.raises(ApiError) as e:
        await auth.login(p.access_key_id, secret, "192.0.2.7")
    assert e.value.status == 429
    CLOCK.now += WINDOW
    assert (await auth.login(p.access_key_id, secret, "192.0.2.7")).access_key_id == (
        p.access_key_id
    )


async def test_zero_turns_the_limits_off(records: EmbeddedRefStore) -> None:
    auth, throttle = make_auth(records, per_key=0, per_client=0)
    for _ in range(50):
        assert await status(auth, basic("AKIANOPE", "wrong-secret"), "198.51.100.1") == 401
    assert count(throttle, "rejected") == 50
    for name in (counter_name("key", "AKIANOPE"), counter_name("client", "198.51.100.1")):
        assert (await records.read_window_count(name)).value == 0  # nothing counted


async def test_any_claimed_key_id_is_counted_under_a_bounded_name(
    records: EmbeddedRefStore,
) -> None:
    """A login names any access key id (the body bounds it, not the key-id rule): one
    that is long or holds odd characters is counted under a hash of it."""
    auth, throttle = make_auth(records, per_key=3, per_client=0)
    for claimed in ("k" * 1_000_000, "a\nb", "é/../x"):
        name = counter_name("key", claimed)
        assert len(name) < 64 and claimed not in name
        for _ in range(3):
            with pytest.raises(ApiError) as e:
                await auth.login(claimed, "wrong-secret", "198.51.100.7")
            assert e.value.status == 401
        with pytest.raises(ApiError) as e:
            await auth.login(claimed, "wrong-secret", "198.51.100.7")
        assert e.value.status == 429
        assert (await records.read_window_count(name)).value == 3
    assert counter_name("key", "AKIAL234") == "auth-failures/key/AKIAL234"
    assert count(throttle, "rejected") == 9


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {
        "LSMSTORE_SERVER_AUTH_MAX_FAILURES_PER_KEY": "2",
        "LSMSTORE_SERVER_AUTH_MAX_FAILURES_PER_CLIENT": "0",
        "LSMSTORE_SERVER_AUTH_FAILURE_WINDOW_S": "3600",
    }
    proc = start_server(tmp_path_factory.mktemp("throttle") / "home", env=env)
    try:
        yield proc
    finally:
        proc.stop()


def test_the_server_answers_429_with_retry_after(strict_server: ServerProcess) -> None:
    key_id, secret = strict_server.create_key("reader")
    api = strict_server.api
    for _ in range(2):
        assert httpx.get(api + "/repositories", auth=(key_id, "wrong-secret")).status_code == 401
    r = httpx.get(api + "/repositories", auth=(key_id, secret))
    assert r.status_code == 429, r.text
    assert r.json()["message"].startswith("too many failed authentications")
    assert 3500 <= int(r.headers["Retry-After"]) <= 3600
    login = httpx.post(api + "/auth/login",
                       json={"access_key_id": key_id, "secret_access_key": secret})  # fmt: skip
    assert login.status_code == 429 and "Retry-After" in login.headers
    admin = httpx.get(strict_server.url + "/metrics", auth=strict_server.admin)
    assert admin.status_code == 200  # another key from the same address is not affected
    lines = admin.text.splitlines()
    assert 'lsmstore_auth_failures_total{outcome="rejected"} 2.0' in lines
    assert 'lsmstore_auth_failures_total{outcome="throttled"} 2.0' in lines


async def test_the_remote_client_reports_a_throttled_key(strict_server: ServerProcess) -> None:
    key_id, secret = strict_server.create_key("writer")
    for wrong in ("wrong-secret-1", "wrong-secret-2"):
        async with lsmstore.connect(
            strict_server.url, access_key_id=key_id, secret_access_key=wrong
        ) as store:
            with pytest.raises(PermissionDeniedError):
                await store.list_repositories()
    async with lsmstore.connect(
        strict_server.url, access_key_id=key_id, secret_access_key=secret
    ) as store:
        with pytest.raises(UnavailableError) as e:
            await store.create_repository("never", storage_namespace="local://never")
    assert not e.value.outcome_unknown and "too many failed authentications" in str(e.value)


class _CountedRecords:
    """The embedded RefStore's records, counting ``get_record`` calls."""

    def __init__(self, inner: EmbeddedRefStore) -> None:
        self.inner = inner
        self.gets = 0

    async def get_record(self, kind: str, name: str) -> bytes:
        self.gets += 1
        return await self.inner.get_record(kind, name)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_requests_missing_a_signing_secret_together_share_one_read(
    records: EmbeddedRefStore,
) -> None:
    """S3 signature checks of one key that miss the secret cache at once (its entry
    expired under load) read the RefStore once, not once per request; a key deleted
    while a read is in flight is not kept."""
    counted = _CountedRecords(records)
    auth = Authenticator(cast(RecordStore, counted), clock=CLOCK, wall_clock=CLOCK,
                         signing_key=b"k" * 32)  # fmt: skip
    p, secret = await auth.create_key("writer")
    counted.gets = 0
    found = await asyncio.gather(*(auth.signing_secret(p.access_key_id) for _ in range(50)))
    assert {f[1] for f in found if f is not None} == {secret} and None not in found
    assert counted.gets == 2  # the credential and its sealed secret, once
    CLOCK.now += auth.revalidate_s + 1
    pending = asyncio.ensure_future(auth.signing_secret(p.access_key_id))
    await asyncio.sleep(0)
    await auth.delete_key(p.access_key_id)
    await pending
    assert await auth.signing_secret(p.access_key_id) is None


async def test_requests_presenting_the_same_credentials_together_share_one_check(
    records: EmbeddedRefStore,
) -> None:
    """Requests presenting credentials this server has not verified yet, all at once
    (a busy client's connections reaching a fresh server, or its entry expiring under
    load), read the key's record once -- and run scrypt once -- not once each; a wrong
    secret sent meanwhile is checked apart and refused."""
    counted = _CountedRecords(records)
    p, secret = await Authenticator(cast(RecordStore, records)).create_key("writer")
    auth = Authenticator(cast(RecordStore, counted), clock=CLOCK, wall_clock=CLOCK)
    good, bad = basic(p.access_key_id, secret), basic(p.access_key_id, "wrong-secret")
    answers = await asyncio.gather(
        *(status(auth, good, "10.0.0.1") for _ in range(50)),
        *(status(auth, bad, "10.0.0.2") for _ in range(5)),
    )
    assert answers == [200] * 50 + [401] * 5
    assert counted.gets == 2  # the good secret's check and the wrong one's
    assert not auth._checks  # nothing kept once the checks ended

    CLOCK.now += auth.revalidate_s + 1  # the entry is stale: the record is read again
    counted.gets = 0
    assert await asyncio.gather(*(status(auth, good, None) for _ in range(50))) == [200] * 50
    assert counted.gets == 1


def test_a_client_cannot_pick_the_address_its_failures_count_under(
    tmp_path: Path,
) -> None:
    """The per-client limit counts the connection's peer address: X-Forwarded-For,
    even from loopback, changes nothing."""
    env = {"LSMSTORE_SERVER_AUTH_MAX_FAILURES_PER_KEY": "0",
           "LSMSTORE_SERVER_AUTH_MAX_FAILURES_PER_CLIENT": "2",
           "LSMSTORE_SERVER_AUTH_FAILURE_WINDOW_S": "3600"}  # fmt: skip
    server = start_server(tmp_path / "home", env=env)
    try:
        api = server.api + "/repositories"
        for i in range(2):
            r = httpx.get(api, auth=(f"AKIALNOSUCHKEY{i}", "wrong-secret"),
                          headers={"X-Forwarded-For": f"203.0.113.{i}"})  # fmt: skip
            assert r.status_code == 401, r.text
        r = httpx.get(api, auth=server.admin, headers={"X-Forwarded-For": "203.0.113.9"})
        assert r.status_code == 429, r.text
    finally:
        server.stop()


async def test_the_same_guess_sent_together_counts_once(records: EmbeddedRefStore) -> None:
    """Requests from one address presenting the same wrong secret together share one
    check and count one failure (the same guess tells nothing new); other guesses and
    other addresses count on their own."""
    auth, throttle = make_auth(records, per_key=3, per_client=0)
    p, secret = await auth.create_key("writer")
    bad = basic(p.access_key_id, "wrong-secret")
    assert await asyncio.gather(*(status(auth, bad, "10.0.0.1") for _ in range(20))) == [401] * 20
    assert count(throttle, "rejected") == 1
    assert await status(auth, basic(p.access_key_id, secret), "10.0.0.1") == 200
    await asyncio.gather(status(auth, bad, "10.0.0.2"), status(auth, basic(p.access_key_id, "x"),
                                                              "10.0.0.1"))  # fmt: skip
    assert count(throttle, "rejected") == 3
    assert (await records.read_window_count(counter_name("key", p.access_key_id))).value == 3


async def test_a_cancelled_request_does_not_cancel_the_check_others_wait_for(
    records: EmbeddedRefStore,
) -> None:
    """The request that started a shared check going away (its client disconnected)
    leaves the check running for the others presenting the same credentials."""
    p, secret = await Authenticator(cast(RecordStore, records)).create_key("reader")
    auth = Authenticator(cast(RecordStore, records), clock=CLOCK, wall_clock=CLOCK)
    good = basic(p.access_key_id, secret)
    first = asyncio.ensure_future(auth.authenticate(good, "10.0.0.1"))
    await asyncio.sleep(0)  # the check has started
    second = asyncio.ensure_future(auth.authenticate(good, "10.0.0.1"))
    await asyncio.sleep(0)
    assert len(auth._checks) == 1
    first.cancel()
    assert (await second).access_key_id == p.access_key_id
    assert first.cancelled()
