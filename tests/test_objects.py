"""The object API on every transport: the embedded RefStore with a local namespace,
Redis (a real redis-server) with S3 (moto's server over real HTTP), and a real
``lsmstore serve`` process reached by the remote client.  What only the library offers
(repository metadata, a second store with other settings, the store's clock) is tested
on the library transports.

Uploads from every kind of source, stat/open/ranged and streamed reads, listings with
common prefixes, links (inside, outside and under allowed external prefixes),
link_many, deletes, copies, if_absent, garbage candidates, bad input, and entries
that diff and merge compare the way lakeFS does."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import io
import itertools
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import lsmstore
from lsmstore import errors
from lsmstore.gc.data import candidates_prefix, decode_candidates
from lsmstore.objects import ALLOWED_EXTERNAL_PREFIXES_KEY
from lsmstore.objects.entry import AddressType, ObjectEntry, decode_entry, encode_value
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.local import LocalStore
from lsmstore.storage.s3 import MIN_PART_SIZE
from lsmstore.storage.url import open_object_store
from lsmstore.testing.servers import MotoServer, new_bucket
from lsmstore.types import ObjectLink, ObjectStats
from tests.helpers.remote import lsm_server  # noqa: F401 - the fixture

BACKENDS = ["embedded-file", "redis-s3", "server"]
#: The library transports, for what the server's API does not carry.
LIBRARY = ["embedded-file", "redis-s3"]
library_only = pytest.mark.parametrize("env", LIBRARY, indirect=True)


class Env:
    """A store, a namespace factory and the URI prefix an external location uses;
    ``objects(repo)`` is the repository's storage namespace as the store that writes it
    sees it (for the server: the server's own directory, read from here)."""

    def __init__(
        self,
        store: Any,
        make_ns: object,
        outside: str,
        outside_url: str,
        objects: Callable[[Any], ObjectStore] | None = None,
        suffix: str = "",
        second: Callable[[], Any] | None = None,
    ) -> None:
        self.store = store
        self.make_ns = make_ns
        self.outside = outside  # a URI prefix outside every namespace, same scheme
        self.outside_url = outside_url  # a store URL whose objects are under `outside`
        self._objects = objects
        self.suffix = suffix  # a server is shared by the module: names are made unique
        self._second = second

    async def repo(self, name: str = "repo", metadata: dict[str, str] | None = None) -> Any:
        name += self.suffix
        ns = await self.make_ns(name)  # type: ignore[operator]
        if metadata is None:
            return await self.store.create_repository(name, storage_namespace=ns)
        return await self.store.create_repository(name, storage_namespace=ns, metadata=metadata)

    @property
    def remote(self) -> bool:
        """Whether the store is a remote client of a server."""
        return self._objects is not None

    def base(self, repo: Any) -> str:
        """The namespace as physical addresses show it (no trailing slash): a server's
        ``local://`` namespace as named, else the object store's URL."""
        if self.remote:
            return str(repo.storage_namespace).rstrip("/")
        return self.objects(repo).url.rstrip("/")

    def objects(self, repo: Any) -> ObjectStore:
        return repo.objects if self._objects is None else self._objects(repo)

    def second_client(self) -> Any:
        """Another client of the same service (``async with``): for the server a
        second remote client; for the library this store itself (two stores racing
        ``if_absent``: test_if_absent_is_decided_by_the_refstore_across_stores)."""
        if self._second is None:
            return contextlib.nullcontext(self.store)
        return self._second()

    def new_address(self, branch: Any) -> str:
        """A fresh address under the namespace's ``data/`` (``new_physical_address``)."""
        if self._objects is None:
            return str(branch.new_physical_address())
        base = self.base(branch.repository)
        return f"{base}/data/{uuid.uuid4().hex}"


@pytest.fixture(params=BACKENDS)
async def env(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Env]:
    if request.param == "embedded-file":
        async with lsmstore.connect(home=str(tmp_path / "home"), batch_interval_ms=1) as store:

            async def make_ns(name: str) -> str:
                return (tmp_path / "ns" / name).as_uri()

            outside = (tmp_path / "outside").as_uri()
            yield Env(store, make_ns, outside + "/", outside)
        return
    if request.param == "server":
        server = request.getfixturevalue("lsm_server")
        key_id, secret = server.admin
        data = server.home / "data"
        run = f"o{uuid.uuid4().hex[:8]}"
        stores: dict[str, ObjectStore] = {}

        def objects(repo: Any) -> ObjectStore:
            if repo.name not in stores:
                stores[repo.name] = LocalStore(data / run / repo.name)
            return stores[repo.name]

        async def make_ns_local(name: str) -> str:
            return f"local://{run}/{name}"

        async with lsmstore.connect(
            server.url, access_key_id=key_id, secret_access_key=secret
        ) as remote:
            outside = (data / run / "outside").as_uri()
            yield Env(
                remote, make_ns_local, outside + "/", outside, objects, "-" + run,
                lambda: lsmstore.connect(server.url, access_key_id=key_id,
                                         secret_access_key=secret),
            )  # fmt: skip
        for objects_store in stores.values():
            await objects_store.aclose()
        return
    redis_url: str = request.getfixturevalue("redis_server_url")
    moto: MotoServer = request.getfixturevalue("moto")
    url = f"{redis_url}?prefix=o{uuid.uuid4().hex[:8]}:"
    bucket = await new_bucket(moto.endpoint, "o")
    async with lsmstore.connect(url, home=str(tmp_path / "home"), batch_interval_ms=1) as store:

        async def make_ns_s3(name: str) -> str:
            return f"s3://{bucket}/{name}?endpoint_url={moto.endpoint}&part_size={MIN_PART_SIZE}"

        yield Env(
            store,
            make_ns_s3,
            f"s3://{bucket}/outside/",
            f"s3://{bucket}/outside?endpoint_url={moto.endpoint}",
        )


async def data_keys(env: Env, repo: Any) -> list[str]:
    return [m.key async for m in env.objects(repo).list("data/")]


async def chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for p in parts:
        await asyncio.sleep(0)
        yield p


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def small_values(env: Env, tmp_path: Path, max_value_bytes: int) -> Any:
    """A second store on the same RefStore whose values are bounded to ``max_value_bytes``."""
    return lsmstore.connect(
        env.store.config.refstore_url, home=str(tmp_path / "h2"),
        max_value_bytes=max_value_bytes, max_pending_bytes=1 << 20,
    )  # fmt: skip


# --- upload and read -------------------------------------------------------------------


async def test_upload_every_kind_of_source(env: Env, tmp_path: Path) -> None:
    repo = await env.repo()
    main = repo.branch()
    big = os.urandom(2 * MIN_PART_SIZE + 123)  # a multipart upload on S3
    path = tmp_path / "big.bin"
    path.write_bytes(big)
    sources: dict[str, tuple[object, bytes]] = {
        "bytes": (b"hello world", b"hello world"),
        "empty": (b"", b""),
        "bytearray": (bytearray(b"abc"), b"abc"),
        "path": (path, big),
        "str-path": (str(path), big),
        "file": (io.BytesIO(b"from a file object"), b"from a file object"),
        "aiter": (chunks([b"a", b"", b"bc" * 1000]), b"a" + b"bc" * 1000),
    }
    for name, (data, expected) in sources.items():
        stats = await main.upload(f"src/{name}", data)
        assert isinstance(stats, ObjectStats)
        assert (stats.path, stats.path_type, stats.size) == (f"src/{name}", "object", len(expected))
        assert stats.checksum == md5(expected)
        assert stats.content_type == "application/octet-stream" and stats.metadata == {}
        assert stats.physical_address.startswith(env.base(repo) + "/data/")
        assert await main.stat_object(f"src/{name}") == stats
        async with await main.open(f"src/{name}") as reader:
            assert reader.size == len(expected)
            assert await reader.read() == expected
            assert b"".join([c async for c in reader]) == expected
    assert len(await data_keys(env, repo)) == len(sources)


async def test_ranged_and_streamed_reads(env: Env) -> None:
    main = (await env.repo()).branch()
    data = os.urandom(3 << 20 | 5)
    await main.upload("obj", data, content_type="application/x-test", metadata={"k": "v"})
    reader = await main.open("obj")
    assert reader.stats.content_type == "application/x-test"
    assert reader.stats.metadata == {"k": "v"}
    assert await reader.read(10, 20) == data[10:30]
    assert await reader.read(len(data) - 3, 100) == data[-3:]  # past the end: shorter
    assert await reader.read(len(data)) == b""
    assert await reader.read(len(data) + 10, 5) == b""
    assert await reader.read(5, 0) == b""
    parts = [c async for c in reader.iter_chunks(100, 2 << 20, chunk_size=1 << 19)]
    assert b"".join(parts) == data[100 : 100 + (2 << 20)]
    assert all(len(p) <= 1 << 19 for p in parts)
    for bad in ((-1, None), (0, -1), ("0", None)):
        with pytest.raises(errors.InvalidInputError):
            await reader.read(*bad)  # type: ignore[arg-type]
    await reader.aclose()
    with pytest.raises(errors.ClosedError):
        await reader.read()


async def test_reader_keeps_what_it_opened(env: Env) -> None:
    """A reader reads the data it opened; a remote one, which can only name the path,
    refuses once the path holds other data instead of reading it (docs/decisions.md)."""
    main = (await env.repo()).branch()
    await main.upload("p", b"first")
    reader = await main.open("p")
    assert await reader.read(1, 3) == b"irs"
    await main.upload("p", b"second version")
    if env.remote:
        with pytest.raises(errors.PreconditionFailedError):
            await reader.read()
    else:
        assert await reader.read() == b"first"
    assert await (await main.open("p")).read() == b"second version"


async def test_committed_objects_read_through_refs(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    await main.upload("a/x", b"one")
    commit = await main.commit("c1")
    await main.upload("a/x", b"two")
    old = repo.ref(commit.id)
    assert await (await old.open("a/x")).read() == b"one"
    assert (await old.stat_object("a/x")).checksum == md5(b"one")
    assert await (await repo.ref("main").open("a/x")).read() == b"two"
    with pytest.raises(errors.ObjectNotFoundError):
        await old.stat_object("a/y")


# --- listing ---------------------------------------------------------------------------


async def test_list_objects(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    paths = ["a/1", "a/2", "a/b/3", "a/b/4", "c", "d/5"]
    for p in paths:
        await main.upload(p, p.encode())
    listed = [s async for s in main.list_objects()]
    assert [s.path for s in listed] == paths
    assert all(s.size == len(s.path) and s.checksum == md5(s.path.encode()) for s in listed)
    top = [(s.path, s.path_type) async for s in main.list_objects(delimiter="/")]
    assert top == [("a/", "common_prefix"), ("c", "object"), ("d/", "common_prefix")]
    under_a = [(s.path, s.path_type) async for s in main.list_objects("a/", "/")]
    assert under_a == [("a/1", "object"), ("a/2", "object"), ("a/b/", "common_prefix")]
    assert [s.path async for s in main.list_objects(after="a/b/3")] == ["a/b/4", "c", "d/5"]
    assert [s.path async for s in main.list_objects(amount=2)] == ["a/1", "a/2"]
    assert [s.path async for s in main.list_objects(delimiter="/", after="a/")] == ["c", "d/"]
    assert [s.path async for s in main.list_objects(amount=0)] == []
    commit = await main.commit("listed")
    assert [s.path async for s in repo.ref(commit.id).list_objects("a/b/")] == ["a/b/3", "a/b/4"]
    with pytest.raises(errors.InvalidInputError):
        _ = [s async for s in main.list_objects(amount=-1)]
    with pytest.raises(errors.InvalidInputError):
        _ = [s async for s in main.list_objects(prefix=b"a")]  # type: ignore[arg-type]


# --- link ------------------------------------------------------------------------------


async def test_link_inside_the_namespace(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    address = env.new_address(main)
    key = address[len(env.base(repo)) + 1 :]
    assert key.startswith("data/")
    await env.objects(repo).put(key, b"written by a client")
    stats = await main.link("l/x", address, size=19, checksum='  "etag-1" ', verify=True)
    assert (stats.physical_address, stats.size, stats.checksum) == (address, 19, "etag-1")
    assert await (await main.open("l/x")).read() == b"written by a client"
    # elsewhere in the namespace (not data/): stored as a full address, still readable
    await env.objects(repo).put("imports/y", b"imported")
    other = env.base(repo) + "/imports/y"
    st = await main.link("l/y", other, size=8, checksum="e", mtime=1234, metadata={"m": "1"})
    assert (st.physical_address, st.mtime, st.metadata) == (other, 1234, {"m": "1"})
    assert await (await main.open("l/y")).read() == b"imported"


async def test_link_checks_addresses_and_sizes(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    base = env.base(repo)
    await env.objects(repo).put("data/present", b"12345")
    head = await main.head()
    bad_addresses = [
        "",
        env.outside + "x",  # outside the namespace, not allowed
        base + "/../escape",
        base + "/data/../../escape",
        base + "/data//x",
        base + "/_lsm/commits/abc",  # the service's own files
        base + "/data/nested/_lsm/commits/abc",  # ... of a repository nested inside
        base + "-sibling/data/x",
        "http://example.com/data/x",
        base.replace(base.split("://")[0], "gs", 1) + "/data/x",
        42,
    ]
    for address in bad_addresses:
        with pytest.raises(errors.InvalidInputError):
            await main.link("p", address, size=1, checksum="c")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInputError, match="has 5 bytes, not 6"):
        await main.link("p", base + "/data/present", size=6, checksum="c", verify=True)
    with pytest.raises(errors.InvalidInputError, match="no object"):
        await main.link("p", base + "/data/absent", size=6, checksum="c", verify=True)
    for bad in ({"size": -1}, {"size": "1"}, {"checksum": ""}, {"checksum": '""'}, {"mtime": -5}):
        kwargs = {"size": 5, "checksum": "c", **bad}
        with pytest.raises(errors.InvalidInputError):
            await main.link("p", base + "/data/present", **kwargs)  # type: ignore[arg-type]
    assert await main.head() == head  # nothing staged
    # unchecked, a link to data that is not there reads as missing data
    await main.link("ghost", base + "/data/absent", size=3, checksum="c")
    with pytest.raises(errors.ObjectNotFoundError):
        await (await main.open("ghost")).read()


@library_only  # repository metadata is set through the library
async def test_external_addresses_need_an_allowed_prefix(env: Env) -> None:
    allowed = env.outside + "lake/"
    repo = await env.repo("ext", metadata={ALLOWED_EXTERNAL_PREFIXES_KEY: allowed})
    main = repo.branch()
    # write the external object through a store opened on its parent
    async with open_object_store(env.outside_url) as outside:
        await outside.put("lake/t/part-0", b"external bytes")
    address = allowed + "t/part-0"
    stats = await main.link("t/p0", address, size=14, checksum="x", verify=True)
    assert stats.physical_address == address
    assert await (await main.open("t/p0")).read() == b"external bytes"
    for bad in (env.outside + "elsewhere/x", allowed + "../x", allowed + "a/_lsm/commits/c"):
        with pytest.raises(errors.InvalidInputError):
            await main.link("t/bad", bad, size=1, checksum="x")
    with pytest.raises(errors.InvalidInputError):  # a prefix must end with "/"
        await env.repo("bad", metadata={ALLOWED_EXTERNAL_PREFIXES_KEY: env.outside + "lake"})


async def test_a_forged_entry_reads_nothing_outside_its_places(env: Env) -> None:
    """A raw value may hold any bytes, a ``catalog.Entry`` too (a remote ``kv`` write, a
    staged SST): one whose address is outside the namespace and the allowed external
    prefixes is refused on read as a link to it is refused on write -- else a writer
    of one repository reads any place the service's credentials reach."""
    from lsmstore.objects.entry import AddressType, ObjectEntry, encode_value

    async with open_object_store(env.outside_url) as outside:
        await outside.put("elsewhere/secret", b"not this repository's")
    repo = await env.repo("forge")
    main = repo.branch()
    entry = ObjectEntry(env.outside + "elsewhere/secret", AddressType.FULL, 21, "e", 1)
    ident, data = encode_value(entry)
    await main.put("forged", data, identity=ident)
    with pytest.raises(errors.CorruptFileError):
        await (await main.open("forged")).read()


async def test_link_many(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    base = env.base(repo)
    links = [
        ObjectLink(f"part/{i:04d}", f"{base}/data/f{i}", i, f"etag{i}", metadata={"i": str(i)})
        for i in range(500)
    ]
    await main.link_many(links)
    listed = [s async for s in main.list_objects("part/")]
    assert [s.path for s in listed] == [link.path for link in links]
    assert listed[7] == ObjectStats(
        "part/0007", "object", f"{base}/data/f7", "etag7", 7, listed[7].mtime,
        "application/octet-stream", {"i": "7"},
    )  # fmt: skip
    head = await main.head()
    with pytest.raises(errors.InvalidInputError):
        await main.link_many([ObjectLink("ok", f"{base}/data/ok", 1, "e"), links[0], "nope"])  # type: ignore[list-item]
    with pytest.raises(errors.InvalidNameError):
        await main.link_many(
            [ObjectLink("ok", f"{base}/data/ok", 1, "e"), ObjectLink("", "x", 1, "e")]
        )
    for bad in (
        ObjectLink("b", f"{base}/data/../_lsm/x", 1, "e"),
        ObjectLink("b", f"{base}/data/a/../../x", 1, "e"),
        ObjectLink("b", f"{base}/data/n/_lsm/ranges/r", 1, "e"),
        ObjectLink("b", f"{base}/data/ok", -1, "e"),
        ObjectLink("b", f"{base}/data/ok", True, "e"),
        ObjectLink("b", f"{base}/data/ok", 1, ""),
        ObjectLink("b", f"{base}/data/ok", 1, "a\nb"),
        ObjectLink("b", env.outside + "x", 1, "e"),
    ):
        with pytest.raises(errors.InvalidInputError):
            await main.link_many([ObjectLink("ok", f"{base}/data/ok", 1, "e"), bad])
    assert await main.head() == head
    await main.link_many([])


async def test_a_bad_link_in_a_large_call_stages_nothing(env: Env) -> None:
    """A call of thousands of common links (checked a column at a time) with one bad
    link -- first, last, of each kind -- raises its typed error and stages none of them;
    the same call without it stages every link, with the entry encode_value makes."""
    repo = await env.repo()
    main = repo.branch()
    base = env.base(repo)
    etag = "d41d8cd98f00b204e9800998ecf8427e"
    good: list[Any] = [
        (f"big/{i:05d}", f"{base}/data/big-{i:05d}", 4096 + i, etag) for i in range(3000)
    ]
    bad_links: list[tuple[Any, type[errors.LsmError]]] = [
        (("big/x", f"{base}/data/../_lsm/x", 1, etag), errors.InvalidInputError),
        (("big/x", f"{base}/data/x", True, etag), errors.InvalidInputError),
        (("big/x", f"{base}/data/x", -1, etag), errors.InvalidInputError),
        (("big/x", f"{base}/data/x", 1, "a\nb"), errors.InvalidInputError),
        (("big/x", env.outside + "x", 1, etag), errors.InvalidInputError),
        (("big/x", f"{base}/data/x", 1), errors.InvalidInputError),
        (["big/x", f"{base}/data/x", 1, etag], errors.InvalidInputError),
        (("", f"{base}/data/x", 1, etag), errors.InvalidNameError),
        (ObjectLink("big/x", f"{base}/data/x", 1, etag, metadata={"k": 1}),  # type: ignore[dict-item]
         errors.InvalidInputError),
    ]  # fmt: skip
    head = await main.head()
    for bad, error in bad_links:
        for at in (0, len(good)):
            call = [*good[:at], bad, *good[at:]]
            with pytest.raises(error):
                await main.link_many(call)
    await main.flush()
    assert await main.head() == head
    assert [s async for s in main.list_objects("big/")] == []
    await main.link_many(good)
    listed = [s async for s in main.list_objects("big/")]
    assert [s.path for s in listed] == [g[0] for g in good]
    for stats, (_, address, size, checksum) in zip(listed, good, strict=True):
        assert (stats.physical_address, stats.size, stats.checksum) == (address, size, checksum)
    for i in (0, 1234, len(good) - 1):
        path, address, size, checksum = good[i]
        value, stat = await main.lookup(path)
        made = decode_entry(value, path)  # the call's time: the one field not given
        entry = ObjectEntry(
            address[len(base) + 1 :], AddressType.RELATIVE, size, checksum, made.mtime,
            made.mtime_nanos,
        )  # fmt: skip
        assert (stat.identity, value) == encode_value(entry)


def test_link_columns_equal_links_one_by_one() -> None:
    """A call of common links is checked a column at a time; its records are the ones
    the per-link checks make, its keys and charge theirs, and every call with a link
    that is not common (or is bad) goes to the per-link checks."""
    import random

    from lsmstore.config import Config
    from lsmstore.objects.addresses import Namespace
    from lsmstore.objects.linking import LinkStager
    from lsmstore.staging.memstore import staged_bytes
    from lsmstore.staging.pending import maker_of

    base = "file:///ns/repo"
    stager = LinkStager(Namespace(base, base, ()), Config(), (1_700_000_000, 5))

    def rows(records: list[Any]) -> list[Any]:
        return [(r[0], *r[2:], maker_of(r[1]).encode(r[2], r[3], r[4])) for r in records]

    rng = random.Random(3)
    good = [
        (f"p/{rng.randrange(50):03d}", f"{base}/data/a{i}/b.c_{i}", rng.randrange(1 << 40), f"e{i}")
        for i in range(200)
    ]
    for seq in (good, [ObjectLink(*t) for t in good], good[:1]):
        call = stager._columns(list(seq))
        assert call is not None
        records = call.records()
        assert rows(records) == rows(stager._one_by_one(list(seq)))
        assert call.charge == sum(map(staged_bytes, records))
    not_common: list[Any] = [
        ("p", f"{base}/data/x", 1, "e", "text/csv"),
        ObjectLink("p", f"{base}/data/x", 1, "e", mtime=5),
        ObjectLink("p", f"{base}/data/x", 1, "e", metadata={"k": "v"}),
        ("p", f"{base}/other/x", 1, "e"),
        ("p", f"{base}/data/.x", 1, "e"),
        ("p", f"{base}/data/x y", 1, "e"),
        ("p", f"{base}/data/x\n{base}/data/y", 1, "e"),
        ("p", f"{base}/data/n/_lsm/x", 1, "e"),
        ("p", f"{base}/data/x", 1, '"e"'),
        ("p", f"{base}/data/x", 1, "a\nb"),
        ("p", f"{base}/data/x", 1 << 63, "e"),
        ("p", f"{base}/data/x", True, "e"),
        ("\u00e9", f"{base}/data/x", 1, "e"),
        ("p" * 1025, f"{base}/data/x", 1, "e"),
        ("", f"{base}/data/x", 1, "e"),
        (b"p", f"{base}/data/x", 1, "e"),
        ["p", f"{base}/data/x", 1, "e"],
    ]
    for odd in not_common:
        assert stager._columns([*good[:5], odd]) is None, odd


async def test_link_many_entries_equal_single_links(env: Env) -> None:
    """Every kind of link gives the same entry through link_many as through link."""
    repo = await env.repo()
    main = repo.branch()
    base = env.base(repo)
    await env.objects(repo).put("elsewhere/x", b"x")
    variants: list[dict[str, object]] = [
        {},
        {"content_type": "text/csv"},
        {"mtime": 1_600_000_000},
        {"metadata": {"b": "2", "a": "1"}},
        {"checksum": '"quoted-etag"'},
        {"address": base + "/elsewhere/x"},
        {"size": 0},
    ]
    for i, v in enumerate(variants):
        address = str(v.pop("address", f"{base}/data/v{i}"))
        size = int(v.pop("size", 10 + i))  # type: ignore[call-overload]
        checksum = str(v.pop("checksum", f"etag{i}"))
        await main.link_many([ObjectLink(f"many/{i}", address, size, checksum, **v)])  # type: ignore[arg-type]
        await main.link(f"one/{i}", address, size=size, checksum=checksum, **v)  # type: ignore[arg-type]
        many, one = await main.stat_object(f"many/{i}"), await main.stat_object(f"one/{i}")
        assert many.physical_address == one.physical_address == address
        assert (many.size, many.checksum, many.content_type, many.metadata) == (
            one.size, one.checksum, one.content_type, one.metadata,
        )  # fmt: skip
        if "mtime" in v:
            assert many.mtime == one.mtime == v["mtime"]
        assert (await main.stat(f"many/{i}")).identity == (await main.stat(f"one/{i}")).identity


@library_only  # the store's encoder
async def test_link_many_entries_are_made_off_the_loop_and_read_exactly(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """link_many stages pending records whose entries the encoder makes while it
    encodes the L1 file.  A read while that file is being encoded finds none of them
    (nothing is visible before the acknowledgement); a read after link_many returns
    finds exactly the bytes and identity encode_value gives."""
    repo = await env.repo()
    main = repo.branch()
    base = env.base(repo)
    encoder = env.store.encoder
    encoding, release = asyncio.Event(), asyncio.Event()
    real = encoder.encode_split

    async def held(*args: Any) -> Any:
        encoding.set()
        await release.wait()
        return await real(*args)

    monkeypatch.setattr(encoder, "encode_split", held)
    links = [ObjectLink(f"held/{i:03d}", f"{base}/data/h{i}", i, f"etag{i}") for i in range(200)]
    links.append(ObjectLink("held/csv", f"{base}/data/csv", 3, "e", content_type="text/csv"))
    links.append(ObjectLink("held/md", f"{base}/data/md", 4, "e", metadata={"a": "1"}))
    links.append(ObjectLink("held/old", f"{base}/data/old", 5, '"q"', mtime=1_600_000_000))
    since = int(env.store.clock())
    task = asyncio.create_task(main.link_many(links))
    await asyncio.wait_for(encoding.wait(), 60)
    with pytest.raises(errors.ObjectNotFoundError):
        await main.stat_object("held/000")
    assert [s async for s in main.list_objects("held/")] == []
    assert not task.done()
    release.set()
    await asyncio.wait_for(task, 60)
    monkeypatch.undo()
    listed = [s async for s in main.list_objects("held/")]
    assert [s.path for s in listed] == sorted(link.path for link in links)
    for link in links:
        value = await main.get(link.path)
        entry = decode_entry(value, link.path)
        assert (await main.stat(link.path)).identity == encode_value(entry)[0]
        assert encode_value(entry)[1] == value  # canonical bytes
        assert (entry.address, entry.size) == (link.physical_address[len(base) + 1 :], link.size)
        assert entry.etag == link.checksum.strip('"')
        assert entry.content_type == (link.content_type or "application/octet-stream")
        assert dict(entry.metadata) == dict(link.metadata or {})
        assert entry.mtime == link.mtime if link.mtime is not None else entry.mtime >= since
    assert (await main.stat_object("held/md")).metadata == {"a": "1"}


@library_only  # a second store with other settings
async def test_link_many_under_a_small_value_bound(env: Env, tmp_path: Path) -> None:
    """Where max_value_bytes is below the largest possible entry, link_many encodes
    on the caller's side and refuses an entry over the bound before staging any."""
    repo = await env.repo()
    base = env.base(repo)
    async with small_values(env, tmp_path, 512) as small:
        branch = (await small.get_repository(repo.name)).branch()
        ok = ObjectLink("ok", f"{base}/data/ok", 1, "e")
        with pytest.raises(errors.InvalidInputError, match="max_value_bytes"):
            await branch.link_many([ok, ObjectLink("big", f"{base}/data/" + "a" * 600, 1, "e")])
        with pytest.raises(errors.ObjectNotFoundError):
            await branch.stat_object("ok")
        await branch.link_many([ok])
        assert (await branch.stat_object("ok")).size == 1


# --- if_absent, delete, copy -------------------------------------------------------------


async def test_if_absent(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    await main.upload("x", b"one", if_absent=True)
    with pytest.raises(errors.ObjectExistsError):
        await main.upload("x", b"two", if_absent=True)
    with pytest.raises(errors.ObjectExistsError):
        await main.link("x", env.new_address(main), size=1, checksum="e", if_absent=True)
    assert await (await main.open("x")).read() == b"one"
    assert len(await data_keys(env, repo)) == 1  # the refused upload wrote no data
    # concurrent if_absent uploads of one path in one process: exactly one wins
    results = await asyncio.gather(
        *(main.upload("race", b"%d" % i, if_absent=True) for i in range(10)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, ObjectStats) for r in results) == 1
    assert all(isinstance(r, ObjectStats | errors.ObjectExistsError) for r in results)
    await main.delete_object("x")
    await main.upload("x", b"three", if_absent=True)  # absent again after a delete


async def test_delete_and_copy(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    src = await main.upload("src", b"payload", metadata={"a": "b"}, content_type="text/plain")
    copy = await main.copy_object("src", "dst")
    assert copy.physical_address == src.physical_address  # no copy of the data
    assert (copy.path, copy.checksum, copy.size, copy.metadata, copy.content_type) == (
        "dst",
        src.checksum,
        7,
        {"a": "b"},
        "text/plain",
    )
    before = await data_keys(env, repo)
    commit = await main.commit("c")
    await main.delete_object("src")
    with pytest.raises(errors.ObjectNotFoundError):
        await main.stat_object("src")
    with pytest.raises(errors.ObjectNotFoundError):
        await main.delete_object("src")
    with pytest.raises(errors.ObjectNotFoundError):
        await main.copy_object("src", "again")
    await main.copy_object("src", "restored", src_ref=commit.id)
    assert await (await main.open("restored")).read() == b"payload"
    await main.delete_objects(["dst", "never-there", "restored", "dst"])
    assert [s.path async for s in main.list_objects()] == []
    assert await data_keys(env, repo) == before  # deletes never touch data


# --- garbage candidates --------------------------------------------------------------------


async def candidates(env: Env, repo: Any) -> list[tuple[str, str, str]]:
    out = []
    async for m in env.objects(repo).list(candidates_prefix()):
        rec = decode_candidates(await env.objects(repo).get(m.key), m.key)
        out += [(rec.reason, path, address) for path, address in rec.objects]
    return sorted(out)


async def test_replaced_uncommitted_data_is_recorded_never_deleted(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    base = len(env.base(repo)) + 1
    key1 = (await main.upload("p", b"v1")).physical_address[base:]
    key2 = (await main.upload("p", b"v2")).physical_address[base:]  # replaces a staged entry
    assert await candidates(env, repo) == [("overwritten", "p", key1)]
    await main.commit("v2")
    await main.upload("p", b"v3")  # replaces a committed entry: not a candidate
    await main.upload("q", b"q")
    await main.delete_object("q")  # a staged object deleted: candidate
    await main.delete_objects(["p"])  # v3 was staged: candidate
    got = await candidates(env, repo)
    assert ("overwritten", "p", key2) not in got
    assert [r for r, _, _ in got] == ["deleted", "deleted", "overwritten"]
    assert len(await data_keys(env, repo)) == 4  # nothing deleted
    records = [m.key async for m in env.objects(repo).list(candidates_prefix())]
    doc = json.loads(await env.objects(repo).get(records[0]))
    assert doc["format"] == "lsmstore-data-gc" and doc["repo"] == repo.name
    assert doc["branch"] == "main"


@library_only  # a second store with other settings
async def test_failed_staging_deletes_the_new_data(env: Env, tmp_path: Path) -> None:
    repo = await env.repo()
    main = repo.branch()
    # an entry over the store's value bound fails before it is staged: the data it
    # pointed at is deleted at once
    big_metadata = {f"k{i}": "v" * 60 for i in range(1000)}
    async with small_values(env, tmp_path, 4096) as small:
        branch = (await small.get_repository(repo.name)).branch()
        with pytest.raises(errors.InvalidInputError):
            await branch.upload("big-entry", b"data", metadata=big_metadata)
    assert await data_keys(env, repo) == []
    with pytest.raises(errors.ObjectNotFoundError):
        await main.stat_object("big-entry")


async def test_interrupted_upload_leaves_no_entry_and_no_data(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()

    async def broken() -> AsyncIterator[bytes]:
        yield os.urandom(MIN_PART_SIZE + 1)  # a multipart upload on S3
        raise OSError("client went away")

    with pytest.raises(OSError, match="client went away"):
        await main.upload("x", broken())
    with pytest.raises(errors.ObjectNotFoundError):
        await main.stat_object("x")
    assert await data_keys(env, repo) == []


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"path": ""}, errors.InvalidNameError),
        ({"path": "x" * 1025}, errors.InvalidNameError),
        ({"path": "é" * 513}, errors.InvalidNameError),  # 1026 bytes
        ({"path": "lone\udcff"}, errors.InvalidNameError),
        ({"path": b"bytes"}, errors.InvalidNameError),
        ({"data": 42}, errors.InvalidInputError),
        ({"data": "no/such/file"}, errors.InvalidInputError),
        ({"data": io.StringIO("text")}, errors.InvalidInputError),
        ({"content_type": ""}, errors.InvalidInputError),
        ({"content_type": "a\nb"}, errors.InvalidInputError),
        ({"metadata": {"": "v"}}, errors.InvalidInputError),
        ({"metadata": {"k": 1}}, errors.InvalidInputError),
        ({"metadata": {"k\n": "v"}}, errors.InvalidInputError),
        ({"metadata": {"k": "v" * (64 * 1024)}}, errors.EntryTooLargeError),
        ({"metadata": {f"k{i}": "" for i in range(1001)}}, errors.EntryTooLargeError),
        ({"metadata": ["k", "v"]}, errors.InvalidInputError),
    ],
)
async def test_bad_upload_input_changes_nothing(
    env: Env, kwargs: dict[str, object], error: type[Exception]
) -> None:
    repo = await env.repo()
    main = repo.branch()
    head = await main.head()
    call: dict[str, object] = {"path": "p", "data": b"v", **kwargs}
    path, data = call.pop("path"), call.pop("data")
    with pytest.raises(error):
        await main.upload(path, data, **call)  # type: ignore[arg-type]
    assert issubclass(error, ValueError)
    assert await main.head() == head
    assert await data_keys(env, repo) == []


async def test_path_at_the_bound(env: Env) -> None:
    main = (await env.repo()).branch()
    await main.upload("é" * 512, b"1024 bytes of path")
    assert (await main.stat_object("é" * 512)).size == 18
    for bad in ("", "x" * 1025, "lone\udcff"):
        for call in (main.stat_object, main.open, main.delete_object):
            with pytest.raises(errors.InvalidNameError):
                await call(bad)


async def test_raw_values_are_inline_objects(env: Env) -> None:
    """A raw value read as an object: contents = the value, checksum = hex identity, no
    physical address; raw keys no object path can name are left out of object listings
    (the raw listing shows them)."""
    main = (await env.repo()).branch()
    value = b"\xff\xff not an entry"
    await main.put("raw", value)
    await main.put(b"\xffnot-utf8", b"x")
    await main.upload("obj", b"data")
    st = await main.stat_object("raw")
    assert (st.path, st.size, st.checksum, st.physical_address, st.mtime) == (
        "raw", len(value), hashlib.sha256(value).hexdigest(), "", 0,
    )  # fmt: skip
    assert st.content_type == "application/octet-stream" and st.metadata == {}
    async with await main.open("raw") as reader:
        assert reader.size == len(value)
        assert await reader.read(2, 5) == value[2:7]
        assert b"".join([c async for c in reader]) == value
        assert [c async for c in reader.iter_chunks(1, 3, chunk_size=2)] == [value[1:3], value[3:4]]
    assert [s.path async for s in main.list_objects()] == ["obj", "raw"]
    assert [s.path async for s in main.list_objects(amount=1, after="obj")] == ["raw"]
    assert [e.key async for e in main.list()] == [b"obj", b"raw", b"\xffnot-utf8"]
    copy = await main.copy_object("raw", "copy")
    assert copy == dataclasses.replace(st, path="copy")
    assert await main.get("copy") == value
    await main.put("raw", b"y", identity=b"given")
    assert (await main.stat_object("raw")).checksum == b"given".hex()
    await main.delete_object("raw")
    assert not await main.exists("raw")


def test_spark_object_rows_show_raw_values_as_inline_objects() -> None:
    from lsmstore.graveler.record import Record
    from lsmstore.objects.addresses import Namespace
    from lsmstore.spark.rows import object_batch

    ns = Namespace("file:///ns", "file:///ns", ())
    batch = object_batch([Record(b"raw", b"ident", b"\xff value")], ns)
    assert list(batch.to_pylist()[0].values()) == [
        "raw", "", 7, b"ident".hex(), 0, "application/octet-stream", [],
    ]  # fmt: skip


# --- entries compare the way lakeFS compares them -----------------------------------------


async def test_same_contents_and_metadata_is_no_change(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    await main.upload("same", b"content", metadata={"a": "1"})
    await main.upload("other", b"content")
    await main.commit("base")
    await main.upload("same", b"content", metadata={"a": "1"})  # new address and mtime
    await main.upload("other", b"content", metadata={"a": "1"})  # metadata differs
    changes = await main.diff_uncommitted()
    assert [(c.key, c.kind) for c in changes] == [(b"other", "changed")]


async def test_large_upload_memory_is_bounded_by_chunks(tmp_path: Path) -> None:
    """A 24 MiB upload from a file never holds the object in memory: tracemalloc's
    peak of Python allocations stays within a few 1 MiB chunks (local store)."""
    import tracemalloc

    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(24 << 20))  # set-up, before any await
    async with lsmstore.connect(home=str(tmp_path / "home"), batch_interval_ms=1) as store:
        repo = await store.create_repository("mem", storage_namespace=(tmp_path / "ns").as_uri())
        main = repo.branch()
        await main.upload("warm-up", b"x")
        tracemalloc.start()
        try:
            stats = await main.upload("big", src)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert stats.size == 24 << 20
        assert peak < 6 << 20, peak
        assert stats.checksum == hashlib.md5(src.read_bytes()).hexdigest()


async def test_objects_on_dynamodb_and_a_memory_namespace(
    moto_serial: MotoServer, tmp_path: Path
) -> None:
    """The third RefStore (DynamoDB, moto) and the in-process store: the object
    layer only uses the writer and the reader, so every combination works alike."""
    from lsmstore.config import load_config
    from lsmstore.refstore.url import open_refstore

    table = f"o{uuid.uuid4().hex[:12]}"
    refstore = open_refstore(
        f"dynamodb://{table}?region=us-east-1&endpoint_url={moto_serial.endpoint}"
    )
    await refstore.create_table()  # type: ignore[attr-defined]
    config = load_config(None, home=str(tmp_path / "home"), batch_interval_ms=1)
    async with lsmstore.Store(config, refstore=refstore) as store:
        repo = await store.create_repository(
            "dyn", storage_namespace=f"mem://objects-{uuid.uuid4().hex[:8]}"
        )
        main = repo.branch()
        up = await main.upload("a/x", chunks([b"12", b"345"]), metadata={"k": "v"})
        assert up.physical_address.startswith(f"{repo.objects.url}/data/")
        await main.link_many([ObjectLink("a/y", up.physical_address, 5, up.checksum)])
        await main.copy_object("a/x", "b")
        assert [s.path async for s in main.list_objects(delimiter="/")] == ["a/", "b"]
        commit = await main.commit("dyn")
        await main.delete_objects(["a/x", "a/y"])
        old = repo.ref(commit.id)
        assert await (await old.open("a/y")).read(1, 3) == b"234"
        assert (await old.stat_object("a/x")).metadata == {"k": "v"}
        assert [s.path async for s in main.list_objects()] == ["b"]


async def test_entries_written_by_lakefs_read_back(env: Env) -> None:
    """Entries as lakeFS writes them -- including old ones whose address type is
    BY_PREFIX_DEPRECATED and ones without a content type -- stat, list and open."""
    from lsmstore.objects.entry import AddressType, ObjectEntry, encode_value

    repo = await env.repo()
    main = repo.branch()
    await env.objects(repo).put("data/old", b"old bytes")
    base = env.base(repo)
    entries = {
        "relative-by-prefix": ObjectEntry("data/old", AddressType.BY_PREFIX_DEPRECATED, 9, "e", 7),
        "full-by-prefix": ObjectEntry(
            f"{base}/data/old", AddressType.BY_PREFIX_DEPRECATED, 9, "e", 7, 0, ""
        ),
    }
    for path, entry in entries.items():
        identity, data = encode_value(entry)
        await main.put(path, data, identity=identity)
    for path in entries:
        stats = await main.stat_object(path)
        assert stats.physical_address == f"{base}/data/old"
        assert stats.content_type == "application/octet-stream" and stats.mtime == 7
        assert await (await main.open(path)).read() == b"old bytes"
    assert [s.physical_address async for s in main.list_objects()] == [f"{base}/data/old"] * 2


@library_only  # the store's clock
async def test_link_calls_take_their_own_time(env: Env) -> None:
    """Each call's links get that call's time, though the stager's rules are cached."""
    repo = await env.repo()
    main = repo.branch()
    base = env.base(repo)
    store = repo.store
    real = store.clock
    try:
        for secs, path in ((1_000, "t/a"), (2_000, "t/b")):
            ticks = itertools.count()

            def clock(s: int = secs, n: itertools.count[int] = ticks) -> float:
                return s + 0.25 + next(n) * 1e-6

            store.clock = clock
            await main.link_many([ObjectLink(path, f"{base}/data/{path[-1]}", 1, "e")])
    finally:
        store.clock = real
    assert [(await main.stat_object(p)).mtime for p in ("t/a", "t/b")] == [1_000, 2_000]


# --- one implementation behind every front end ------------------------------------------


async def gc_reasons(env: Env, repo: Any, branch: str) -> list[tuple[str, int]]:
    """``(reason, number of files)`` of the branch's staging-file garbage records."""
    from lsmstore.gc.staging import decode_record, gc_prefix

    store = env.objects(repo)
    out = []
    async for m in store.list(gc_prefix(branch)):
        rec = decode_record(await store.get(m.key), m.key)
        out.append((rec.reason, len(rec.files)))
    return sorted(out)


async def test_reset_and_branch_deletion_record_their_files_alike(env: Env) -> None:
    """A reset drops the staged files and records them as garbage with one reason, on
    every transport (the server's reset was a copy of its own, with another reason)."""
    repo = await env.repo()
    main = repo.branch()
    await main.upload("a", b"1")
    await main.upload("b", b"2")
    head = await main.head()
    staged = len(head.l1) + len(head.l2)
    after = await main.reset()
    assert (after.base, after.l1, after.l2) == (head.base, (), ())
    assert await main.head() == after
    assert [s.path async for s in main.list_objects()] == []
    assert await gc_reasons(env, repo, "main") == [("branch reset", staged)]
    assert await main.reset() == after  # nothing staged: nothing to drop
    await repo.create_branch("side")
    side = repo.branch("side")
    await side.upload("c", b"3")
    dropped = await side.head()
    await repo.delete_branch("side")
    assert await gc_reasons(env, repo, "side") == [
        ("branch deleted", len(dropped.l1) + len(dropped.l2))
    ]


@library_only  # the server took the branch's lock already; the library did not
async def test_reset_waits_for_a_write_in_flight(env: Env) -> None:
    """A reset excludes the branch's writes in this process: an upload that began
    before it is dropped by it, never staged after it."""
    main = (await env.repo()).branch()
    started, release = asyncio.Event(), asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        yield b"first"
        started.set()
        await release.wait()
        yield b"second"

    upload = asyncio.create_task(main.upload("in-flight", slow()))
    await started.wait()
    reset = asyncio.create_task(main.reset())
    release.set()
    await upload
    await reset
    assert not await main.exists("in-flight")


async def test_if_absent_from_two_clients_has_one_winner(env: Env) -> None:
    """Two clients create the same path with ``if_absent`` at once: exactly one wins,
    for uploads and for links alike (a remote link checked, then linked)."""
    repo = await env.repo()
    async with env.second_client() as other:
        mine = repo.branch()
        theirs = (await other.get_repository(repo.name)).branch()
        for round_ in range(3):
            address = env.new_address(mine)
            calls = [
                b.link(f"l{round_}", address, size=1, checksum="e", if_absent=True)
                for b in (mine, theirs)
            ]
            calls += [b.upload(f"u{round_}", b"x", if_absent=True) for b in (mine, theirs)]
            got = await asyncio.gather(*calls, return_exceptions=True)
            for pair in (got[:2], got[2:]):
                assert sum(isinstance(r, errors.ObjectExistsError) for r in pair) == 1, pair
                assert sum(isinstance(r, ObjectStats) for r in pair) == 1, pair


@library_only  # Branch.batch is the library's (the server's batch endpoint runs one)
async def test_write_batch_stages_every_kind_of_entry_as_one_write(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    first = await main.upload("a", b"first")
    head = await main.head()
    batch = main.batch()
    batch.kv(b"raw", b"value")
    batch.put("b", b"put data", "text/plain", {"k": "v"})
    batch.copy("a", "c")
    batch.link("d", first.physical_address, 5, first.checksum)
    batch.delete("a")
    batch.kv_delete(b"nothing-there")
    with pytest.raises(errors.InvalidNameError):
        batch.put("", b"x")  # checked when added: the batch is unchanged
    assert len(batch) == 6
    assert await batch.apply() == 6
    after = await main.head()
    assert len(after.l1) + len(after.l2) == len(head.l1) + len(head.l2) + 1  # one write
    assert await main.get("raw") == b"value"
    b = await main.stat_object("b")
    assert (b.content_type, b.metadata, b.size) == ("text/plain", {"k": "v"}, 8)
    assert await (await main.open("c")).read() == b"first"
    assert (await main.stat_object("d")).physical_address == first.physical_address
    assert not await main.exists("a")
    # replaced staged data is a candidate, as for the single-object calls; it is never
    # deleted by a write ("c" and "d" still read it: GC's mark decides)
    key = first.physical_address.rsplit("/data/", 1)[1]
    assert await candidates(env, repo) == [("overwritten", "a", f"data/{key}")]
    assert f"data/{key}" in await data_keys(env, repo)
    with pytest.raises(errors.InvalidInputError):
        await batch.apply()  # applied once


@library_only
async def test_write_batch_if_absent_refuses_the_whole_batch(env: Env) -> None:
    repo = await env.repo()
    main = repo.branch()
    await main.upload("taken", b"1")
    data_before = await data_keys(env, repo)
    head = await main.head()
    batch = main.batch()
    batch.put("new", b"2", if_absent=True)
    batch.put("taken", b"3", if_absent=True)
    with pytest.raises(errors.ObjectExistsError):
        await batch.apply()
    assert await main.head() == head
    assert await data_keys(env, repo) == data_before  # no data written for a refusal


async def test_if_absent_is_decided_by_the_refstore_across_stores(
    redis_server_url: str, tmp_path: Path
) -> None:
    """Two stores on one RefStore (as two processes: no lock or cache in common) race
    ``if_absent`` uploads, links and batch puts of one path: exactly one wins each time
    and the losing uploads' data is deleted."""
    url = f"{redis_server_url}?prefix=abs{uuid.uuid4().hex[:8]}:"
    ns = (tmp_path / "ns").as_uri()
    async with (
        lsmstore.connect(url, home=str(tmp_path / "a"), batch_interval_ms=1) as a,
        lsmstore.connect(url, home=str(tmp_path / "b"), batch_interval_ms=1) as b,
    ):
        await a.create_repository("race", storage_namespace=ns)
        mains = [(await s.get_repository("race")).branch() for s in (a, b)]
        for i in range(6):
            results = await asyncio.gather(
                *(m.upload(f"up{i}", b"from %d" % n, if_absent=True) for n, m in enumerate(mains)),
                return_exceptions=True,
            )
            assert sorted(type(r).__name__ for r in results) == ["ObjectExistsError", "ObjectStats"]
            address = mains[0].new_physical_address()
            links = await asyncio.gather(
                *(m.link(f"ln{i}", address, size=1, checksum="e", if_absent=True) for m in mains),
                return_exceptions=True,
            )
            assert sorted(type(r).__name__ for r in links) == ["ObjectExistsError", "ObjectStats"]
            batches = [m.batch() for m in mains]
            for n, batch in enumerate(batches):
                batch.put(f"bt{i}", b"batch %d" % n, if_absent=True)
            applied = await asyncio.gather(*(x.apply() for x in batches), return_exceptions=True)
            assert sorted(type(r).__name__ for r in applied) == ["ObjectExistsError", "int"]
        listed = [s.path async for s in mains[1].list_objects()]
        assert len(listed) == 18
        data = tmp_path / "ns" / "data"
        assert len(list(data.iterdir())) == 12  # one data object per upload or batch path
