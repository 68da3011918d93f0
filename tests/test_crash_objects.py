"""kill -9 an uploading process at its worst moments (docs/objects.md, "Crashes"):

* between the data upload and the staging of its entry: the acknowledged upload is
  intact, the unacknowledged one has no entry and left exactly one unreferenced data
  object (found by the GC job's orphan scan);
* after the entry's L1 file is uploaded while the data is not yet durable (its
  directory fsync never ends): the entry was not appended, the acknowledged upload is
  intact (local namespace: the store whose data fsyncs overlap the batch);
* in the middle of streaming the data: no entry and no data object (a local temp file
  that no key names; on S3 an incomplete multipart upload, invisible to reads and
  listings), and the path can be uploaded again.

On the embedded RefStore with a local namespace, and on Redis with S3 (moto)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiobotocore.session import get_session

import lsmstore
from lsmstore.testing.servers import MotoServer

CHILD = Path(__file__).parent / "helpers" / "child_uploader.py"


@pytest.fixture(params=["embedded-file", "redis-s3"])
async def setup(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, str, str]]:
    """(refstore URL, storage namespace, S3 bucket or "")."""
    if request.param == "embedded-file":
        yield f"local://{tmp_path / 'refs'}", (tmp_path / "ns").as_uri(), ""
        return
    redis_url: str = request.getfixturevalue("redis_server_url")
    moto: MotoServer = request.getfixturevalue("moto")
    bucket = f"c-{uuid.uuid4().hex[:16]}"
    async with get_session().create_client(
        "s3", endpoint_url=moto.endpoint, region_name="us-east-1"
    ) as client:
        await client.create_bucket(Bucket=bucket)
    ns = f"s3://{bucket}/repo?endpoint_url={moto.endpoint}&part_size={5 << 20}"
    yield f"{redis_url}?prefix=c{uuid.uuid4().hex[:8]}:", ns, bucket


def run_and_kill(args: list[str], *, until: str) -> list[str]:
    """Start the child, read lines until ``until``, SIGKILL the child; the lines."""
    proc = subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line.strip())
            if line.strip() == until:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, lines
    return lines


async def data_keys(repo: lsmstore.Repository) -> list[str]:
    return [m.key async for m in repo.objects.list("data/")]


async def crash_child(refstore: str, ns: str, tmp_path: Path, mode: str, until: str) -> list[str]:
    """Create repository "crash", run the child uploader in ``mode`` and kill -9 it once
    it prints ``until``; its lines."""
    async with lsmstore.connect(refstore, home=str(tmp_path / "home")) as store:
        await store.create_repository("crash", storage_namespace=ns)
    return await asyncio.to_thread(
        run_and_kill, [refstore, str(tmp_path / "child"), "crash", mode], until=until
    )


async def test_kill_between_data_upload_and_staging(
    setup: tuple[str, str, str], tmp_path: Path
) -> None:
    refstore, ns, _ = setup
    lines = await crash_child(refstore, ns, tmp_path, "stage", "staging")
    assert lines[:2] == ["acked", "staging"]
    async with lsmstore.connect(refstore, home=str(tmp_path / "home")) as store:
        repo = await store.get_repository("crash")
        main = repo.branch()
        acked = await main.open("acked")
        assert await acked.read() == b"acknowledged before the crash"
        with pytest.raises(lsmstore.ObjectNotFoundError):
            await main.stat_object("pending")
        keys = await data_keys(repo)
        assert len(keys) == 2  # the pending upload's data: written, referenced by nothing
        base = len(repo.objects.url.rstrip("/")) + 1
        orphan = set(keys) - {acked.stats.physical_address[base:]}
        assert len(orphan) == 1
        assert await repo.objects.get(orphan.pop()) == b"written, never staged"
        await main.upload("pending", b"again")  # nothing blocks a retry
        assert await (await main.open("pending")).read() == b"again"


async def test_kill_while_streaming_data(setup: tuple[str, str, str], tmp_path: Path) -> None:
    refstore, ns, bucket = setup
    lines = await crash_child(refstore, ns, tmp_path, "stream", "chunk 5")
    assert lines[-1] == "chunk 5"
    async with lsmstore.connect(refstore, home=str(tmp_path / "home")) as store:
        repo = await store.get_repository("crash")
        main = repo.branch()
        with pytest.raises(lsmstore.ObjectNotFoundError):
            await main.stat_object("streamed")
        assert await data_keys(repo) == []
        assert [s async for s in main.list_objects()] == []
        if bucket:  # S3: the parts of an incomplete multipart upload, until a lifecycle rule
            async with get_session().create_client(
                "s3", endpoint_url=ns.split("endpoint_url=")[1].split("&")[0],
                region_name="us-east-1",
            ) as client:  # fmt: skip
                uploads = (await client.list_multipart_uploads(Bucket=bucket)).get("Uploads", [])
            assert len(uploads) == 1 and uploads[0]["Key"].startswith("repo/data/")
        else:  # local: a temp file no key names
            leftovers = [p.name for p in (tmp_path / "ns" / "data").iterdir()]
            assert len(leftovers) == 1 and leftovers[0].startswith(".lsm-tmp.")
        await main.upload("streamed", b"after the crash")
        assert await (await main.open("streamed")).read() == b"after the crash"


async def test_kill_while_the_data_is_not_yet_durable(tmp_path: Path) -> None:
    refstore, ns = f"local://{tmp_path / 'refs'}", (tmp_path / "ns").as_uri()
    lines = await crash_child(refstore, ns, tmp_path, "durable", "uploaded")
    assert lines[:2] == ["acked", "uploaded"]
    async with lsmstore.connect(refstore, home=str(tmp_path / "home")) as store:
        repo = await store.get_repository("crash")
        main = repo.branch()
        assert await (await main.open("acked")).read() == b"acknowledged before the crash"
        with pytest.raises(lsmstore.ObjectNotFoundError):
            await main.stat_object("pending")
        assert len(await data_keys(repo)) == 2  # the pending upload's data: referenced by nothing
        await main.upload("pending", b"again")
        assert await (await main.open("pending")).read() == b"again"
