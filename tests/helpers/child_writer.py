"""A writer process for the multi-process and crash tests.

python child_writer.py HOME REPO serve     commands on stdin, one per line:
    put KEY VALUE  -> "ok"          (after the write is acknowledged)
    get KEY        -> "value V" | "missing"
python child_writer.py HOME REPO flood N   N puts from 50 tasks; prints
    "acked KEY VALUE" as each is acknowledged (stdout flushed per line)
"""

from __future__ import annotations

import asyncio
import sys

import uvloop

import lsmstore


async def serve(store: lsmstore.Store, repo: str) -> None:
    branch = (await store.get_repository(repo)).branch("main")
    loop = asyncio.get_running_loop()
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if not line or line == "quit":
            return
        cmd, key, *rest = line.split(" ")
        if cmd == "put":
            await branch.put(key, rest[0].encode())
            print("ok", flush=True)
        elif cmd == "get":
            try:
                print("value", (await branch.get(key)).decode(), flush=True)
            except lsmstore.NotFoundError:
                print("missing", flush=True)


async def flood(store: lsmstore.Store, repo: str, n: int) -> None:
    branch = (await store.get_repository(repo)).branch("main")
    out = sys.stdout

    async def one(t: int) -> None:
        for i in range(t, n, 50):
            key, value = f"flood/{i:06d}", f"v{i}"
            await branch.put(key, value.encode())
            out.write(f"acked {key} {value}\n")
            out.flush()

    await asyncio.gather(*(one(t) for t in range(50)))
    await asyncio.Event().wait()  # stay up until killed


async def main() -> None:
    home, repo, mode, *args = sys.argv[1:]
    async with lsmstore.connect(home=home, batch_interval_ms=5) as store:
        if mode == "serve":
            await serve(store, repo)
        else:
            await flood(store, repo, int(args[0]))


if __name__ == "__main__":
    uvloop.run(main())
