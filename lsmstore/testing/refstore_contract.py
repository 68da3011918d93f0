"""The RefStore conformance suite every backend runs (docs/design.md, "RefStore contract").

Subclass :class:`RefStoreContract` in a test module as ``class TestXRefStore(...)``
and provide an async ``refstore`` fixture yielding a fresh, empty store (the suite
closes it itself in the tests that need that; the fixture should ``aclose()`` it
too -- closing twice is allowed).  Tests whose names start with ``test_concurrent_``
race many operations at once; a backend whose test server is not atomic under
concurrency (moto's threaded DynamoDB) can pick a serial server for those by name.

Leases: :meth:`RefStoreContract.pass_time` lets leases expire.  It sleeps by default
(with :attr:`lease_ttl` seconds); a backend with an injectable clock overrides it to
advance a fake clock instead.  Window counters and members are timed by the backend's injected
clock: :meth:`RefStoreContract.pass_counter_time` advances it (by default
:meth:`pass_time`; a backend whose leases are timed by its server, not by the clock,
overrides only this one).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from lsmstore.errors import (
    ClosedError,
    ConflictError,
    EntryTooLargeError,
    InvalidInputError,
    InvalidNameError,
    LsmError,
    RecordExistsError,
    RecordNotFoundError,
    RefExistsError,
    RefNotFoundError,
    RepositoryNotFoundError,
    WorkspaceExistsError,
    WorkspaceNotFoundError,
)
from lsmstore.refstore import transitions
from lsmstore.refstore.base import (
    MAX_CONSUMED_IDS,
    MAX_FILE_IDS,
    MAX_GROUP_IDS,
    MAX_QUALIFIED_BYTES,
    MAX_RECORD_BYTES,
    MAX_REPOSITORY_METADATA_BYTES,
    Ref,
    RefKind,
    RefStore,
    Repository,
    WindowCount,
)
from lsmstore.refstore.names import encode_branch, locate_entry, qualify_entry

REPO = "repo1"
BAD_REPOSITORY_NAMES = ["", "Repo", "-a", "_a", "a/b", "a b", "a.b", "a..b", "x" * 64, "a\n", "é"]
BAD_REF_NAMES = [
    "",
    "..",
    "a..b",
    "a/b",
    "/a",
    "a b",
    " a",
    "a\tb",
    "a\nb",
    "a\x00b",
    "a\x1fb",
    "a\x7f",
    "a\u0085b",
    "a\u3000b",
    "x" * 256,
    "é" * 128,
    "-a",
    ".a",
    "a.",
    "a~1",
    "a^2",
    "a:b",
    "a?",
    "a*",
    "a[0",
    "a\\b",
    "a@{1}",
    "a\ud800",
]
BAD_FILE_IDS = ["", "f1\n", "a,b", "a/b", "a.b", "a b", "x" * 65, "é"]


class FakeClock:
    """An injectable clock (seconds since the epoch) that moves only when told."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ids(prefix: str, n: int, start: int = 0) -> tuple[str, ...]:
    return tuple(f"{prefix}{i:05d}" for i in range(start, start + n))


def branch(base: str = "c0", l2: tuple[str, ...] = (), l1: tuple[str, ...] = ()) -> Ref:
    return Ref("branch", base, l2, l1)


