"""No deleter ever deletes a file of a live repository, whatever repositories are
created, deleted and created again on which namespaces (equal, nested and overlapping
ones attempted), by one RefStore or by two RefStores sharing the same directories (two
clusters on one bucket, or a RefStore restored from an old backup).

A random program of steps runs against two Stores, each on its own embedded RefStore,
whose namespaces are directories under one root: create, delete, write (and sometimes
commit), and collect -- garbage collection of every repository and of deleted ones'
staging (:func:`lsmstore.gc.collect_all`) plus the staging sweep of every live
repository (:class:`lsmstore.gc.staging.Sweeper`), then the clock moves past the grace period.
After every collection each live repository must read back every write it
acknowledged, through stores without caches (so a deleted file cannot hide).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import lsmstore
from lsmstore import gc
from lsmstore.gc.retention import Retention
from lsmstore.gc.staging import Sweeper
from lsmstore.testing.refstore_contract import FakeClock
from tests.helpers.clusters import two_clusters

GRACE = 60.0
NAMES = ["rea", "reb", "rec"]
#: Equal, nested (inside another's data/ and _lsm/ areas) and unrelated namespaces.
NAMESPACES = ["n1", "n1/data", "n1/_lsm/staging", "n2"]

Step = tuple[str, int, int, int]

steps = st.lists(
    st.tuples(
        st.sampled_from(["create", "create", "delete", "write", "write", "collect", "collect"]),
        st.integers(0, 1),  # which cluster
        st.integers(0, len(NAMES) - 1),
        st.integers(0, len(NAMESPACES) - 1),
    ),
    min_size=8,
    max_size=30,
)


async def run(program: list[Step], root: Path) -> None:
    clock = FakeClock(time.time())
    #: What each cluster's live repositories acknowledged: name -> key -> value.
    live: list[dict[str, dict[str, bytes]]] = [{}, {}]
    sweeper = Sweeper(GRACE, clock=clock)
    serial = 0
    async with two_clusters(root, clock) as stores:
        for op, c, n, ns in program:
            store, name = stores[c], NAMES[n]
            serial += 1
            if op == "create":
                uri = (root / "data" / NAMESPACES[ns]).as_uri()
                try:
                    await store.create_repository(name, storage_namespace=uri)
                except lsmstore.AlreadyExistsError:
                    continue  # the name is taken, or the namespace is in use
                live[c][name] = {}
            elif op == "delete" and name in live[c]:
                await store.delete_repository(name)
                del live[c][name]
            elif op == "write" and name in live[c]:
                repo = await store.get_repository(name)
                key, value = f"k{serial}", f"v{serial}".encode()
                await repo.branch("main").put(key, value)
                await repo.branch("main").flush()
                live[c][name][key] = value
                if serial % 3 == 0:
                    await repo.branch("main").commit(f"commit {serial}")
            elif op == "collect":
                for i, s in enumerate(stores):
                    await gc.collect_all(
                        s.refstore, lambda _: Retention(default_days=0), grace_s=GRACE, clock=clock
                    )
                    for repo_name in live[i]:
                        repo = await s.get_repository(repo_name)
                        await sweeper.sweep(s.refstore, repo_name, repo.objects)
                clock.now += GRACE + 1
                await check(stores, live)
        clock.now += GRACE + 1
        await check(stores, live)


async def check(stores: list[lsmstore.Store], live: list[dict[str, dict[str, bytes]]]) -> None:
    for store, repos in zip(stores, live, strict=True):
        for name, written in repos.items():
            main = (await store.get_repository(name)).branch("main")
            for key, value in written.items():
                assert await main.get(key) == value, (name, key)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(steps)
# A namespace in the staging area of a deleted repository whose leftover staging is
# still collected (creation now refuses any namespace with an ``_lsm`` segment).
@example(
    [
        ("create", 0, 0, 0),
        ("create", 0, 0, 0),
        ("create", 0, 0, 0),
        ("collect", 0, 0, 0),
        ("delete", 0, 0, 0),
        ("create", 0, 1, 2),
        ("collect", 0, 0, 0),
        ("collect", 0, 0, 0),
    ]
)
def test_no_deleter_deletes_a_file_of_a_live_repository(program: list[Step]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(program, Path(tmp)))


def test_two_clusters_on_one_directory_keep_their_files() -> None:
    """The case the random programs must be able to find, spelled out."""
    program: list[Step] = [
        ("create", 0, 0, 0),
        ("write", 0, 0, 0),
        ("write", 0, 0, 0),
        ("create", 1, 1, 0),  # the other cluster, on the same namespace
        ("create", 1, 2, 1),  # ... and inside its data/ area
        ("write", 1, 1, 0),
        ("collect", 0, 0, 0),
        ("collect", 0, 0, 0),
        ("collect", 0, 0, 0),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(program, Path(tmp)))
