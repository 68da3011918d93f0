"""Property-based fuzzing of the public API, run as a child process by
tests/test_fuzz_api.py (under a memory limit and a timeout)::

    python -m tests.helpers.fuzz_api TARGET [TARGET ...]

Each target feeds generated input -- well-formed, malformed and of the wrong type -- to
one family of entry points of a real embedded store, and asserts, for every input:
accepted and read back exactly, or rejected with an :class:`lsmstore.LsmError`; never
another exception, and never a hang (each call has :data:`CALL_TIMEOUT_S`).  A failing
input is shrunk by hypothesis and printed; the exit status is then 1.  On success the
last line is a JSON summary: per target, how many inputs were accepted and rejected.

Hypothesis runs derandomized (the same inputs on every run); ``FUZZ_SCALE`` multiplies
the number of examples (1 by default, for CI); ``FUZZ_RANDOM=1`` draws new inputs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import struct
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsmstore
from lsmstore.config import _SWITCHES, Config, load_config
from lsmstore.graveler.record import Record
from lsmstore.refstore.url import open_refstore
from lsmstore.storage.url import open_object_store
from tests.helpers import sst_craft

T = TypeVar("T")

#: Longest a single API call may take before it counts as a hang.
CALL_TIMEOUT_S = 20.0
MAX_KEY = 48
MAX_VALUE = 2048
SCALE = float(os.environ.get("FUZZ_SCALE", "1"))
RANDOM = os.environ.get("FUZZ_RANDOM") == "1"

OUTCOMES: Counter[str] = Counter()


class Hang(AssertionError):
    pass


class Fuzz:
    """The store every target works on (one event loop, one embedded store)."""

    def __init__(self, remote: bool = False) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="lsm-fuzz-"))
        self.loop = uvloop.new_event_loop()
        self.server: Any = None
        self.remote = remote
        settings: dict[str, Any] = {
            "batch_interval_ms": 1,
            "max_key_bytes": MAX_KEY,
            "max_value_bytes": MAX_VALUE,
        }
        if remote:  # the same calls through the remote client to a real server process
            from lsmstore.testing.server_process import start_server

            env = {f"LSMSTORE_{k.upper()}": str(v) for k, v in settings.items()}
            self.server = start_server(self.tmp / "server", env=env)
            key, secret = self.server.admin
            self.store: Any = lsmstore.connect(
                self.server.url,
                home=str(self.tmp),
                access_key_id=key,
                secret_access_key=secret,
                **settings,
            )
        else:
            self.store = lsmstore.connect(
                f"local://{self.tmp}/refs?synchronous=NORMAL", home=str(self.tmp), **settings
            )
        ns = "local://fuzz" if remote else (self.tmp / "ns").as_uri()
        self.repo = self.run(self.store.create_repository("fuzz", storage_namespace=ns))
        self.run(self.repo.create_branch("dev"))
        self.serial = 0

    def run(self, aw: Awaitable[T]) -> T:
        async def bounded() -> T:
            try:
                return await asyncio.wait_for(aw, CALL_TIMEOUT_S)
            except TimeoutError:
                raise Hang(f"call did not return within {CALL_TIMEOUT_S} s") from None

        return self.loop.run_until_complete(bounded())

    def attempt(self, target: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """``(True, result)``, or ``(False, error)`` for an LsmError; anything else
        propagates (and fails the property)."""
        try:
            result = fn()
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                result = self.run(result)
            elif hasattr(result, "__aiter__"):
                result = self.run(_collect(result))
        except lsmstore.LsmError as e:
            OUTCOMES[f"{target}:rejected"] += 1
            return False, e
        OUTCOMES[f"{target}:accepted"] += 1
        return True, result

    def fresh_branch(self) -> lsmstore.Branch:
        self.serial += 1
        name = f"b{self.serial}"
        return self.run(self.repo.create_branch(name))

    def close(self) -> None:
        try:
            self.run(self.store.aclose())
            self.loop.close()
        finally:
            if self.server is not None:
                self.server.stop()


async def _collect(it: Any) -> list[Any]:
    return [x async for x in it]


FUZZ: Fuzz


def _settings(examples: int) -> settings:
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        derandomize=not RANDOM,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


# --- strategies ------------------------------------------------------------------------

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.tuples(st.text(max_size=3)),
)
texts = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=8),
    st.sampled_from(["", " ", "main", "dev", "a/b", "..", "x\x00y", "\udc80", "v1", "~1"]),
    st.text(min_size=60, max_size=300),
)
good_keys = st.one_of(
    st.binary(min_size=1, max_size=MAX_KEY),
    st.text(min_size=1, max_size=MAX_KEY // 4),
)
keys = st.one_of(
    good_keys,
    good_keys,
    good_keys,
    st.binary(min_size=0, max_size=MAX_KEY + 8),
    st.text(max_size=MAX_KEY + 4),
    st.sampled_from(["", "\udc80", "k\x00", "a/b/c"]),
    junk,
)
good_values = st.binary(max_size=MAX_VALUE)
values = st.one_of(good_values, good_values, good_values, st.binary(max_size=MAX_VALUE + 64), junk)
good_ids = st.binary(min_size=1, max_size=255)
identities = st.one_of(st.none(), st.none(), st.binary(min_size=1, max_size=255), junk)
good_names = st.text(
    alphabet=st.characters(categories=["L", "N"], include_characters="-_"),
    min_size=1,
    max_size=16,
).filter(lambda n: not n.startswith("-"))
odd_names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/~^:?*[\\@"),
    min_size=1,
    max_size=16,
)
repo_names = st.from_regex(r"[a-z0-9][a-z0-9-]{2,10}", fullmatch=True)
names = st.one_of(good_names, good_names, repo_names, odd_names, texts, junk)
metadata = st.one_of(
    st.none(),
    st.dictionaries(good_names, st.text(max_size=8), max_size=3),
    st.dictionaries(texts, texts, max_size=3),
    st.dictionaries(texts, junk, max_size=2),
    junk,
)


def _key_bytes(key: Any) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


# --- targets ---------------------------------------------------------------------------


@_settings(150)
@given(key=keys, value=values, identity=identities)
def put_get(key: Any, value: Any, identity: Any) -> None:
    b = FUZZ.repo.branch("dev")
    ok, _ = FUZZ.attempt("put_get", lambda: b.put(key, value, identity=identity))
    if ok:
        assert FUZZ.run(b.get(key)) == bytes(value)
        st_ = FUZZ.run(b.stat(key))
        assert st_.size == len(value) and st_.key == _key_bytes(key)
        if identity is not None and not FUZZ.remote:  # the server derives identities
            assert st_.identity == bytes(identity)
    else:  # the same key is refused by reads, or it simply is not there
        FUZZ.attempt("put_get", lambda: b.exists(key))


items = st.one_of(
    st.lists(st.tuples(good_keys, good_values), min_size=1, max_size=6),
    st.lists(
        st.one_of(st.tuples(good_keys, good_values), st.tuples(good_keys, good_values, good_ids)),
        min_size=1,
        max_size=6,
    ),
    st.lists(
        st.one_of(
            st.tuples(keys, values),
            st.tuples(keys, values, identities),
            st.tuples(good_keys, good_values),
            st.tuples(good_keys, good_values),
            st.tuples(good_keys, good_values, st.binary(min_size=1, max_size=8)),
            st.lists(st.binary(min_size=1, max_size=4), max_size=4),
            junk,
        ),
        max_size=6,
    ),
    junk,
    st.text(max_size=4),
    st.binary(max_size=4),
)


@_settings(120)
@given(batch=items)
def put_many(batch: Any) -> None:
    b = FUZZ.repo.branch("dev")
    before = FUZZ.run(b.head())
    ok, _ = FUZZ.attempt("put_many", lambda: b.put_many(batch))
    if ok:
        last: dict[bytes, tuple[bytes, Any]] = {}
        for item in batch:
            last[_key_bytes(item[0])] = (bytes(item[1]), item[2] if len(item) == 3 else None)
        for k, (v, ident) in last.items():
            assert FUZZ.run(b.get(k)) == v
            if ident is not None and not FUZZ.remote:
                assert FUZZ.run(b.stat(k)).identity == bytes(ident)
    else:
        assert FUZZ.run(b.head()).l1 == before.l1 or len(FUZZ.run(b.head()).l1) < len(
            before.l1
        )  # nothing appended (compaction may have shortened L1 meanwhile)


@_settings(150)
@given(
    key=keys,
    prefix=st.one_of(keys, st.just("")),
    after=st.one_of(st.none(), keys),
    limit=st.one_of(st.none(), st.integers(-2, 5), junk),
    delimiter=st.one_of(st.none(), st.just("/"), keys),
    live=st.booleans(),
)
def reads(key: Any, prefix: Any, after: Any, limit: Any, delimiter: Any, live: bool) -> None:
    view: Any = FUZZ.repo.branch("dev") if live else FUZZ.repo.ref("main")
    for fn in (view.get, view.exists, view.stat):
        FUZZ.attempt("reads", lambda fn=fn: fn(key))
    ok, got = FUZZ.attempt(
        "reads", lambda: view.list(prefix, after=after, limit=limit, delimiter=delimiter)
    )
    if ok and limit is not None:
        assert len(got) <= limit
    FUZZ.attempt("reads", lambda: view.delete(key) if live else view.exists(key))
    FUZZ.attempt("reads", lambda: view.delete_many([key, key]) if live else view.exists(key))


@_settings(150)
@given(
    name=names,
    source=st.one_of(st.none(), names),
    other=names,
    limit=st.one_of(junk, st.integers(0, 3)),
)
def refs(name: Any, source: Any, other: Any, limit: Any) -> None:
    repo = FUZZ.repo
    ok, _ = FUZZ.attempt("refs", lambda: repo.create_branch(name, source=source))
    if ok:
        assert name in FUZZ.run(repo.list_branches(prefix=name, limit=1))
        FUZZ.attempt("refs", lambda: repo.branch(name).put("k", b"v"))
        FUZZ.attempt("refs", lambda: repo.delete_branch(name))
    FUZZ.attempt("refs", lambda: repo.branch(name))
    ok, _ = FUZZ.attempt("refs", lambda: repo.create_tag(other, "main"))
    if ok:
        assert other in FUZZ.run(repo.list_tags(prefix=other))
        FUZZ.attempt("refs", lambda: repo.delete_tag(other))
    FUZZ.attempt("refs", lambda: repo.ref(name).get("k"))
    if not FUZZ.remote:
        FUZZ.attempt("refs", lambda: repo.resolve_ref(other))
    FUZZ.attempt("refs", lambda: repo.log(name, limit=limit))
    FUZZ.attempt("refs", lambda: repo.log(after=other, first_parent=bool(limit)))
    FUZZ.attempt("refs", lambda: repo.diff(name, "main"))
    FUZZ.attempt("refs", lambda: repo.diff_uncommitted(source))
    FUZZ.attempt("refs", lambda: repo.list_branches(prefix=other, after=source, limit=limit))
    FUZZ.attempt("refs", lambda: FUZZ.store.get_repository(name))
    ok, made = FUZZ.attempt(
        "refs",
        lambda: FUZZ.store.create_repository(
            name, storage_namespace=f"mem://fuzz-{FUZZ.serial}", default_branch=other
        ),
    )
    if ok:
        assert made.name == name and made.default_branch == other
        assert FUZZ.run(made.branch().head()).base  # on its initial commit
        FUZZ.run(FUZZ.store.delete_repository(name))
    FUZZ.attempt("refs", lambda: FUZZ.store.list_repositories(after=source, limit=limit))


_commit_any = st.fixed_dictionaries(
    {
        "message": st.one_of(texts, texts, junk),
        "committer": st.one_of(st.none(), st.none(), names),
        "meta": st.one_of(
            st.none(), st.dictionaries(good_names, st.text(max_size=8), max_size=3), metadata
        ),
        "allow_empty": st.one_of(st.booleans(), st.booleans(), junk),
        "strategy": st.one_of(
            st.none(), st.sampled_from(["source-wins", "dest-wins", "", "x"]), junk
        ),
        "parent": st.one_of(st.just(1), st.integers(-1, 3), junk),
        "into": st.one_of(st.none(), st.none(), names),
    }
)
_commit_sane = st.fixed_dictionaries(
    {
        "message": st.text(max_size=20),
        "committer": st.one_of(st.none(), good_names),
        "meta": st.one_of(st.none(), st.dictionaries(good_names, st.text(max_size=8), max_size=3)),
        "allow_empty": st.booleans(),
        "strategy": st.sampled_from([None, "source-wins", "dest-wins"]),
        "parent": st.just(1),
        "into": st.none(),
    }
)


@_settings(60)
@given(args=st.one_of(_commit_sane, _commit_any))
def commits(args: dict[str, Any]) -> None:
    _commits(**args)


def _commits(
    message: Any,
    committer: Any,
    meta: Any,
    allow_empty: Any,
    strategy: Any,
    parent: Any,
    into: Any,
) -> None:
    b = FUZZ.fresh_branch()
    FUZZ.run(b.put("k", b"v"))
    ok, c = FUZZ.attempt(
        "commits",
        lambda: b.commit(message, metadata=meta, committer=committer, allow_empty=allow_empty),
    )
    if ok:
        got = FUZZ.run(FUZZ.repo.ref(c.id).commit())
        assert (got.message, dict(got.metadata)) == (message, dict(meta or {}))
        if not FUZZ.remote:  # the server records the caller's identity as committer
            default = FUZZ.store.config.user  # the configured user signs by default
            assert got.committer == (committer if committer is not None else default)
    target = FUZZ.fresh_branch()
    ok, _ = FUZZ.attempt(
        "commits",
        lambda: FUZZ.repo.merge(
            b.name,
            into=target.name if into is None else into,
            strategy=strategy,
            message=None if isinstance(message, str) and len(message) > 40 else message,
            committer=committer,
            metadata=meta,
        ),
    )
    FUZZ.attempt(
        "commits",
        lambda: FUZZ.repo.revert(
            b.name, branch=b.name, parent=parent, committer=committer, metadata=meta
        ),
    )


_FIELDS = {f.name: f.type for f in dataclasses.fields(Config)}
setting_values = st.one_of(
    junk,
    texts,
    st.integers(-10, 10**7),
    st.floats(-1e12, 1e12),
    st.sampled_from(["nan", "inf", "-1", "0", "1e400", "64MiB", "1 GB", "on", "off", "auto"]),
)


@_settings(250)
@given(name=st.sampled_from(sorted(_FIELDS)), value=setting_values, via_env=st.booleans())
def config(name: str, value: Any, via_env: bool) -> None:
    env = {"LSMSTORE_HOME": str(FUZZ.tmp / "home")}
    if via_env:
        if not isinstance(value, str) or "\x00" in value or "\udc80" in value:
            return  # not something an environment can hold
        env[f"LSMSTORE_{name.upper()}"] = value
        ok, cfg = FUZZ.attempt("config", lambda: load_config(environ=env))
    else:
        ok, cfg = FUZZ.attempt("config", lambda: load_config(environ=env, **{name: value}))
        # The same setting as an argument of connect: refused alike, before any I/O
        # (connect may refuse more: a server URL is parsed when the client is made).
        if name != "home":
            home = str(FUZZ.tmp / "home")
            opened, store = FUZZ.attempt(
                "config", lambda: lsmstore.connect(home=home, **{name: value})
            )
            assert ok or not opened, f"connect accepted {name}={value!r}"
            if opened:
                FUZZ.run(store.aclose())
    if ok:
        got = getattr(cfg, name)
        if isinstance(got, float):
            assert math.isfinite(got)
        if got != "":  # "" is the unset default of refstore and cache_dir
            assert cfg.replace(**{name: got}) == cfg  # accepted values read back the same
        if value is None or (via_env and value == ""):
            return  # None (argument) and "" (variable) mean unset
        if name in _SWITCHES:  # spelled many ways (False, "true", "1"...), read back as one
            assert got in ("on", "off", "auto")
        elif _FIELDS[name] == "str":
            assert got == value


toml_values = st.one_of(
    st.integers(-5, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(
        lambda f: (
            "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf") if math.isinf(f) else repr(f)
        )
    ),
    st.text(max_size=10).map(json.dumps),
    st.sampled_from(["true", "[1, 2]", "{a = 1}", "1979-05-27T07:32:00Z", '"64MiB"', '""']),
)
config_files = st.one_of(
    st.builds(
        lambda pairs, table: (
            ("[lsmstore]\n" if table else "") + "".join(f"{k} = {v}\n" for k, v in pairs)
        ),
        st.lists(st.tuples(st.sampled_from([*sorted(_FIELDS), "nope"]), toml_values), max_size=3),
        st.booleans(),
    ).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.binary(max_size=40),
)


@_settings(100)
@given(content=config_files, path=st.one_of(st.none(), texts, junk))
def config_files_(content: bytes, path: Any) -> None:
    f = FUZZ.tmp / "fuzz.toml"
    f.write_bytes(content)
    env = {"LSMSTORE_HOME": str(FUZZ.tmp / "home")}
    ok, cfg = FUZZ.attempt("config", lambda: load_config(config=f, environ=env))
    if ok:
        assert cfg == Config(**{n: getattr(cfg, n) for n in _FIELDS})
    if path is not None and not (isinstance(path, str) and path.startswith(("/", "~"))):
        FUZZ.attempt("config", lambda: load_config(config=path, environ=env))


path_texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="%?#"), min_size=1, max_size=20
)
good_urls = st.one_of(
    st.builds(lambda p: f"file:///{p}", path_texts),
    st.builds(lambda p: f"mem://{p}", st.from_regex(r"[a-z0-9]{1,10}", fullmatch=True)),
    st.builds(lambda p: f"s3://bucket-1/{p}", path_texts),
    st.builds(lambda p: f"local:///{p}", path_texts),
    st.sampled_from(
        ["redis://127.0.0.1:1/0", "dynamodb://table?region=us-east-1", "file:///x?y=1"]
    ),
)
url_texts = st.one_of(
    good_urls,
    good_urls,
    texts,
    st.builds(
        lambda scheme, rest: f"{scheme}{rest}",
        st.sampled_from(
            [
                "file://",
                "file:///",
                "s3://",
                "mem://",
                "local://",
                "local:///",
                "redis://",
                "dynamodb://",
                "FILE:///",
                "",
            ]
        ),
        st.text(max_size=30),
    ),
    junk,
)


@_settings(200)
@given(url=url_texts, name=st.sampled_from(["u1", "u2", "u3"]))
def urls(url: Any, name: str) -> None:
    ok, obj = FUZZ.attempt("urls", lambda: open_object_store(url))
    if ok:
        FUZZ.run(obj.aclose())
    # The same text as the RefStore (or server) of a store: opened lazily, so only
    # the argument's own checks run here.
    home = str(FUZZ.tmp / "connect")
    ok, store = FUZZ.attempt("urls", lambda: lsmstore.connect(url, home=home))
    if ok:
        FUZZ.run(store.aclose())
    ok, obj = FUZZ.attempt("urls", lambda: open_refstore(url))
    if ok:
        FUZZ.run(obj.aclose())
    # Repositories only where creating one does no I/O beyond the scratch directory
    # (never an S3 endpoint, never a path outside it).
    if isinstance(url, str) and url[:5].lower() == "file:":
        rest = url[5:].lstrip("/")
        if ".." in rest or "%" in rest:
            return
        url = f"file://{FUZZ.tmp}/ns-{rest}"
    elif isinstance(url, str) and not url[:4].lower() == "mem:":
        return
    ok, repo = FUZZ.attempt(
        "urls", lambda: FUZZ.store.create_repository(name, storage_namespace=url)
    )
    if ok:
        assert repo.storage_namespace == url
        wrote, _ = FUZZ.attempt("urls", lambda: repo.branch().put("k", b"v"))
        if wrote:
            assert FUZZ.run(repo.branch().get("k")) == b"v"
        FUZZ.run(FUZZ.store.delete_repository(name))


# --- objects (upload, link, stat, open, list, delete, copy) -----------------------------

object_paths = st.one_of(
    st.text(
        alphabet=st.characters(categories=["L", "N"], include_characters="/._-"),
        min_size=1,
        max_size=30,
    ),
    st.text(
        alphabet=st.characters(categories=["L", "N"], include_characters="/._-"),
        min_size=1,
        max_size=30,
    ),
    texts,
    junk,
)
content_types = st.one_of(
    st.none(), st.sampled_from(["text/plain", "application/json"]), texts, junk
)
checksums = st.one_of(st.from_regex(r"[0-9a-f]{32}", fullmatch=True), texts, junk)
sizes = st.one_of(st.integers(0, 100), st.integers(-5, 2**64), junk)
mtimes = st.one_of(st.none(), st.integers(0, 2**40), junk)


async def _read_all(reader: Any) -> bytes:
    try:
        return bytes(await reader.read())
    finally:
        await reader.aclose()


@_settings(120)
@given(
    path=object_paths,
    other=object_paths,
    data=st.one_of(st.binary(max_size=300), st.binary(max_size=300), junk, texts, st.just("file1")),
    content_type=content_types,
    meta=st.one_of(
        st.none(), st.dictionaries(good_names, st.text(max_size=8), max_size=3), metadata
    ),
    if_absent=st.one_of(st.booleans(), junk),
    size=sizes,
    checksum=checksums,
    mtime=mtimes,
    address=st.one_of(st.none(), texts, junk),
    prefix=st.one_of(st.just(""), object_paths),
    amount=st.one_of(st.none(), st.integers(-1, 5), junk),
)
def objects(
    path: Any,
    other: Any,
    data: Any,
    content_type: Any,
    meta: Any,
    if_absent: Any,
    size: Any,
    checksum: Any,
    mtime: Any,
    address: Any,
    prefix: Any,
    amount: Any,
) -> None:
    b = FUZZ.repo.branch("dev")
    expected = data
    if isinstance(data, str):  # a file to upload: only ever one under the scratch directory
        if ".." in data:
            return
        (FUZZ.tmp / "up-file1").write_bytes(b"file contents")
        expected = b"file contents" if data == "file1" else None
        data = f"{FUZZ.tmp}/up-{data}"
    ok, _ = FUZZ.attempt(
        "objects",
        lambda: b.upload(path, data, content_type=content_type, metadata=meta, if_absent=if_absent),
    )
    if ok:
        got = FUZZ.run(b.stat_object(path))
        assert got.size == len(expected) and got.metadata == dict(meta or {})
        if content_type is not None:
            assert got.content_type == content_type
        assert FUZZ.run(_read_all(FUZZ.run(b.open(path)))) == bytes(expected)
    ok, _ = FUZZ.attempt(
        "objects",
        lambda: b.link(
            other,
            b.new_physical_address() if address is None else address,
            size=size,
            checksum=checksum,
            content_type=content_type,
            metadata=meta,
            mtime=mtime,
        ),
    )
    if ok:
        got = FUZZ.run(b.stat_object(other))
        assert got.size == size and got.metadata == dict(meta or {})
    FUZZ.attempt(
        "objects",
        lambda: b.link_many(
            [
                lsmstore.ObjectLink(
                    other, b.new_physical_address(), size, checksum, content_type, meta, mtime
                )
            ]
        ),
    )
    FUZZ.attempt("objects", lambda: b.link_many(data))
    FUZZ.attempt("objects", lambda: b.copy_object(path, other, src_ref=address))
    FUZZ.attempt(
        "objects", lambda: b.list_objects(prefix, delimiter="/", after=address, amount=amount)
    )
    FUZZ.attempt("objects", lambda: FUZZ.repo.ref("main").list_objects(prefix, amount=amount))
    FUZZ.attempt("objects", lambda: b.delete_objects([path, other]))
    FUZZ.attempt("objects", lambda: b.delete_objects(data))
    FUZZ.attempt("objects", lambda: b.delete_object(path))


# --- SSTs: checksum-valid, malformed -----------------------------------------------------

record_lists = st.lists(
    st.tuples(
        st.binary(min_size=1, max_size=12),
        st.one_of(st.none(), st.binary(max_size=40)),
    ),
    min_size=1,
    max_size=12,
    unique_by=lambda t: t[0],
).map(
    lambda rs: [
        Record(k, b"" if v is None else b"id", v) for k, v in sorted(rs, key=lambda t: t[0])
    ]
)
big_varint = st.one_of(st.integers(0, 300), st.integers(2**28, 2**63)).map(sst_craft.varint)


@st.composite
def crafted(draw: st.DrawFn) -> tuple[bytes, list[Record] | None]:
    """A crafted SST and, when it was left well-formed, the records it holds."""
    records = draw(record_lists)
    parts = sst_craft.parts_of(records, per_block=draw(st.integers(1, 5)))
    mutations = draw(st.lists(st.integers(0, 9), max_size=3))
    for m in mutations:
        if m == 0:  # lying or odd properties
            prop = draw(
                st.sampled_from(
                    [
                        b"rocksdb.num.entries",
                        b"rocksdb.num.data.blocks",
                        b"rocksdb.comparator",
                        b"rocksdb.index.key.is.user.key",
                        b"rocksdb.block.based.table.index.type",
                        b"rocksdb.num.range-deletions",
                    ]
                )
            )
            parts.properties[prop] = draw(st.one_of(big_varint, st.binary(max_size=9)))
        elif m == 1:  # a property missing
            key = draw(st.sampled_from(sorted(parts.properties)))
            del parts.properties[key]
        elif m == 2:  # a block replaced by arbitrary (checksummed) bytes
            name = draw(
                st.sampled_from(
                    [f"data{i}" for i in range(len(parts.blocks))]
                    + ["index", "properties", "metaindex"]
                )
            )
            parts.replace[name] = draw(st.binary(max_size=64))
        elif m == 3:  # an entry with absurd lengths
            raw = (
                draw(big_varint)
                + draw(big_varint)
                + draw(big_varint)
                + draw(st.binary(max_size=16))
            )
            parts.replace[f"data{draw(st.integers(0, len(parts.blocks) - 1))}"] = (
                raw + struct.pack("<I", 0) + struct.pack("<I", 1)
            )
        elif m == 4:  # index handles anywhere
            parts.index = [
                (draw(st.binary(min_size=0, max_size=12)), draw(big_varint) + draw(big_varint))
                for _ in range(draw(st.integers(0, 3)))
            ]
        elif m == 5:  # footer handles anywhere
            parts.footer = (
                draw(big_varint) + draw(big_varint),
                draw(big_varint) + draw(big_varint),
            )
        elif m == 6:  # entries with bad internal keys or values
            i = draw(st.integers(0, len(parts.blocks) - 1))
            parts.blocks[i] = [
                (draw(st.binary(max_size=12)), draw(st.binary(max_size=12)))
                for _ in range(draw(st.integers(1, 3)))
            ]
        elif m == 7:  # restart array claims too much
            i = draw(st.integers(0, len(parts.blocks) - 1))
            entries = parts.blocks[i]
            body = sst_craft.block(entries)[:-4]
            parts.replace[f"data{i}"] = body + struct.pack("<I", draw(st.integers(0, 2**32 - 1)))
        elif m == 8:  # keys out of order or repeated across blocks
            parts.blocks.reverse()
        else:  # another format version
            parts.format_version = draw(st.integers(0, 9))
    return sst_craft.build(parts), (records if not mutations else None)


@_settings(150)
@given(case=crafted())
def stage_sst(case: tuple[bytes, list[Record] | None]) -> None:
    data, records = case
    b = FUZZ.fresh_branch()
    ok, _ = FUZZ.attempt("stage_sst", lambda: b.stage_sst(data))
    if records is not None:
        assert ok, "a well-formed SST was refused"
    if ok:
        listed = FUZZ.run(_collect(b.list()))
        if records is not None:
            live = [r for r in records if r.value is not None]
            assert [e.key for e in listed] == [r.key for r in live]
            for r in live:
                assert FUZZ.run(b.get(r.key)) == r.value
        for e in listed:
            FUZZ.attempt("stage_sst", lambda e=e: b.get(e.key))
    FUZZ.run(FUZZ.repo.delete_branch(b.name))


TARGETS: dict[str, Callable[[], None]] = {
    "put_get": put_get,
    "put_many": put_many,
    "reads": reads,
    "refs": refs,
    "commits": commits,
    "config": config,
    "config_files": config_files_,
    "urls": urls,
    "objects": objects,
    "stage_sst": stage_sst,
}


def main(argv: list[str]) -> int:
    global FUZZ
    remote = bool(argv) and argv[0] == "--remote"
    argv = argv[1:] if remote else argv
    unknown = [t for t in argv if t not in TARGETS]
    if not argv or unknown:
        print(
            f"usage: fuzz_api [--remote] TARGET... (known: {', '.join(TARGETS)})", file=sys.stderr
        )
        return 2
    FUZZ = Fuzz(remote)
    try:
        for target in argv:
            TARGETS[target]()
    finally:
        FUZZ.close()
    print(json.dumps(dict(sorted(OUTCOMES.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