class RefStoreContract:
    """Async tests of the RefStore contract; subclasses provide ``refstore``."""

    #: Lease lifetime used by the lease tests (seconds of real or fake time).
    lease_ttl: float = 10.0

    @pytest.fixture
    async def refstore(self) -> AsyncIterator[RefStore]:
        raise NotImplementedError("a RefStoreContract subclass must provide `refstore`")
        yield  # pragma: no cover

    async def pass_time(self, seconds: float) -> None:
        """Let ``seconds`` pass for lease expiry (override to advance a fake clock)."""
        await asyncio.sleep(seconds)

    async def pass_counter_time(self, seconds: float) -> None:
        """Let ``seconds`` of the backend's clock pass for window counters and members."""
        await self.pass_time(seconds)

    # --- helpers -----------------------------------------------------------------------

    @staticmethod
    async def repo(store: RefStore, name: str = REPO, **metadata: str) -> Repository:
        r = Repository(name, f"file:///data/{name}", "main", 1700000000.5, dict(metadata))
        await store.create_repository(r)
        return r

    async def branch(
        self,
        store: RefStore,
        name: str = "main",
        *,
        base: str = "c0",
        l2: tuple[str, ...] = (),
        l1: tuple[str, ...] = (),
    ) -> Ref:
        try:
            await store.get_repository(REPO)
        except RepositoryNotFoundError:
            await self.repo(store)
        ref = branch(base, l2, l1)
        await store.create_ref(REPO, name, ref)
        return ref

    @staticmethod
    async def consume(store: RefStore, op: str, name: str, prefix: tuple[str, ...]) -> Ref:
        """A swap (``op`` "compacted" or "committed") of the ref's current value that
        consumes ``prefix`` from L1."""
        cur = await store.get_ref(REPO, name)
        if op == "compacted":
            return await store.swap_compacted(
                REPO, name, base=cur.base, l2_old=cur.l2, l1_prefix=prefix, l2_new=("gx",)
            )
        return await store.swap_committed(
            REPO, name, base=cur.base, l2_old=cur.l2, l1_prefix=prefix, new_base=cur.base + "x"
        )

    # --- repositories ----------------------------------------------------------------

    async def test_create_get_repository(self, refstore: RefStore) -> None:
        r = await self.repo(refstore, owner="data-team", note="ünïcode ✓")
        assert await refstore.get_repository(REPO) == r
        got = await refstore.get_repository(REPO)
        assert got.metadata == {"owner": "data-team", "note": "ünïcode ✓"}
        assert got.created_at == 1700000000.5
        assert got.default_branch == "main"

    async def test_create_repository_twice(self, refstore: RefStore) -> None:
        r = await self.repo(refstore)
        other = Repository(REPO, "s3://elsewhere/x", "dev")
        with pytest.raises(RefExistsError, match=REPO):
            await refstore.create_repository(other)
        assert await refstore.get_repository(REPO) == r

    async def test_missing_repository(self, refstore: RefStore) -> None:
        with pytest.raises(RepositoryNotFoundError, match="nope") as e:
            await refstore.get_repository("nope")
        assert isinstance(e.value, KeyError)
        with pytest.raises(RepositoryNotFoundError):
            await refstore.delete_repository("nope")

    async def test_list_repositories(self, refstore: RefStore) -> None:
        names = ["b", "a-2", "a_1", "a", "c9", "c10", "0x", "zz"]
        for n in names:
            await self.repo(refstore, n)
        expected = sorted(names)
        assert [r.name for r in await refstore.list_repositories()] == expected
        assert await refstore.list_repositories(limit=0) == []
        assert [r.name for r in await refstore.list_repositories(limit=3)] == expected[:3]
        assert [r.name for r in await refstore.list_repositories(after="b")] == ["c10", "c9", "zz"]
        assert [r.name for r in await refstore.list_repositories(after="b0", limit=1)] == ["c10"]
        assert await refstore.list_repositories(after="zz") == []
        paged, after = [], None
        while page := await refstore.list_repositories(after=after, limit=3):
            paged += [r.name for r in page]
            after = page[-1].name
        assert paged == expected
        assert (await refstore.list_repositories(after="a", limit=1))[0].storage_namespace == (
            "file:///data/a-2"
        )

    async def test_delete_repository_removes_its_refs(self, refstore: RefStore) -> None:
        await self.branch(refstore, "main", l1=ids("f", 3))
        await refstore.create_ref(REPO, "v1", Ref("tag", "c0"))
        await self.repo(refstore, "other")
        await refstore.create_ref("other", "main", branch())
        await refstore.delete_repository(REPO)
        with pytest.raises(RepositoryNotFoundError):
            await refstore.get_repository(REPO)
        with pytest.raises(RepositoryNotFoundError):
            await refstore.get_ref(REPO, "main")
        assert [r.name for r in await refstore.list_repositories()] == ["other"]
        await self.repo(refstore)
        assert await refstore.list_refs(REPO) == []
        with pytest.raises(RefNotFoundError):
            await refstore.get_ref(REPO, "main")
        assert await refstore.get_ref("other", "main") == branch()

    async def test_repository_id_and_location(self, refstore: RefStore) -> None:
        r = Repository(REPO, "local://a/b", "main", 1.0, {}, "u" * 32, "file:///srv/data/a/b")
        await refstore.create_repository(r)
        assert await refstore.get_repository(REPO) == r
        assert (await refstore.list_repositories())[0] == r
        legacy = Repository("old", "file:///d", "main", 1.0)
        await refstore.create_repository(legacy)
        got = await refstore.get_repository("old")
        assert (got.uid, got.location) == ("", "")
        with pytest.raises(InvalidInputError):
            await refstore.create_repository(Repository("x", "file:///d", "main", uid="A!"))
        with pytest.raises(InvalidInputError):
            await refstore.create_repository(Repository("x", "file:///d", "main", location="\x00"))

    @pytest.mark.parametrize("op", ["append_l1", "append_l1_many", "append_l1_group"])
    async def test_append_conditioned_on_repository_id(self, refstore: RefStore, op: str) -> None:
        """An append prepared for a repository is refused once it is deleted and
        re-created (another id), and changes nothing; with the right id it applies."""

        async def append(file_id: str, uid: str | None) -> Ref:
            if op == "append_l1":
                return await refstore.append_l1(REPO, "main", file_id, repository_id=uid)
            if op == "append_l1_many":
                return await refstore.append_l1_many(REPO, "main", [file_id], repository_id=uid)
            return await refstore.append_l1_group(
                REPO, "main", "g" + file_id, [file_id], repository_id=uid
            )

        await refstore.create_repository(Repository(REPO, "file:///d", "main", 1.0, uid="one"))
        await refstore.create_ref(REPO, "main", branch())
        assert (await append("f1", "one")).l1 == ("f1",)
        assert (await append("f1", "one")).l1 == ("f1",)  # idempotent
        with pytest.raises(RepositoryNotFoundError, match="re-created"):
            await append("f2", "two")
        with pytest.raises(RepositoryNotFoundError):
            await append("f2", "")
        assert (await refstore.get_ref(REPO, "main")).l1 == ("f1",)
        await refstore.delete_repository(REPO)
        with pytest.raises(RepositoryNotFoundError):
            await append("f2", "one")
        await refstore.create_repository(Repository(REPO, "file:///e", "main", 2.0, uid="two"))
        await refstore.create_ref(REPO, "main", branch())
        with pytest.raises(RepositoryNotFoundError):
            await append("f2", "one")
        assert (await refstore.get_ref(REPO, "main")).l1 == ()
        assert (await append("f3", None)).l1 == ("f3",)  # unconditioned
        assert (await append("f4", "two")).l1 == ("f3", "f4")
        # A repository recorded without an id is named by "".
        await self.repo(refstore, "legacy")
        await refstore.create_ref("legacy", "main", branch())
        assert (await refstore.append_l1("legacy", "main", "f5", repository_id="")).l1 == ("f5",)
        with pytest.raises(RepositoryNotFoundError):
            await refstore.append_l1("legacy", "main", "f6", repository_id="two")
        with pytest.raises(InvalidInputError):
            await refstore.append_l1("legacy", "main", "f6", repository_id="Bad Id")

    async def test_concurrent_conditioned_appends(self, refstore: RefStore) -> None:
        await refstore.create_repository(Repository(REPO, "file:///d", "main", 1.0, uid="one"))
        await refstore.create_ref(REPO, "main", branch())
        fids = ids("c", 24)
        await asyncio.gather(
            *(
                refstore.append_l1(REPO, "main", f, repository_id="one")
                if i % 2
                else refstore.append_l1_many(REPO, "main", [f], repository_id="one")
                for i, f in enumerate(fids)
            )
        )
        assert sorted((await refstore.get_ref(REPO, "main")).l1) == sorted(fids)

    async def test_repository_metadata_too_large(self, refstore: RefStore) -> None:
        big = {"k": "x" * (MAX_REPOSITORY_METADATA_BYTES + 1)}
        with pytest.raises(EntryTooLargeError, match=REPO):
            await refstore.create_repository(Repository(REPO, "file:///d", "main", 0.0, big))
        with pytest.raises(RepositoryNotFoundError):
            await refstore.get_repository(REPO)

    async def test_bad_repository_fields(self, refstore: RefStore) -> None:
        with pytest.raises(InvalidInputError):
            await refstore.create_repository(Repository(REPO, "", "main"))
        with pytest.raises(InvalidNameError):
            await refstore.create_repository(Repository(REPO, "file:///d", "a..b"))
        with pytest.raises(InvalidInputError):
            await refstore.list_repositories(limit=-1)
        assert await refstore.list_repositories() == []

    async def test_ref_operations_on_missing_repository(self, refstore: RefStore) -> None:
        calls: list[Callable[[], Any]] = [
            lambda: refstore.get_ref("nope", "main"),
            lambda: refstore.get_refs("nope", ["main"]),
            lambda: refstore.get_refs("nope", []),
            lambda: refstore.list_refs("nope"),
            lambda: refstore.create_ref("nope", "main", branch()),
            lambda: refstore.delete_ref("nope", "main", branch()),
            lambda: refstore.append_l1("nope", "main", "f1"),
            lambda: refstore.swap_compacted(
                "nope", "main", base="c0", l2_old=(), l1_prefix=(), l2_new=()
            ),
            lambda: refstore.swap_committed(
                "nope", "main", base="c0", l2_old=(), l1_prefix=(), new_base="c1"
            ),
            lambda: refstore.set_base("nope", "main", expected_base="c0", new_base="c1"),
        ]
        for call in calls:
            with pytest.raises(RepositoryNotFoundError, match="nope"):
                await call()
        assert await refstore.list_repositories() == []

    # --- refs ----------------------------------------------------------------------------

    async def test_create_get_branch_and_tag(self, refstore: RefStore) -> None:
        b = await self.branch(refstore, "main", base="c1", l2=ids("g", 2), l1=ids("f", 3))
        await refstore.create_ref(REPO, "v1.0", Ref("tag", "c1"))
        assert await refstore.get_ref(REPO, "main") == b
        tag = await refstore.get_ref(REPO, "v1.0")
        assert tag == Ref("tag", "c1") and not tag.is_branch
        await refstore.create_ref(REPO, "empty", Ref("branch", ""))
        assert await refstore.get_ref(REPO, "empty") == Ref("branch", "")

    async def test_create_ref_exists(self, refstore: RefStore) -> None:
        b = await self.branch(refstore, "main", l1=ids("f", 1))
        with pytest.raises(RefExistsError, match="main"):
            await refstore.create_ref(REPO, "main", Ref("tag", "c9"))
        assert await refstore.get_ref(REPO, "main") == b

    async def test_tag_holds_no_files(self, refstore: RefStore) -> None:
        await self.repo(refstore)
        with pytest.raises(InvalidInputError):
            await refstore.create_ref(REPO, "v1", Ref("tag", "c0", l1=("f1",)))
        with pytest.raises(InvalidInputError):
            await refstore.create_ref(REPO, "v1", Ref("note", "c0"))  # type: ignore[arg-type]
        assert await refstore.list_refs(REPO) == []

    async def test_missing_ref(self, refstore: RefStore) -> None:
        await self.repo(refstore)
        with pytest.raises(RefNotFoundError, match="main") as e:
            await refstore.get_ref(REPO, "main")
        assert isinstance(e.value, KeyError)
        for call in (
            lambda: refstore.append_l1(REPO, "main", "f1"),
            lambda: refstore.delete_ref(REPO, "main", branch()),
            lambda: refstore.set_base(REPO, "main", expected_base="c0", new_base="c1"),
            lambda: refstore.swap_compacted(
                REPO, "main", base="c0", l2_old=(), l1_prefix=(), l2_new=()
            ),
            lambda: refstore.swap_committed(
                REPO, "main", base="c0", l2_old=(), l1_prefix=(), new_base="c1"
            ),
        ):
            with pytest.raises(RefNotFoundError, match="main"):
                await call()
        assert await refstore.list_refs(REPO) == []

    async def test_get_refs(self, refstore: RefStore) -> None:
        a = await self.branch(refstore, "a", l1=ids("f", 2))
        await refstore.create_ref(REPO, "t", Ref("tag", "c5"))
        got = await refstore.get_refs(REPO, ["a", "missing", "t", "a"])
        assert got == {"a": a, "t": Ref("tag", "c5")}
        assert await refstore.get_refs(REPO, []) == {}
        many = [f"b{i:03d}" for i in range(130)]  # more than one request's worth
        for n in many[:105]:
            await refstore.create_ref(REPO, n, branch(base=n))
        got = await refstore.get_refs(REPO, many)
        assert sorted(got) == many[:105] and got["b007"].base == "b007"

    async def test_list_refs(self, refstore: RefStore) -> None:
        await self.repo(refstore)
        names = ["main", "a", "a-b", "a_b", "ab", "b", "é", "日本", "a{x}", "z", "A"]
        tags = {"a_b", "z"}
        for n in reversed(names):
            kind: RefKind = "tag" if n in tags else "branch"
            await refstore.create_ref(REPO, n, Ref(kind, f"c-{len(n)}"))
        expected = sorted(names)  # code-point order == UTF-8 byte order
        assert [n for n, _ in await refstore.list_refs(REPO)] == expected
        listed = dict(await refstore.list_refs(REPO))
        assert listed["a_b"] == Ref("tag", "c-3") and listed["main"] == Ref("branch", "c-4")
        assert [n for n, _ in await refstore.list_refs(REPO, prefix="a")] == [
            "a",
            "a-b",
            "a_b",
            "ab",
            "a{x}",
        ]
        assert [n for n, _ in await refstore.list_refs(REPO, prefix="a", after="a-b")] == [
            "a_b",
            "ab",
            "a{x}",
        ]
        assert [n for n, _ in await refstore.list_refs(REPO, prefix="a", after="0")] == [
            "a",
            "a-b",
            "a_b",
            "ab",
            "a{x}",
        ]
        assert await refstore.list_refs(REPO, prefix="a", after="b") == []
        assert [n for n, _ in await refstore.list_refs(REPO, prefix="a", limit=2)] == ["a", "a-b"]
        assert [n for n, _ in await refstore.list_refs(REPO, after="z")] == ["é", "日本"]
        assert [n for n, _ in await refstore.list_refs(REPO, prefix="日")] == ["日本"]
        assert await refstore.list_refs(REPO, prefix="q") == []
        assert await refstore.list_refs(REPO, limit=0) == []
        assert [n for n, _ in await refstore.list_refs(REPO, kind="tag")] == ["a_b", "z"]
        # kind filters after paging by name: the first 4 names hold one tag.
        assert [n for n, _ in await refstore.list_refs(REPO, kind="tag", limit=4)] == ["a_b"]
        assert len(await refstore.list_refs(REPO, kind="branch")) == len(names) - 2
        paged: list[str] = []
        after = None
        while page := await refstore.list_refs(REPO, after=after, limit=3):
            paged += [n for n, _ in page]
            after = page[-1][0]
        assert paged == expected

    async def test_list_refs_many(self, refstore: RefStore) -> None:
        await self.repo(refstore)
        names = [f"br{i:04d}" for i in range(120)]
        for n in names:
            await refstore.create_ref(REPO, n, branch())
        listed = await refstore.list_refs(REPO, prefix="br", limit=1000)
        assert [n for n, _ in listed] == names
        assert [n for n, _ in await refstore.list_refs(REPO, after="br0049", limit=200)] == (
            names[50:]
        )

    async def test_delete_ref(self, refstore: RefStore) -> None:
        b = await self.branch(refstore, "main", l1=ids("f", 2))
        stale = branch(l1=ids("f", 1))
        with pytest.raises(ConflictError) as e:
            await refstore.delete_ref(REPO, "main", stale)
        assert e.value.found == b
        assert await refstore.get_ref(REPO, "main") == b
        await refstore.delete_ref(REPO, "main", b)
        with pytest.raises(RefNotFoundError):
            await refstore.get_ref(REPO, "main")
        with pytest.raises(RefNotFoundError):
            await refstore.delete_ref(REPO, "main", b)
        await refstore.create_ref(REPO, "v1", Ref("tag", "c3"))
        with pytest.raises(ConflictError):
            await refstore.delete_ref(REPO, "v1", Ref("branch", "c3"))
        await refstore.delete_ref(REPO, "v1", Ref("tag", "c3"))
        assert await refstore.list_refs(REPO) == []
        await refstore.create_ref(REPO, "main", branch(base="c7"))  # names are reusable
        assert await refstore.get_ref(REPO, "main") == branch(base="c7")

    # --- branch operations ---------------------------------------------------------------

    async def test_append_l1_order_and_idempotence(self, refstore: RefStore) -> None:
        await self.branch(refstore, "main", l2=("g1",))
        r1 = await refstore.append_l1(REPO, "main", "f1")
        assert r1 == branch(l2=("g1",), l1=("f1",))
        await refstore.append_l1(REPO, "main", "f2")
        again = await refstore.append_l1(REPO, "main", "f1")
        assert again == branch(l2=("g1",), l1=("f1", "f2"))
        r3 = await refstore.append_l1(REPO, "main", "f3")
        assert r3.l1 == ("f1", "f2", "f3")
        assert await refstore.get_ref(REPO, "main") == r3
        assert (await refstore.append_l1(REPO, "main", "f3")).l1 == ("f1", "f2", "f3")

    @pytest.mark.parametrize("op", ["compacted", "committed"])
    async def test_append_of_a_consumed_id_is_a_noop(self, refstore: RefStore, op: str) -> None:
        """A retried append whose first attempt landed and was consumed by a swap before
        the retry must not re-stage the file above newer data."""
        await self.branch(refstore, "main", base="c1", l2=("g1",))
        await refstore.append_l1(REPO, "main", "f1")
        await refstore.append_l1(REPO, "main", "f2")
        await self.consume(refstore, op, "main", ("f1",))
        newer = await refstore.append_l1(REPO, "main", "f3")
        assert newer.l1 == ("f2", "f3")
        assert await refstore.append_l1(REPO, "main", "f1") == newer  # the retry
        assert await refstore.get_ref(REPO, "main") == newer
        # Consumed ids of several swaps are remembered, and L1 ids still are too.
        after = await self.consume(refstore, op, "main", ("f2", "f3"))
        assert after.l1 == ()
        for f in ("f1", "f2", "f3"):
            assert await refstore.append_l1(REPO, "main", f) == after
        assert (await refstore.append_l1(REPO, "main", "f4")).l1 == ("f4",)
        assert (await refstore.append_l1(REPO, "main", "f4")).l1 == ("f4",)

    async def test_consumed_ids_across_a_branch_life(self, refstore: RefStore) -> None:
        await self.branch(refstore, "main", base="c1", l1=("f1", "f2"))
        await self.branch(refstore, "dev", base="c1")
        await refstore.swap_committed(
            REPO, "main", base="c1", l2_old=(), l1_prefix=("f1",), new_base="c2"
        )
        # A merge's set_base keeps L1 and the consumed ids with it.
        merged = await refstore.set_base(REPO, "main", expected_base="c2", new_base="c3")
        assert await refstore.append_l1(REPO, "main", "f1") == merged
        # Each branch has its own; a new ref starts with none.
        assert (await refstore.append_l1(REPO, "dev", "f1")).l1 == ("f1",)
        await refstore.delete_ref(REPO, "main", merged)
        await refstore.create_ref(REPO, "main", branch("c3"))
        assert (await refstore.append_l1(REPO, "main", "f1")).l1 == ("f1",)
        # A failed swap consumes nothing.
        with pytest.raises(ConflictError):
            await refstore.swap_compacted(
                REPO, "main", base="c9", l2_old=(), l1_prefix=("f1",), l2_new=()
            )
        assert (await refstore.get_ref(REPO, "main")).l1 == ("f1",)
        done = await refstore.swap_compacted(
            REPO, "main", base="c3", l2_old=(), l1_prefix=(), l2_new=("g1",)
        )
        assert await refstore.append_l1(REPO, "main", "f1") == done  # still in L1

    async def test_consumed_ids_are_trimmed_at_the_cap(self, refstore: RefStore) -> None:
        """The branch remembers the last MAX_CONSUMED_IDS consumed ids, and always the
        whole prefix of its latest swap.  An id trimmed out is appended again: that only
        happens after MAX_CONSUMED_IDS files appended after it were consumed too, far
        outside the window in which a writer retries an append."""
        cap = MAX_CONSUMED_IDS
        l1 = ids("f", cap + 20)
        await self.branch(refstore, "main", base="c1", l1=l1)
        first = await refstore.swap_committed(
            REPO, "main", base="c1", l2_old=(), l1_prefix=l1[: cap + 10], new_base="c2"
        )
        assert await refstore.append_l1(REPO, "main", l1[0]) == first  # whole prefix kept
        second = await refstore.swap_compacted(
            REPO, "main", base="c2", l2_old=(), l1_prefix=l1[cap + 10 : cap + 15], l2_new=("g1",)
        )
        assert second == branch("c2", ("g1",), l1[cap + 15 :])
        # Now the tail is l1[15 : cap + 15]: exactly the last `cap` consumed ids.
        for kept in (l1[15], l1[cap // 2], l1[cap + 14]):
            assert await refstore.append_l1(REPO, "main", kept) == second
        for trimmed in (l1[14], l1[0]):
            again = await refstore.append_l1(REPO, "main", trimmed)
            assert again.l1[-1] == trimmed
        assert (await refstore.get_ref(REPO, "main")).l1 == (*l1[cap + 15 :], l1[14], l1[0])

    async def test_consumed_ids_never_fail_for_size(self, refstore: RefStore) -> None:
        """The largest ref: MAX_FILE_IDS ids in L1 + L2 and as many consumed, 64 chars each."""
        await self.repo(refstore)
        long_ids = tuple(f"{i:05d}" + "x" * 59 for i in range(2 * MAX_FILE_IDS))
        old, new = long_ids[:MAX_FILE_IDS], long_ids[MAX_FILE_IDS:]
        await refstore.create_ref(REPO, "big", branch(l1=old))
        full = await refstore.swap_compacted(
            REPO, "big", base="c0", l2_old=(), l1_prefix=old, l2_new=new
        )
        assert full == branch("c0", new)
        assert await refstore.append_l1(REPO, "big", old[0]) == full  # consumed: no-op
        assert await refstore.append_l1(REPO, "big", old[-1]) == full
        with pytest.raises(EntryTooLargeError):
            await refstore.append_l1(REPO, "big", "f-new")
        await refstore.swap_committed(
            REPO, "big", base="c0", l2_old=new, l1_prefix=(), new_base="c1"
        )
        assert (await refstore.append_l1(REPO, "big", "f-new")).l1 == ("f-new",)
        assert (await refstore.append_l1(REPO, "big", old[7])).l1 == ("f-new",)

    async def test_tags_are_not_branches(self, refstore: RefStore) -> None:
        await self.repo(refstore)
        tag = Ref("tag", "c1")
        await refstore.create_ref(REPO, "v1", tag)
        calls: list[Callable[[], Awaitable[Ref]]] = [
            lambda: refstore.append_l1(REPO, "v1", "f1"),
            lambda: refstore.swap_compacted(
                REPO, "v1", base="c1", l2_old=(), l1_prefix=(), l2_new=("g1",)
            ),
            lambda: refstore.swap_committed(
                REPO, "v1", base="c1", l2_old=(), l1_prefix=(), new_base="c2"
            ),
            lambda: refstore.set_base(REPO, "v1", expected_base="c1", new_base="c2"),
        ]
        for call in calls:
            with pytest.raises(ConflictError, match="v1") as e:
                await call()
            assert e.value.found == tag
        assert await refstore.get_ref(REPO, "v1") == tag

    async def test_swap_compacted(self, refstore: RefStore) -> None:
        await self.branch(refstore, "main", base="c1", l2=("g1",), l1=ids("f", 4))
        new = await refstore.swap_compacted(
            REPO, "main", base="c1", l2_old=["g1"], l1_prefix=ids("f", 3), l2_new=["g2", "g3"]
        )
        assert new == branch("c1", ("g2", "g3"), ("f00003",))
        assert await refstore.get_ref(REPO, "main") == new
        whole = await refstore.swap_compacted(
            REPO, "main", base="c1", l2_old=("g2", "g3"), l1_prefix=("f00003",), l2_new=()
        )
        assert whole == branch("c1")
        same = await refstore.swap_compacted(
            REPO, "main", base="c1", l2_old=(), l1_prefix=(), l2_new=("g4",)
        )
        assert same == branch("c1", ("g4",))

    async def test_swap_committed(self, refstore: RefStore) -> None:
        await self.branch(refstore, "main", base="c1", l2=("g1",), l1=ids("f", 4))
        new = await refstore.swap_committed(
            REPO, "main", base="c1", l2_old=("g1",), l1_prefix=ids("f", 2), new_base="c2"
        )
        assert new == branch("c2", (), ids("f", 2, start=2))
        assert await refstore.get_ref(REPO, "main") == new
        empty = await refstore.swap_committed(
            REPO, "main", base="c2", l2_old=(), l1_prefix=ids("f", 2, start=2), new_base="c3"
        )
        assert empty == branch("c3")

    @pytest.mark.parametrize("op", ["compacted", "committed"])
    @pytest.mark.parametrize(
        ("base", "l2_old", "l1_prefix"),
        [
            pytest.param("c9", ("g1",), ("f00000",), id="base-differs"),
            pytest.param("", ("g1",), ("f00000",), id="base-empty"),
            pytest.param("c1", ("g2",), ("f00000",), id="l2-differs"),
            pytest.param("c1", (), ("f00000",), id="l2-shorter"),
            pytest.param("c1", ("g1", "g2"), ("f00000",), id="l2-longer"),
            pytest.param("c1", ("g1",), ("f00001",), id="l1-not-prefix"),
            pytest.param("c1", ("g1",), ("f00000", "f00002"), id="l1-gap"),
            pytest.param("c1", ("g1",), ids("f", 4), id="prefix-longer-than-l1"),
            pytest.param("c1", ("g1",), ("f0000",), id="prefix-of-an-id"),
        ],
    )
    async def test_swap_conditions(
        self,
        refstore: RefStore,
        op: str,
        base: str,
        l2_old: tuple[str, ...],
        l1_prefix: tuple[str, ...],
    ) -> None:
        before = await self.branch(refstore, "main", base="c1", l2=("g1",), l1=ids("f", 3))
        with pytest.raises(ConflictError, match="main") as e:
            if op == "compacted":
                await refstore.swap_compacted(
                    REPO, "main", base=base, l2_old=l2_old, l1_prefix=l1_prefix, l2_new=("g9",)
                )
            else:
                await refstore.swap_committed(
                    REPO, "main", base=base, l2_old=l2_old, l1_prefix=l1_prefix, new_base="c2"
                )
        assert e.value.found == before
        assert await refstore.get_ref(REPO, "main") == before

    async def test_swap_long_prefix(self, refstore: RefStore) -> None:
        l1 = ids("f", 260)
        await self.branch(refstore, "main", base="c1", l2=ids("g", 40), l1=l1)
        with pytest.raises(ConflictError):
            await refstore.swap_compacted(
                REPO,
                "main",
                base="c1",
                l2_old=ids("g", 40),
                l1_prefix=(*l1[:150], "x"),
                l2_new=(),
            )
        new = await refstore.swap_compacted(
            REPO, "main", base="c1", l2_old=ids("g", 40), l1_prefix=l1[:230], l2_new=ids("h", 3)
        )
        assert new == branch("c1", ids("h", 3), l1[230:])
        new = await refstore.swap_committed(
            REPO, "main", base="c1", l2_old=ids("h", 3), l1_prefix=l1[230:], new_base="c2"
        )
        assert new == branch("c2")
        assert await refstore.get_ref(REPO, "main") == new

    async def test_set_base(self, refstore: RefStore) -> None:
        before = await self.branch(refstore, "main", base="c1", l2=("g1",), l1=("f1",))
        with pytest.raises(ConflictError) as e:
            await refstore.set_base(REPO, "main", expected_base="c0", new_base="c2")
        assert e.value.found == before
        new = await refstore.set_base(REPO, "main", expected_base="c1", new_base="c2")
        assert new == branch("c2", ("g1",), ("f1",))
        assert await refstore.get_ref(REPO, "main") == new

    # --- bad input ----------------------------------------------------------------------

    @pytest.mark.parametrize("name", BAD_REPOSITORY_NAMES)
    async def test_invalid_repository_names(self, refstore: RefStore, name: str) -> None:
        # Validation comes first: a missing repository would otherwise raise NotFound.
        for call in (
            lambda: refstore.create_repository(Repository(name, "file:///d", "main")),
            lambda: refstore.get_repository(name),
            lambda: refstore.delete_repository(name),
            lambda: refstore.get_ref(name, "main"),
            lambda: refstore.get_refs(name, ["main"]),
            lambda: refstore.list_refs(name),
            lambda: refstore.create_ref(name, "main", branch()),
            lambda: refstore.delete_ref(name, "main", branch()),
            lambda: refstore.append_l1(name, "main", "f1"),
            lambda: refstore.set_base(name, "main", expected_base="c0", new_base="c1"),
        ):
            with pytest.raises(InvalidNameError):
                await call()
        assert await refstore.list_repositories() == []

    @pytest.mark.parametrize("name", BAD_REF_NAMES)
    async def test_invalid_ref_names(self, refstore: RefStore, name: str) -> None:
        await self.repo(refstore)
        for call in (
            lambda: refstore.create_repository(Repository("r2", "file:///d", name)),
            lambda: refstore.get_ref(REPO, name),
            lambda: refstore.get_refs(REPO, ["main", name]),
            lambda: refstore.create_ref(REPO, name, branch()),
            lambda: refstore.create_ref(REPO, name, Ref("tag", "c0")),
            lambda: refstore.delete_ref(REPO, name, branch()),
            lambda: refstore.append_l1(REPO, name, "f1"),
            lambda: refstore.swap_compacted(
                REPO, name, base="c0", l2_old=(), l1_prefix=(), l2_new=()
            ),
            lambda: refstore.swap_committed(
                REPO, name, base="c0", l2_old=(), l1_prefix=(), new_base="c1"
            ),
            lambda: refstore.set_base(REPO, name, expected_base="c0", new_base="c1"),
        ):
            with pytest.raises(InvalidNameError):
                await call()
        assert await refstore.list_refs(REPO) == []
        assert [r.name for r in await refstore.list_repositories()] == [REPO]

    @pytest.mark.parametrize("file_id", BAD_FILE_IDS)
    async def test_invalid_file_ids(self, refstore: RefStore, file_id: str) -> None:
        before = await self.branch(refstore, "main", l1=("f1",))
        for call in (
            lambda: refstore.append_l1(REPO, "main", file_id),
            lambda: refstore.create_ref(REPO, "b2", branch(l1=(file_id,))),
            lambda: refstore.create_ref(REPO, "b2", branch(l2=(file_id,))),
            lambda: refstore.swap_compacted(
                REPO, "main", base="c0", l2_old=(), l1_prefix=("f1",), l2_new=(file_id,)
            ),
            lambda: refstore.swap_compacted(
                REPO, "main", base="c0", l2_old=(file_id,), l1_prefix=(), l2_new=()
            ),
            lambda: refstore.swap_committed(
                REPO, "main", base="c0", l2_old=(), l1_prefix=(file_id,), new_base="c1"
            ),
        ):
            with pytest.raises(InvalidNameError):
                await call()
        assert await refstore.list_refs(REPO) == [("main", before)]

    @pytest.mark.parametrize("commit", ["a b", "x" * 129, "a/b", "é", "c\n"])
    async def test_invalid_commit_ids(self, refstore: RefStore, commit: str) -> None:
        before = await self.branch(refstore, "main")
        for call in (
            lambda: refstore.create_ref(REPO, "b2", branch(base=commit)),
            lambda: refstore.create_ref(REPO, "t", Ref("tag", commit)),
            lambda: refstore.set_base(REPO, "main", expected_base="c0", new_base=commit),
            lambda: refstore.swap_committed(
                REPO, "main", base="c0", l2_old=(), l1_prefix=(), new_base=commit
            ),
            lambda: refstore.swap_compacted(
                REPO, "main", base=commit, l2_old=(), l1_prefix=(), l2_new=()
            ),
        ):
            with pytest.raises(InvalidNameError):
                await call()
        assert await refstore.list_refs(REPO) == [("main", before)]

    async def test_invalid_listing_arguments(self, refstore: RefStore) -> None:
        await self.repo(refstore)
        for call in (
            lambda: refstore.list_refs(REPO, limit=-1),
            lambda: refstore.list_refs(REPO, limit=10**9),
            lambda: refstore.list_refs(REPO, kind="commit"),  # type: ignore[arg-type]
            lambda: refstore.list_refs(REPO, after=3),  # type: ignore[arg-type]
            lambda: refstore.get_refs(REPO, "main"),
        ):
            with pytest.raises(InvalidInputError):
                await call()

    async def test_too_many_file_ids(self, refstore: RefStore) -> None:
        await self.repo(refstore)
        long_ids = tuple(f"{i:05d}" + "x" * 59 for i in range(MAX_FILE_IDS + 1))  # 64 chars each
        with pytest.raises(EntryTooLargeError):
            await refstore.create_ref(REPO, "big", branch(l1=long_ids))
        with pytest.raises(RefNotFoundError):
            await refstore.get_ref(REPO, "big")
        full = branch(l2=long_ids[:10], l1=long_ids[10 : MAX_FILE_IDS - 1])
        await refstore.create_ref(REPO, "big", full)
        at_limit = await refstore.append_l1(REPO, "big", long_ids[MAX_FILE_IDS - 1])
        assert len(at_limit.l1) + len(at_limit.l2) == MAX_FILE_IDS
        with pytest.raises(EntryTooLargeError, match="big"):
            await refstore.append_l1(REPO, "big", "one-too-many")
        assert await refstore.append_l1(REPO, "big", long_ids[500]) == at_limit  # present
        with pytest.raises(EntryTooLargeError, match="big"):
            await refstore.swap_compacted(
                REPO,
                "big",
                base="c0",
                l2_old=long_ids[:10],
                l1_prefix=long_ids[10:15],
                l2_new=long_ids[:16],
            )
        assert await refstore.get_ref(REPO, "big") == at_limit
        shrunk = await refstore.swap_compacted(
            REPO,
            "big",
            base="c0",
            l2_old=long_ids[:10],
            l1_prefix=long_ids[10:15],
            l2_new=long_ids[:15],
        )
        assert len(shrunk.l1) + len(shrunk.l2) == MAX_FILE_IDS
        assert await refstore.get_ref(REPO, "big") == shrunk

    # --- window counters ---------------------------------------------------------------

    async def test_window_counter_counts_within_its_window(self, refstore: RefStore) -> None:
        assert await refstore.read_window_count("auth/k1") == WindowCount(0, 0.0)
        first = await refstore.count_in_window("auth/k1", 30.0)
        assert first.value == 1
        second = await refstore.count_in_window("auth/k1", 30.0)
        assert second == WindowCount(2, first.ends_at)  # the window does not slide
        assert await refstore.read_window_count("auth/k1") == second  # reading adds nothing
        assert await refstore.read_window_count("auth/k1") == second
        other = await refstore.count_in_window("auth/k2", 5.0)  # names are independent
        assert other.value == 1 and other.ends_at < first.ends_at
        assert (await refstore.read_window_count("auth/k1")).value == 2

    async def test_window_counter_restarts_after_its_window(self, refstore: RefStore) -> None:
        first = await refstore.count_in_window("c", 20.0)
        await refstore.count_in_window("c", 20.0)
        await self.pass_counter_time(10.0)
        assert (await refstore.read_window_count("c")).value == 2
        await self.pass_counter_time(10.5)  # past ends_at: ended
        assert await refstore.read_window_count("c") == WindowCount(0, 0.0)
        again = await refstore.count_in_window("c", 20.0)
        assert again.value == 1
        assert again.ends_at == pytest.approx(first.ends_at + 20.5, abs=0.01)
        assert (await refstore.read_window_count("c")).value == 1

    async def test_concurrent_window_counts_add_exactly(self, refstore: RefStore) -> None:
        results = await asyncio.gather(*(refstore.count_in_window("hot", 60.0) for _ in range(40)))
        assert sorted(r.value for r in results) == list(range(1, 41))
        assert len({r.ends_at for r in results}) == 1
        assert (await refstore.read_window_count("hot")).value == 40

    async def test_window_counter_bad_input(self, refstore: RefStore) -> None:
        for bad in (0, -1.0, float("nan"), float("inf"), 86_401, True, "5"):
            with pytest.raises(InvalidInputError):
                await refstore.count_in_window("c", bad)  # type: ignore[arg-type]
        for name in ("", "a\n", "x" * 600):
            with pytest.raises(InvalidNameError):
                await refstore.count_in_window(name, 1.0)
            with pytest.raises(InvalidNameError):
                await refstore.read_window_count(name)
        assert await refstore.read_window_count("c") == WindowCount(0, 0.0)

    # --- leases --------------------------------------------------------------------------

    async def test_lease_take_renew_contend(self, refstore: RefStore) -> None:
        ttl = self.lease_ttl
        assert await refstore.acquire_lease("compact/repo1/main", "worker-a", ttl)
        assert await refstore.acquire_lease("compact/repo1/main", "worker-a", ttl)  # renew
        assert not await refstore.acquire_lease("compact/repo1/main", "worker-b", ttl)
        assert await refstore.acquire_lease("compact/repo1/dev", "worker-b", ttl)  # other key
        await refstore.release_lease("compact/repo1/main", "worker-b")  # not the holder: no-op
        assert not await refstore.acquire_lease("compact/repo1/main", "worker-b", ttl)
        await refstore.release_lease("compact/repo1/main", "worker-a")
        assert await refstore.acquire_lease("compact/repo1/main", "worker-b", ttl)
        assert not await refstore.acquire_lease("compact/repo1/main", "worker-a", ttl)
        await refstore.release_lease("never/taken", "worker-a")

    async def test_lease_expiry_and_renewal(self, refstore: RefStore) -> None:
        ttl = self.lease_ttl
        assert await refstore.acquire_lease("k", "a", ttl)
        await self.pass_time(ttl * 0.6)
        assert await refstore.acquire_lease("k", "a", ttl)  # renewal restarts the clock
        await self.pass_time(ttl * 0.6)
        assert not await refstore.acquire_lease("k", "b", ttl)
        await self.pass_time(ttl * 0.6)
        assert await refstore.acquire_lease("k", "b", ttl)  # expired: taken over
        assert not await refstore.acquire_lease("k", "a", ttl)

    # --- members -------------------------------------------------------------------------

    async def test_members_announce_renew_expire(self, refstore: RefStore) -> None:
        ttl = self.lease_ttl
        assert await refstore.list_members() == []
        a = await refstore.announce_member("daemon-a", "http://127.0.0.1:8001", ttl)
        b = await refstore.announce_member("daemon-b", "http://127.0.0.1:8002", ttl)
        assert [m.name for m in await refstore.list_members()] == ["daemon-a", "daemon-b"]
        assert (await refstore.list_members())[0] == a
        await self.pass_counter_time(ttl * 0.6)
        renewed = await refstore.announce_member("daemon-a", "http://127.0.0.1:8011", ttl)
        assert renewed.expires_at > a.expires_at
        await self.pass_counter_time(ttl * 0.6)  # b's lifetime ended, a renewed in between
        assert await refstore.list_members() == [renewed]
        assert b.expires_at < renewed.expires_at
        # an expired member's record is gone: announcing again starts afresh
        await self.pass_counter_time(ttl * 0.6)
        assert await refstore.list_members() == []
        assert await refstore.list_records("members") == []
        again = await refstore.announce_member("daemon-b", "http://127.0.0.1:8002", ttl)
        assert await refstore.list_members() == [again]

    async def test_members_withdraw(self, refstore: RefStore) -> None:
        ttl = self.lease_ttl * 100
        await refstore.announce_member("daemon-a", "http://127.0.0.1:8001", ttl)
        b = await refstore.announce_member("daemon-b", "http://127.0.0.1:8002", ttl)
        await refstore.withdraw_member("daemon-a")
        await refstore.withdraw_member("daemon-a")  # absent: no-op
        await refstore.withdraw_member("never-there")
        assert await refstore.list_members() == [b]

    async def test_members_prune_foreign_records(self, refstore: RefStore) -> None:
        # a record of the members kind that is not a member is left out and pruned
        await refstore.put_record("members", "junk", b"not json")
        await refstore.put_record("members", "junk2", b'{"address": 1, "expires_at": "x"}')
        m = await refstore.announce_member("daemon-a", "http://127.0.0.1:8001", 60)
        assert await refstore.list_members() == [m]
        assert [n for n, _ in await refstore.list_records("members")] == ["daemon-a"]

    async def test_members_bad_input(self, refstore: RefStore) -> None:
        for call in (
            lambda: refstore.announce_member("", "http://127.0.0.1:1", 1.0),
            lambda: refstore.announce_member("a\n", "http://127.0.0.1:1", 1.0),
            lambda: refstore.announce_member("a", "", 1.0),
            lambda: refstore.announce_member("a", "http://x y", 1.0),
            lambda: refstore.announce_member("a", "h" * 2000, 1.0),
            lambda: refstore.announce_member("a", "http://127.0.0.1:1", 0),
            lambda: refstore.announce_member("a", "http://127.0.0.1:1", float("inf")),
            lambda: refstore.announce_member("a", "http://127.0.0.1:1", 7200),
            lambda: refstore.withdraw_member(""),
        ):
            with pytest.raises(InvalidInputError):
                await call()
        assert await refstore.list_members() == []

    async def test_lease_bad_input(self, refstore: RefStore) -> None:
        for call in (
            lambda: refstore.acquire_lease("", "a", 1.0),
            lambda: refstore.acquire_lease("k", "", 1.0),
            lambda: refstore.acquire_lease("k\n", "a", 1.0),
            lambda: refstore.acquire_lease("k", "a", 0),
            lambda: refstore.acquire_lease("k", "a", float("nan")),
            lambda: refstore.acquire_lease("k", "a", -1),
            lambda: refstore.release_lease("k", ""),
        ):
            with pytest.raises(InvalidInputError):
                await call()

    # --- life cycle ------------------------------------------------------------------------

    async def test_closed(self, refstore: RefStore) -> None:
        await self.branch(refstore)
        async with refstore:
            assert (await refstore.get_ref(REPO, "main")).base == "c0"
        for call in (
            lambda: refstore.get_ref(REPO, "main"),
            lambda: refstore.append_l1(REPO, "main", "f1"),
            lambda: refstore.list_repositories(),
            lambda: refstore.acquire_lease("k", "a", 1.0),
        ):
            with pytest.raises(ClosedError):
                await call()
        await refstore.aclose()  # closing twice is fine

    # --- several ids at once ----------------------------------------------------------------

    @pytest.mark.parametrize("op", ["compacted", "committed"])
    async def test_append_l1_many_in_order_skipping_staged_and_consumed(
        self, refstore: RefStore, op: str
    ) -> None:
        await self.branch(refstore, "main", base="c1", l2=("g1",), l1=("f0",))
        r = await refstore.append_l1_many(REPO, "main", ("a1", "a2", "a3"))
        assert r == branch("c1", ("g1",), ("f0", "a1", "a2", "a3"))
        assert await refstore.get_ref(REPO, "main") == r
        # A re-sent call changes nothing; a later one skips what is staged already.
        assert await refstore.append_l1_many(REPO, "main", ("a1", "a2", "a3")) == r
        r2 = await refstore.append_l1_many(REPO, "main", ("a3", "b1"))
        assert r2.l1 == ("f0", "a1", "a2", "a3", "b1")
        # Consumed ids are never staged again (a retry after an unknown outcome).
        await self.consume(refstore, op, "main", r2.l1)
        newer = await refstore.append_l1(REPO, "main", "f9")
        assert await refstore.append_l1_many(REPO, "main", ("a1", "b1")) == newer
        assert (await refstore.append_l1_many(REPO, "main", ("b1", "c1"))).l1 == ("f9", "c1")
        assert await refstore.append_l1_many(REPO, "main", ()) == await refstore.get_ref(
            REPO, "main"
        )

    async def test_append_l1_many_remembers_no_group(self, refstore: RefStore) -> None:
        """A job's group id stays known however many writer appends follow it."""
        await self.branch(refstore, "main")
        await refstore.append_l1_group(REPO, "main", "job1", ())
        for i in range(MAX_GROUP_IDS + 1):
            await refstore.append_l1_many(REPO, "main", (f"w{i}",))
        before = await refstore.get_ref(REPO, "main")
        assert len(before.l1) == MAX_GROUP_IDS + 1
        # job1 is still known: its (re-sent) commit stages nothing
        assert await refstore.append_l1_group(REPO, "main", "job1", ("z1",)) == before

    async def test_append_l1_many_all_or_none(self, refstore: RefStore) -> None:
        start = await self.branch(refstore, "main", l1=ids("f", MAX_FILE_IDS - 2))
        with pytest.raises(EntryTooLargeError):
            await refstore.append_l1_many(REPO, "main", ids("a", 3))
        assert await refstore.get_ref(REPO, "main") == start
        with pytest.raises(EntryTooLargeError):
            await refstore.append_l1_many(REPO, "main", ids("x", MAX_FILE_IDS + 1))
        await refstore.create_ref(REPO, "v1", Ref("tag", "c0"))
        with pytest.raises(ConflictError):
            await refstore.append_l1_many(REPO, "v1", ("a9",))
        with pytest.raises(InvalidInputError):
            await refstore.append_l1_many(REPO, "main", ("b1", "b1"))
        with pytest.raises(InvalidNameError):
            await refstore.append_l1_many(REPO, "main", ("b1", "x.L1.bWFpbg"))
        with pytest.raises(InvalidInputError):
            await refstore.append_l1_many(REPO, "main", "b1")
        with pytest.raises(RefNotFoundError):
            await refstore.append_l1_many(REPO, "nope", ("b1",))
        with pytest.raises(RepositoryNotFoundError):
            await refstore.append_l1_many("nope", "main", ("b1",))
        assert await refstore.get_ref(REPO, "main") == start

    # --- group append ----------------------------------------------------------------------

    async def test_append_l1_group_order_and_idempotence(self, refstore: RefStore) -> None:
        await self.branch(refstore, "main", base="c1", l2=("g1",), l1=("f0",))
        r = await refstore.append_l1_group(REPO, "main", "job1", ("a1", "a2", "a3"))
        assert r == branch("c1", ("g1",), ("f0", "a1", "a2", "a3"))
        assert await refstore.append_l1_group(REPO, "main", "job1", ("a1", "a2", "a3")) == r
        # Ids already staged are skipped; the rest land in order, after what is there.
        r2 = await refstore.append_l1_group(REPO, "main", "job2", ("a3", "b1", "b2"))
        assert r2.l1 == ("f0", "a1", "a2", "a3", "b1", "b2")
        assert await refstore.get_ref(REPO, "main") == r2
        # An empty group is remembered too.
        assert await refstore.append_l1_group(REPO, "main", "job3", ()) == r2

    @pytest.mark.parametrize("op", ["compacted", "committed"])
    async def test_group_retry_after_its_files_were_consumed(
        self, refstore: RefStore, op: str
    ) -> None:
        """A job re-sending its commit after an unknown outcome never re-stages its files,
        even when a compaction or commit consumed them and newer data came in between."""
        await self.branch(refstore, "main", base="c1")
        await refstore.append_l1_group(REPO, "main", "job1", ("a1", "a2"))
        await self.consume(refstore, op, "main", ("a1", "a2"))
        newer = await refstore.append_l1(REPO, "main", "f9")
        assert await refstore.append_l1_group(REPO, "main", "job1", ("a1", "a2")) == newer
        # A different group naming consumed ids skips them as well.
        assert await refstore.append_l1_group(REPO, "main", "job2", ("a2", "b1")) == branch(
            newer.base, newer.l2, ("f9", "b1")
        )

    async def test_append_l1_group_all_or_none(self, refstore: RefStore) -> None:
        start = await self.branch(refstore, "main", l1=ids("f", MAX_FILE_IDS - 2))
        with pytest.raises(EntryTooLargeError):
            await refstore.append_l1_group(REPO, "main", "big", ids("a", 3))
        assert await refstore.get_ref(REPO, "main") == start
        # Not remembered either: the same group id fits once there is room.
        await refstore.delete_ref(REPO, "main", start)
        await self.branch(refstore, "main")
        assert (await refstore.append_l1_group(REPO, "main", "big", ids("a", 3))).l1 == ids("a", 3)
        with pytest.raises(EntryTooLargeError):
            await refstore.append_l1_group(REPO, "main", "huge", ids("x", MAX_FILE_IDS + 1))
        await refstore.create_ref(REPO, "v1", Ref("tag", "c0"))
        with pytest.raises(ConflictError):
            await refstore.append_l1_group(REPO, "v1", "g", ("a9",))
        with pytest.raises(InvalidInputError):
            await refstore.append_l1_group(REPO, "main", "dup", ("b1", "b1"))
        with pytest.raises(InvalidNameError):
            await refstore.append_l1_group(REPO, "main", "bad group", ("b1",))
        with pytest.raises(InvalidNameError):
            await refstore.append_l1_group(REPO, "main", "g", ("b1", "x.L1.bWFpbg"))
        with pytest.raises(InvalidInputError):
            await refstore.append_l1_group(REPO, "main", "g", "b1")
        with pytest.raises(RefNotFoundError):
            await refstore.append_l1_group(REPO, "nope", "g", ("b1",))
        with pytest.raises(RepositoryNotFoundError):
            await refstore.append_l1_group("nope", "main", "g", ("b1",))
        assert (await refstore.get_ref(REPO, "main")).l1 == ids("a", 3)

    async def test_group_ids_are_trimmed_at_the_cap(self, refstore: RefStore) -> None:
        await self.branch(refstore, "main")
        for i in range(MAX_GROUP_IDS + 1):
            await refstore.append_l1_group(REPO, "main", f"g{i}", ())
        # g0 fell out of the window: its files are appended again (they were never
        # staged here); g1 is still known.
        assert (await refstore.append_l1_group(REPO, "main", "g1", ("x1",))).l1 == ()
        assert (await refstore.append_l1_group(REPO, "main", "g0", ("x0",))).l1 == ("x0",)

    # --- workspaces ------------------------------------------------------------------------

    async def test_stash_and_pop_on_the_same_branch(self, refstore: RefStore) -> None:
        start = await self.branch(refstore, "main", base="c1", l2=("g1", "g2"), l1=("f1", "f2"))
        before = await refstore.move_count(REPO)
        emptied = await refstore.stash_workspace(REPO, "main", "wip", expected=start)
        assert emptied == branch("c1") == await refstore.get_ref(REPO, "main")
        assert await refstore.move_count(REPO) == before + 1
        ws = await refstore.get_workspace(REPO, "wip")
        assert (ws.name, ws.branch, ws.base, ws.l2, ws.l1) == (
            "wip",
            "main",
            "c1",
            ("g1", "g2"),
            ("f1", "f2"),
        )
        assert ws.created_at > 0
        # A retried append of a stashed file does not stage it again.
        assert await refstore.append_l1(REPO, "main", "f2") == emptied
        newer = await refstore.append_l1(REPO, "main", "f3")
        popped = await refstore.pop_workspace(REPO, "wip", "main")
        # L2 files keep living in main's L2 directory: qualified; L1 files are plain.
        assert popped == branch("c1", (), ("f3", *ws.entries[:2], "f1", "f2"))
        assert popped.l1[1:3] == (
            f"g1.L2.{encode_branch('main')}",
            f"g2.L2.{encode_branch('main')}",
        )
        assert newer.l1 == ("f3",)
        assert await refstore.get_ref(REPO, "main") == popped
        assert await refstore.move_count(REPO) == before + 2
        with pytest.raises(WorkspaceNotFoundError):
            await refstore.get_workspace(REPO, "wip")
        assert await refstore.list_workspaces(REPO) == []

    async def test_pop_onto_another_branch(self, refstore: RefStore) -> None:
        start = await self.branch(refstore, "dev", base="c1", l2=("g1",), l1=("f1",))
        await self.branch(refstore, "main", base="c5", l2=("h1",), l1=("e1",))
        await refstore.stash_workspace(REPO, "dev", "wip", expected=start)
        popped = await refstore.pop_workspace(REPO, "wip", "main")
        dev = encode_branch("dev")
        assert popped == branch("c5", ("h1",), ("e1", f"g1.L2.{dev}", f"f1.L1.{dev}"))
        assert [locate_entry("main", "L1", e) for e in popped.l1] == [
            ("main", "L1", "e1"),
            ("dev", "L2", "g1"),
            ("dev", "L1", "f1"),
        ]
        # Stashed again from main and popped back onto dev: each file is named where it
        # lives -- plain again on dev for dev's L1 file.
        await refstore.stash_workspace(REPO, "main", "back", expected=popped)
        ws = await refstore.get_workspace(REPO, "back")
        assert ws.l2 == ("h1",) and ws.l1 == popped.l1
        assert await refstore.pop_workspace(REPO, "back", "dev") == branch(
            "c1",
            (),
            (
                f"h1.L2.{encode_branch('main')}",
                f"e1.L1.{encode_branch('main')}",
                f"g1.L2.{dev}",
                "f1",
            ),
        )
        # Swaps take qualified entries out of L1 like any other; they are not consumed
        # ids (only plain ids are ever appended).
        cur = await refstore.get_ref(REPO, "dev")
        done = await refstore.swap_compacted(
            REPO, "dev", base="c1", l2_old=(), l1_prefix=cur.l1[:3], l2_new=("k1",)
        )
        assert done == branch("c1", ("k1",), ("f1",))

    async def test_stash_conditions(self, refstore: RefStore) -> None:
        start = await self.branch(refstore, "main", l1=("f1",))
        stale = branch(l1=())
        with pytest.raises(ConflictError) as e:
            await refstore.stash_workspace(REPO, "main", "wip", expected=stale)
        assert e.value.found == start
        with pytest.raises(WorkspaceNotFoundError):
            await refstore.get_workspace(REPO, "wip")
        await refstore.stash_workspace(REPO, "main", "wip", expected=start)
        again = await refstore.append_l1(REPO, "main", "f2")
        with pytest.raises(WorkspaceExistsError):
            await refstore.stash_workspace(REPO, "main", "wip", expected=again)
        assert await refstore.get_ref(REPO, "main") == again
        assert (await refstore.get_workspace(REPO, "wip")).l1 == ("f1",)
        await refstore.create_ref(REPO, "v1", Ref("tag", "c0"))
        with pytest.raises(InvalidInputError):
            await refstore.stash_workspace(REPO, "v1", "t", expected=Ref("tag", "c0"))
        with pytest.raises(ConflictError):
            await refstore.stash_workspace(REPO, "v1", "t", expected=branch())
        with pytest.raises(RefNotFoundError):
            await refstore.stash_workspace(REPO, "nope", "t", expected=branch())
        with pytest.raises(InvalidNameError):
            await refstore.stash_workspace(REPO, "main", "a/b", expected=again)
        with pytest.raises(RepositoryNotFoundError):
            await refstore.stash_workspace("nope", "main", "t", expected=branch())
        assert [w.name for w in await refstore.list_workspaces(REPO)] == ["wip"]

    async def test_pop_conditions(self, refstore: RefStore) -> None:
        start = await self.branch(refstore, "main", l1=ids("f", 10))
        await refstore.stash_workspace(REPO, "main", "wip", expected=start)
        await refstore.create_ref(REPO, "v1", Ref("tag", "c0"))
        with pytest.raises(ConflictError):
            await refstore.pop_workspace(REPO, "wip", "v1")
        with pytest.raises(RefNotFoundError):
            await refstore.pop_workspace(REPO, "wip", "nope")
        with pytest.raises(WorkspaceNotFoundError):
            await refstore.pop_workspace(REPO, "nope", "main")
        with pytest.raises(RepositoryNotFoundError):
            await refstore.pop_workspace("nope", "wip", "main")
        full = await self.branch(refstore, "full", l1=ids("x", MAX_FILE_IDS - 5))
        with pytest.raises(EntryTooLargeError):
            await refstore.pop_workspace(REPO, "wip", "full")
        assert await refstore.get_ref(REPO, "full") == full
        assert (await refstore.get_workspace(REPO, "wip")).l1 == ids("f", 10)
        # Files the branch already holds are not added twice (here: a re-created main
        # that names one of them; a retried append would not, as stashed ids count as
        # consumed).
        assert await refstore.append_l1(REPO, "main", "f00003") == branch()
        await refstore.delete_ref(REPO, "main", branch())
        await refstore.create_ref(REPO, "main", branch(l1=("f00003",)))
        popped = await refstore.pop_workspace(REPO, "wip", "main")
        assert popped.l1 == ("f00003", *(f for f in ids("f", 10) if f != "f00003"))

    async def test_list_get_drop_workspaces(self, refstore: RefStore) -> None:
        await self.branch(refstore, "main")
        names = ["b", "a", "c-1", "ü", "a.b"]
        for i, n in enumerate(names):
            await refstore.append_l1(REPO, "main", f"f{i}")
            cur = await refstore.get_ref(REPO, "main")
            await refstore.stash_workspace(REPO, "main", n, expected=cur)
        listed = await refstore.list_workspaces(REPO)
        assert [w.name for w in listed] == sorted(names)
        assert {w.name: w.l1 for w in listed} == {n: (f"f{i}",) for i, n in enumerate(names)}
        assert [w.name for w in await refstore.list_workspaces(REPO, after="a", limit=2)] == [
            "a.b",
            "b",
        ]
        assert await refstore.list_workspaces(REPO, limit=0) == []
        moves = await refstore.move_count(REPO)
        await refstore.drop_workspace(REPO, "b")
        assert await refstore.move_count(REPO) == moves  # a drop moves nothing
        with pytest.raises(WorkspaceNotFoundError):
            await refstore.drop_workspace(REPO, "b")
        with pytest.raises(WorkspaceNotFoundError):
            await refstore.get_workspace(REPO, "b")
        with pytest.raises(RepositoryNotFoundError):
            await refstore.list_workspaces("nope")
        with pytest.raises(RepositoryNotFoundError):
            await refstore.get_workspace("nope", "a")
        with pytest.raises(RepositoryNotFoundError):
            await refstore.drop_workspace("nope", "a")
        with pytest.raises(RepositoryNotFoundError):
            await refstore.move_count("nope")
        # Deleting the repository deletes its workspaces; the move count goes on.
        await refstore.delete_repository(REPO)
        await self.repo(refstore)
        assert await refstore.list_workspaces(REPO) == []
        assert await refstore.move_count(REPO) == moves

    async def test_largest_ref_with_entries_from_elsewhere(self, refstore: RefStore) -> None:
        """MAX_FILE_IDS ids, qualified entries up to MAX_QUALIFIED_BYTES from a branch of
        the longest name, a full consumed tail and all group ids: every backend holds it."""
        await self.repo(refstore)
        far, farther = "b" * 255, "c" * 255
        n_q = MAX_QUALIFIED_BYTES // len(qualify_entry(farther, "L1", "q" * 64))
        qualified = tuple(qualify_entry(farther, "L1", f"{i:04d}" + "q" * 60) for i in range(n_q))
        plain = tuple(f"{i:05d}" + "x" * 59 for i in range(MAX_FILE_IDS - n_q))
        old = tuple(f"{i:05d}" + "o" * 59 for i in range(MAX_FILE_IDS))
        await refstore.create_ref(REPO, far, branch(l1=old))
        for i in range(MAX_GROUP_IDS):
            await refstore.append_l1_group(REPO, far, f"{i:04d}" + "g" * 60, ())
        compacted = await refstore.swap_compacted(
            REPO, far, base="c0", l2_old=(), l1_prefix=old, l2_new=plain
        )
        assert compacted == branch("c0", plain)
        await refstore.create_ref(REPO, "src", branch(l1=qualified))
        src = await refstore.get_ref(REPO, "src")
        await refstore.stash_workspace(REPO, "src", "big", expected=src)
        full = await refstore.pop_workspace(REPO, "big", far)
        assert full == branch("c0", plain, qualified)
        with pytest.raises(EntryTooLargeError):
            await refstore.append_l1(REPO, far, "one-more")
        assert await refstore.append_l1_group(REPO, far, "0000" + "g" * 60, ("x",)) == full
        # Entries from elsewhere beyond MAX_QUALIFIED_BYTES are refused, whatever the
        # id count.
        small = await self.branch(refstore, "small", l1=qualified)
        big = qualify_entry(farther, "L1", "z" * 64)
        await refstore.create_ref(REPO, "src2", branch(l1=(big,)))
        await refstore.stash_workspace(REPO, "src2", "one", expected=branch(l1=(big,)))
        with pytest.raises(EntryTooLargeError):
            await refstore.pop_workspace(REPO, "one", "small")
        assert await refstore.get_ref(REPO, "small") == small

    # --- small records ---------------------------------------------------------------------

    async def test_records(self, refstore: RefStore) -> None:
        value = bytes(range(256)) * 3
        await refstore.put_record("credentials", "AKIA:1", value)
        assert await refstore.get_record("credentials", "AKIA:1") == value
        await refstore.put_record("credentials", "AKIA:1", b"v2")
        assert await refstore.get_record("credentials", "AKIA:1") == b"v2"
        with pytest.raises(RecordExistsError):
            await refstore.put_record("credentials", "AKIA:1", b"v3", if_absent=True)
        assert await refstore.get_record("credentials", "AKIA:1") == b"v2"
        await refstore.put_record("credentials", "b é", b"", if_absent=True)
        await refstore.put_record("settings", "a", b"s")
        assert await refstore.list_records("credentials") == [("AKIA:1", b"v2"), ("b é", b"")]
        assert await refstore.list_records("credentials", after="AKIA:1") == [("b é", b"")]
        assert await refstore.list_records("credentials", limit=1) == [("AKIA:1", b"v2")]
        assert await refstore.list_records("nothing") == []
        await refstore.delete_record("credentials", "AKIA:1")
        with pytest.raises(RecordNotFoundError):
            await refstore.get_record("credentials", "AKIA:1")
        with pytest.raises(RecordNotFoundError):
            await refstore.delete_record("credentials", "AKIA:1")
        assert await refstore.list_records("settings") == [("a", b"s")]
        many = [f"k{i:03d}" for i in range(120)]
        for k in many:
            await refstore.put_record("many", k, k.encode())
        paged: list[str] = []
        after: str | None = None
        while page := await refstore.list_records("many", after=after, limit=50):
            paged += [n for n, _ in page]
            after = page[-1][0]
        assert paged == many

    async def test_record_bad_input(self, refstore: RefStore) -> None:
        with pytest.raises(EntryTooLargeError):
            await refstore.put_record("k", "n", b"x" * (MAX_RECORD_BYTES + 1))
        await refstore.put_record("k", "n", b"x" * MAX_RECORD_BYTES)
        for kind in ("", "K", "a:b", "_x", "a/b"):
            with pytest.raises(InvalidNameError):
                await refstore.put_record(kind, "n", b"")
        for name in ("", "a\nb", "x" * 513):
            with pytest.raises(InvalidNameError):
                await refstore.put_record("k", name, b"")
        with pytest.raises(InvalidInputError):
            await refstore.put_record("k", "n", "text")  # type: ignore[arg-type]
        assert [n for n, _ in await refstore.list_records("k")] == ["n"]

    # --- agreement with the pure rules -----------------------------------------------------

    async def test_random_operations_follow_the_rules(self, refstore: RefStore) -> None:
        """Random operations on a few refs; each result or error matches the pure rules."""
        rng = random.Random(20240607)
        await self.repo(refstore)
        model: dict[str, Ref] = {}
        tails: dict[str, tuple[str, ...]] = {}  # each branch's consumed ids
        fresh = (f"id{i:05d}" for i in itertools.count()).__next__
        for step in range(250):
            name = rng.choice(["main", "dev", "t1"])
            cur = model.get(name)
            tail = tails.get(name, ())
            op, call, rule, consumes = _random_operation(refstore, rng, name, cur, tail, fresh)
            if op == "create":
                if cur is None:
                    await call()
                    model[name] = rule(branch(), ())
                    tails[name] = ()
                else:
                    with pytest.raises(RefExistsError):
                        await call()
                continue
            if cur is None:
                with pytest.raises(RefNotFoundError):
                    await call()
                continue
            try:
                want = rule(cur, tail)
            except LsmError as e:
                with pytest.raises(type(e)) as err:
                    await call()
                assert str(err.value) == str(e)
                assert getattr(err.value, "found", cur) == cur
            else:
                result = await call()
                if op == "delete":
                    del model[name]
                    del tails[name]
                else:
                    assert result == want, (op, name)
                    model[name] = want
                    tails[name] = transitions.consume(tail, consumes)
            if step % 25 == 0:
                assert dict(await refstore.list_refs(REPO)) == model
            elif name in model:
                assert await refstore.get_ref(REPO, name) == model[name]
        assert dict(await refstore.list_refs(REPO)) == model

    # --- concurrency -------------------------------------------------------------------

    async def test_concurrent_appends_each_id_once(self, refstore: RefStore) -> None:
        await self.branch(refstore, "main")
        wanted = ids("f", 100)
        results = await asyncio.gather(*(refstore.append_l1(REPO, "main", f) for f in wanted))
        final = (await refstore.get_ref(REPO, "main")).l1
        assert sorted(final) == list(wanted)
        for f, r in zip(wanted, results, strict=True):
            assert f in r.l1 and set(r.l1) <= set(final)
        # The order the store acknowledged is the order in L1: each result is a prefix.
        for r in results:
            assert final[: len(r.l1)] == r.l1
        again = await asyncio.gather(*(refstore.append_l1(REPO, "main", f) for f in wanted))
        assert all(r.l1 == final for r in again)

    async def test_concurrent_appends_never_lost_by_swaps(self, refstore: RefStore) -> None:
        await self.branch(refstore, "main", base="c0")
        rng = random.Random(7)
        writers, per_writer = 5, 20
        done = asyncio.Event()
        consumed: list[str] = []

        async def writer(w: int) -> None:
            for f in ids(f"w{w}-", per_writer):
                await refstore.append_l1(REPO, "main", f)

        async def swapper() -> int:
            swaps = commit = 0
            while True:
                finished = done.is_set()
                cur = await refstore.get_ref(REPO, "main")
                prefix = cur.l1[: rng.randint(0, len(cur.l1))]
                if rng.random() < 0.5:
                    new = await refstore.swap_compacted(
                        REPO,
                        "main",
                        base=cur.base,
                        l2_old=cur.l2,
                        l1_prefix=prefix,
                        l2_new=(f"l2x{swaps}",),
                    )
                else:
                    commit += 1
                    new = await refstore.swap_committed(
                        REPO,
                        "main",
                        base=cur.base,
                        l2_old=cur.l2,
                        l1_prefix=prefix,
                        new_base=f"c{commit}",
                    )
                consumed.extend(prefix)
                assert new.l1[: len(cur.l1) - len(prefix)] == cur.l1[len(prefix) :]
                swaps += 1
                if finished:
                    return swaps
                await asyncio.sleep(0)

        async def writers_then_done() -> None:
            await asyncio.gather(*(writer(w) for w in range(writers)))
            done.set()

        _, swaps = await asyncio.gather(writers_then_done(), swapper())
        assert swaps >= 1
        final = (await refstore.get_ref(REPO, "main")).l1
        appended = [f for w in range(writers) for f in ids(f"w{w}-", per_writer)]
        assert sorted(consumed + list(final)) == sorted(appended)

    async def test_concurrent_retried_appends_never_restage(self, refstore: RefStore) -> None:
        """Writers re-send appends (as after lost answers) while swaps consume L1: every
        id ends up consumed or in L1, exactly once."""
        await self.branch(refstore, "main", base="c0")
        rng = random.Random(11)
        writers, per_writer = 4, 20
        done = asyncio.Event()
        consumed: list[str] = []

        async def writer(w: int) -> None:
            mine = ids(f"w{w}-", per_writer)
            for i, f in enumerate(mine):
                await refstore.append_l1(REPO, "main", f)
                await refstore.append_l1(REPO, "main", mine[max(0, i - 3)])  # a late retry

        async def swapper() -> None:
            n = 0
            while not done.is_set() or not consumed:
                cur = await refstore.get_ref(REPO, "main")
                prefix = cur.l1[: rng.randint(0, len(cur.l1))]
                n += 1
                if n % 2:
                    await refstore.swap_compacted(
                        REPO, "main", base=cur.base, l2_old=cur.l2, l1_prefix=prefix, l2_new=()
                    )
                else:
                    await refstore.swap_committed(
                        REPO,
                        "main",
                        base=cur.base,
                        l2_old=cur.l2,
                        l1_prefix=prefix,
                        new_base=f"c{n}",
                    )
                consumed.extend(prefix)
                await asyncio.sleep(0)

        async def writers_then_done() -> None:
            await asyncio.gather(*(writer(w) for w in range(writers)))
            done.set()

        await asyncio.gather(writers_then_done(), swapper())
        appended = [f for w in range(writers) for f in ids(f"w{w}-", per_writer)]
        final = await refstore.get_ref(REPO, "main")
        assert sorted(consumed + list(final.l1)) == sorted(appended)
        # Every id retried once more, after all of that: nothing changes.
        again = await asyncio.gather(*(refstore.append_l1(REPO, "main", f) for f in appended))
        assert all(r == final for r in again)
        assert await refstore.get_ref(REPO, "main") == final

    async def test_concurrent_groups_land_whole_and_once(self, refstore: RefStore) -> None:
        """Group appends (each sent twice), single appends and swaps at once: every id
        is staged exactly once, and each group's ids are contiguous and in order."""
        await self.branch(refstore, "main", base="c0")
        done = asyncio.Event()
        consumed: list[str] = []
        groups = {f"job{j}": ids(f"j{j}-", 5) for j in range(8)}

        async def jobs() -> None:
            async def one(g: str) -> None:
                await refstore.append_l1_group(REPO, "main", g, groups[g])
                await refstore.append_l1_group(REPO, "main", g, groups[g])  # a re-send

            await asyncio.gather(*(one(g) for g in groups))

        async def writer() -> None:
            for f in ids("w", 20):
                await refstore.append_l1(REPO, "main", f)

        async def swapper() -> None:
            n = 0
            while not done.is_set():
                cur = await refstore.get_ref(REPO, "main")
                prefix = cur.l1[: len(cur.l1) // 2]
                n += 1
                await refstore.swap_compacted(
                    REPO, "main", base=cur.base, l2_old=cur.l2, l1_prefix=prefix, l2_new=()
                )
                consumed.extend(prefix)
                await asyncio.sleep(0)

        async def all_then_done() -> None:
            await asyncio.gather(jobs(), writer())
            done.set()

        await asyncio.gather(all_then_done(), swapper())
        order = consumed + list((await refstore.get_ref(REPO, "main")).l1)
        expected = sorted([f for g in groups.values() for f in g] + list(ids("w", 20)))
        assert sorted(order) == expected
        for g in groups.values():
            at = order.index(g[0])
            assert tuple(order[at : at + len(g)]) == g

    async def test_concurrent_stash_against_writers_and_swaps(self, refstore: RefStore) -> None:
        """Stashes (retried on conflict), appends and compactions at once: each appended
        id ends up exactly once in a workspace, in L1, or consumed by a compaction."""
        await self.branch(refstore, "main", base="c0")
        done = asyncio.Event()
        consumed: list[str] = []

        async def writer(w: int) -> None:
            for f in ids(f"w{w}-", 15):
                await refstore.append_l1(REPO, "main", f)

        async def stasher() -> None:
            n = 0
            while not done.is_set() or n == 0:
                cur = await refstore.get_ref(REPO, "main")
                try:
                    await refstore.stash_workspace(REPO, "main", f"ws{n}", expected=cur)
                except ConflictError:
                    continue
                n += 1
                await asyncio.sleep(0)

        async def swapper() -> None:
            while not done.is_set():
                cur = await refstore.get_ref(REPO, "main")
                prefix = cur.l1[: len(cur.l1) // 2]
                try:
                    await refstore.swap_compacted(
                        REPO, "main", base=cur.base, l2_old=cur.l2, l1_prefix=prefix, l2_new=()
                    )
                except ConflictError:
                    continue
                consumed.extend(prefix)
                await asyncio.sleep(0)

        async def writers_then_done() -> None:
            await asyncio.gather(*(writer(w) for w in range(3)))
            done.set()

        await asyncio.gather(writers_then_done(), stasher(), swapper())
        stashed = [f for ws in await refstore.list_workspaces(REPO) for f in ws.l1]
        final = list((await refstore.get_ref(REPO, "main")).l1)
        appended = [f for w in range(3) for f in ids(f"w{w}-", 15)]
        assert sorted(stashed + final + consumed) == sorted(appended)

    async def test_concurrent_pops_of_one_workspace(self, refstore: RefStore) -> None:
        start = await self.branch(refstore, "main", l1=ids("f", 3))
        await self.branch(refstore, "dev")
        await refstore.stash_workspace(REPO, "main", "wip", expected=start)
        results = await asyncio.gather(
            *(refstore.pop_workspace(REPO, "wip", b) for b in ("main", "dev", "main", "dev")),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, Ref)]
        assert len(winners) == 1
        assert all(isinstance(r, WorkspaceNotFoundError) for r in results if r not in winners)
        refs = dict(await refstore.list_refs(REPO))
        assert sorted(len(r.l1) for r in refs.values()) == [0, 3]

    async def test_concurrent_compactors_one_wins(self, refstore: RefStore) -> None:
        for round_ in range(5):
            name = f"b{round_}"
            start = await self.branch(refstore, name, base="c1", l2=("g0",), l1=ids("f", 6))
            results = await asyncio.gather(
                *(
                    refstore.swap_compacted(
                        REPO,
                        name,
                        base="c1",
                        l2_old=start.l2,
                        l1_prefix=start.l1[:4],
                        l2_new=(f"out{i}",),
                    )
                    for i in range(4)
                ),
                return_exceptions=True,
            )
            winners = [r for r in results if isinstance(r, Ref)]
            losers = [r for r in results if not isinstance(r, Ref)]
            assert len(winners) == 1 and len(losers) == 3
            assert all(isinstance(e, ConflictError) for e in losers)
            assert all(e.found == winners[0] for e in losers if isinstance(e, ConflictError))
            assert await refstore.get_ref(REPO, name) == winners[0]

    async def test_concurrent_compaction_and_commit(self, refstore: RefStore) -> None:
        for round_ in range(6):
            name = f"b{round_}"
            start = await self.branch(refstore, name, base="c1", l2=("g0",), l1=ids("f", 5))
            compact = refstore.swap_compacted(
                REPO, name, base="c1", l2_old=("g0",), l1_prefix=start.l1[:3], l2_new=("g1",)
            )
            commit = refstore.swap_committed(
                REPO, name, base="c1", l2_old=("g0",), l1_prefix=start.l1[:2], new_base="c2"
            )
            pair = (compact, commit) if round_ % 2 else (commit, compact)
            a, b = await asyncio.gather(*pair, return_exceptions=True)
            outcomes = [r for r in (a, b) if isinstance(r, Ref)]
            errors = [r for r in (a, b) if isinstance(r, BaseException)]
            assert len(outcomes) == 1 and len(errors) == 1
            assert isinstance(errors[0], ConflictError)
            final = await refstore.get_ref(REPO, name)
            assert final == outcomes[0]
            assert final in (
                branch("c1", ("g1",), start.l1[3:]),
                branch("c2", (), start.l1[2:]),
            )

    async def test_concurrent_create_ref_one_wins(self, refstore: RefStore) -> None:
        await self.repo(refstore)
        results = await asyncio.gather(
            *(refstore.create_ref(REPO, "main", branch(base=f"c{i}")) for i in range(8)),
            return_exceptions=True,
        )
        assert sum(r is None for r in results) == 1
        assert all(isinstance(r, RefExistsError) for r in results if r is not None)
        winner = results.index(None)
        assert await refstore.get_ref(REPO, "main") == branch(base=f"c{winner}")

    async def test_concurrent_leases_one_holder(self, refstore: RefStore) -> None:
        got = await asyncio.gather(
            *(refstore.acquire_lease("k", f"w{i}", self.lease_ttl) for i in range(10))
        )
        assert sum(got) == 1


Rule = Callable[[Ref, tuple[str, ...]], Ref]


def _random_operation(
    store: RefStore,
    rng: random.Random,
    name: str,
    cur: Ref | None,
    tail: tuple[str, ...],
    fresh: Callable[[], str],
) -> tuple[str, Callable[[], Awaitable[Any]], Rule, tuple[str, ...]]:
    """A random operation on ``name``, the pure rule it must follow (given the ref and
    its consumed ids), and the L1 prefix it consumes if it succeeds.

    For ``create`` the rule maps anything to the created value; for ``delete`` it
    returns its argument (the model drops the ref).  Conditions hold most of the time
    and are broken on purpose otherwise; appends pick an id in L1 or consumed (a retry)
    now and then.
    """
    where = f"{REPO}/{name}"
    op = rng.choice(["create", "append", "append", "compact", "commit", "set", "delete"])
    base = cur.base if cur and rng.random() < 0.8 else rng.choice(["c0", "c1", "c2"])
    l2_old = cur.l2 if cur and rng.random() < 0.8 else (fresh(),)
    l1 = cur.l1 if cur else ()
    k = rng.randint(0, len(l1) + 1)
    prefix = (*l1[:k], *((fresh(),) if k > len(l1) else ()))
    if prefix and rng.random() < 0.15:
        prefix = (*prefix[:-1], fresh())
    new_base = rng.choice(["c1", "c2", "c3"])
    if op == "create":
        value = Ref("tag", base) if name == "t1" else branch(base, (fresh(),), (fresh(), fresh()))
        return op, lambda: store.create_ref(REPO, name, value), lambda _r, _t: value, ()
    if op == "append":
        p = rng.random()
        fid = (
            rng.choice(tail) if tail and p < 0.3 else rng.choice(l1) if l1 and p < 0.5 else fresh()
        )
        return (
            op,
            lambda: store.append_l1(REPO, name, fid),
            lambda r, t: transitions.append_l1(where, r, fid, t),
            (),
        )
    if op == "compact":
        l2_new = (fresh(),)
        return (
            op,
            lambda: store.swap_compacted(
                REPO, name, base=base, l2_old=l2_old, l1_prefix=prefix, l2_new=l2_new
            ),
            lambda r, _: transitions.swap_compacted(where, r, base, l2_old, prefix, l2_new),
            prefix,
        )
    if op == "commit":
        return (
            op,
            lambda: store.swap_committed(
                REPO, name, base=base, l2_old=l2_old, l1_prefix=prefix, new_base=new_base
            ),
            lambda r, _: transitions.swap_committed(where, r, base, l2_old, prefix, new_base),
            prefix,
        )
    if op == "set":
        return (
            op,
            lambda: store.set_base(REPO, name, expected_base=base, new_base=new_base),
            lambda r, _: transitions.set_base(where, r, base, new_base),
            (),
        )
    expected = cur if cur and rng.random() < 0.7 else branch(base)

    def delete_rule(r: Ref, _: tuple[str, ...]) -> Ref:
        transitions.delete(where, r, expected)
        return r

    return op, lambda: store.delete_ref(REPO, name, expected), delete_rule, ()
