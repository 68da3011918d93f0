"""The batch write endpoint (docs/server.md, "Batch write"): many kv / link / put /
delete entries, one acknowledgement for the lot.

Body: a top-level array of positional entries, as msgpack (``application/msgpack``,
bytes as bytes) or JSON (``application/json``: ``put`` data, ``kv`` values and
identities base64, ``kv`` keys text)::

    ["kv", key, value, identity?]        a raw record (the client's ``put``)
    ["kvdelete", key]                    a raw tombstone (the client's ``delete``)
    ["link", path, physical_address, size, checksum, content_type?, metadata?, mtime?]
    ["put", path, data, content_type?, metadata?]
    ["delete", path]
    ["copy", src_path, dest_path, src_ref?]

The entries go into one :class:`~lsmstore.operations.batch.WriteBatch` (its docstring
has the rules: how ``kv`` and ``link`` entries look nothing up, how ``put`` and
``delete`` entries record replaced staged data, the data-object life cycle), applied as
one write: the request is answered once its L1 file is durable and appended.  Every
entry is checked before anything happens (400 names the first bad one, 413 a value over
``max_value_bytes``, with the error's type; nothing is written).  ``If-None-Match: *``
makes every ``link`` and ``put`` entry create-only (412, ObjectExistsError, when a path
holds an object; nothing is written).
"""

from __future__ import annotations

import asyncio
import binascii
import time
from collections.abc import Sequence
from typing import Any

from lsmstore.client import Branch
from lsmstore.errors import LsmError
from lsmstore.operations.batch import WriteBatch
from lsmstore.refstore.names import check_ref_name
from lsmstore.server.batch_body import MSGPACK, SLICE, decode_batch
from lsmstore.server.context import Context
from lsmstore.server.errors import ApiError, bad_request, status_of, type_of
from lsmstore.server.http import Request, Response, json_response
from lsmstore.server.routes.schemas import ref
from lsmstore.server.routing import Route

_a2b = binascii.a2b_base64
_ENTRY = {"type": "array", "minItems": 2, "items": {}}
SCHEMA = {"type": "array", "items": _ENTRY}


def _opt(entry: Sequence[Any], i: int) -> Any:
    return entry[i] if len(entry) > i else None


def _b64(value: object, what: str) -> object:
    """A JSON body's base64 text as bytes (anything else is left for the checks)."""
    if isinstance(value, str):
        try:
            return _a2b(value, strict_mode=True)
        except ValueError:  # binascii.Error, or text that is not ASCII
            raise bad_request(f"{what} must be base64 in JSON") from None
    return value


async def build(branch: Branch, entries: list[Any], json_body: bool, if_absent: bool) -> WriteBatch:
    """The :class:`WriteBatch` of a decoded body; ApiError (400/413, with the error's
    type) naming the first bad entry.  Other requests run between slices of
    :data:`~lsmstore.server.batch_body.SLICE` entries."""
    batch = branch.batch()
    kv, link = batch.kv, batch.link  # bound once: called per entry
    kinds = (tuple, list)  # msgpack and the JSON scanner give tuples, orjson lists
    for at in range(0, len(entries), SLICE):
        if at:
            await asyncio.sleep(0)  # other requests run between slices
        for n, entry in enumerate(entries[at : at + SLICE], at):
            try:
                if type(entry) not in kinds or len(entry) < 2 or type(entry[0]) is not str:
                    raise bad_request("an entry is an array [op, path, ...]")
                op = entry[0]
                if op == "kv":  # the hot path
                    if len(entry) == 3:
                        key, value, ident = entry[1], entry[2], None
                    elif len(entry) == 4:
                        key, value, ident = entry[1], entry[2], entry[3]
                    else:
                        raise bad_request("kv is [kv, key, value, identity?]")
                    if json_body:
                        value = _b64(value, "kv value")
                        if ident is not None:
                            ident = _b64(ident, "kv identity")
                    kv(key, value, ident)
                elif op == "kvdelete":
                    if len(entry) != 2:
                        raise bad_request("kvdelete is [kvdelete, key]")
                    batch.kv_delete(entry[1])
                elif op == "link":
                    if len(entry) == 5:  # the common link: no optional field
                        link(entry[1], entry[2], entry[3], entry[4], if_absent=if_absent)
                        continue
                    if not 5 <= len(entry) <= 8:
                        raise bad_request("link is [link, path, address, size, checksum, "
                                          "content_type?, metadata?, mtime?]")  # fmt: skip
                    link(entry[1], entry[2], entry[3], entry[4], _opt(entry, 5), _opt(entry, 6),
                         _opt(entry, 7), if_absent=if_absent)  # fmt: skip
                elif op == "put":
                    if not 3 <= len(entry) <= 5:
                        raise bad_request("put is [put, path, data, content_type?, metadata?]")
                    data = _b64(entry[2], "put data") if json_body else entry[2]
                    if not isinstance(data, bytes):
                        raise bad_request("put data must be bytes (base64 in JSON)")
                    batch.put(entry[1], data, _opt(entry, 3), _opt(entry, 4), if_absent=if_absent)
                elif op == "delete":
                    if len(entry) != 2:
                        raise bad_request("delete is [delete, path]")
                    batch.delete(entry[1])
                elif op == "copy":
                    if not 3 <= len(entry) <= 4:
                        raise bad_request("copy is [copy, src_path, dest_path, src_ref?]")
                    batch.copy(entry[1], entry[2], _opt(entry, 3))
                else:
                    raise bad_request(f"unknown op {op!r} (kv, kvdelete, link, put, delete, copy)")
            except LsmError as e:
                raise ApiError(status_of(e), f"entry {n}: {e}", kind=type_of(e)) from None
            except ApiError as e:
                raise ApiError(e.status, f"entry {n}: {e.message}", kind=e.kind) from None
    return batch


def routes(ctx: Context, path: str) -> list[Route]:
    metrics = ctx.metrics
    in_flight = metrics.writes_in_flight
    seconds = metrics.flush_seconds.labels("lsmBatch")  # looked up once, not per request

    async def batch(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        branch = repo.branch(name)
        await ctx.check_branch(branch)  # 404 before the body, not per request
        content_type = request.headers.get("content-type", "")
        if_absent = request.headers.get("if-none-match", "").strip() == "*"
        entries = await decode_batch(
            await request.body(), content_type,
            max_entries=ctx.config.server_batch_max_entries,
            max_values=ctx.config.server_batch_max_values,
        )  # fmt: skip
        write = await build(branch, entries, not content_type.startswith(MSGPACK), if_absent)
        started = time.perf_counter()
        in_flight.inc()
        try:
            n = await write.apply()
        finally:
            in_flight.dec()
        metrics.batch_records.observe(n)
        seconds.observe(time.perf_counter() - started)
        return json_response({"entries": n})

    return [
        Route("POST", path, batch, "lsmBatch", "write", "lsm",
              body=((MSGPACK, SCHEMA), ("application/json", SCHEMA)),
              responses={200: ref("BatchResult")}, errors=(404, 412, 413), forward=True),
    ]  # fmt: skip
