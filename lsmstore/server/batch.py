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

``kv`` entries are checked and built exactly as the embedded ``Branch.put`` builds its
records (:func:`lsmstore.staging.keys.make_record`: same key/value bounds, identity
SHA-256 of the value unless given); the value is stored inline, no data object is
written and nothing is looked up, so a raw overwrite of a staged object's entry leaves
that object's data to the GC job's orphan scan (as ``link_many`` does).  ``link``
entries look nothing up either, for the same reason; ``put`` and ``delete`` entries
record the staged data they replace as garbage candidates, as a single upload does.

Every entry is checked before anything happens (400 names the first bad one, 413 a
value over ``max_value_bytes``; nothing is written).  Then the data of the ``put``
entries is written to fresh ``data/<id>`` objects (concurrently), and every entry's
record goes to the branch's writer as *one* write: they land in one L1 file, become
visible together, and the request is answered once that file is durable and appended.
A failure after data was written deletes the data (definite failure) or records it as
a garbage candidate (unknown outcome), as a single upload does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import time
from collections.abc import Sequence
from typing import Any

import msgpack
import orjson

from lsmstore import layout
from lsmstore.client import Branch
from lsmstore.errors import EntryTooLargeError, LsmError, ObjectNotFoundError, UnavailableError
from lsmstore.gc.data import record_candidates
from lsmstore.graveler.record import Record, RecordTuple
from lsmstore.objects import AddressType, ObjectEntry
from lsmstore.objects.entry import decode_entry
from lsmstore.objects.rules import check_content_type, check_metadata, check_path
from lsmstore.refstore.names import check_ref_name
from lsmstore.server.context import Context
from lsmstore.server.errors import ApiError, bad_request
from lsmstore.server.http import Request, Response, json_response
from lsmstore.server.routes.schemas import ref
from lsmstore.server.routing import Route
from lsmstore.staging.files import new_file_id
from lsmstore.staging.keys import check_key, make_record
from lsmstore.staging.pending import Staged
from lsmstore.storage.base import PutMode
from lsmstore.types import ObjectLink

MSGPACK = "application/msgpack"
_ENTRY = {"type": "array", "minItems": 2, "items": {}}
SCHEMA = {"type": "array", "items": _ENTRY}


def decode_body(data: bytes, content_type: str) -> list[Any]:
    media = content_type.split(";")[0].strip().lower()
    try:
        if media in (MSGPACK, "application/x-msgpack"):
            doc = msgpack.unpackb(data, raw=False, strict_map_key=True)
        elif media in ("application/json", ""):
            doc = orjson.loads(data)
        else:
            raise bad_request(f"batch body must be {MSGPACK} or application/json")
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise bad_request(f"malformed batch body: {e}") from None
    if not isinstance(doc, list):
        raise bad_request("batch body must be an array of entries")
    return doc


def _opt(entry: Sequence[Any], i: int) -> Any:
    return entry[i] if len(entry) > i else None


class _Put:
    __slots__ = ("content_type", "data", "key", "metadata", "path")

    def __init__(self, path: str, key: bytes, data: bytes, ctype: str, md: dict[str, str]):
        self.path, self.key, self.data, self.content_type, self.metadata = (
            path, key, data, ctype, md,
        )  # fmt: skip


def _b64(value: object, what: str) -> object:
    """A JSON body's base64 text as bytes (anything else is left for the checks)."""
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error:
            raise bad_request(f"{what} must be base64 in JSON") from None
    return value


async def apply(branch: Branch, entries: list[Any], json_body: bool) -> int:
    """Check and stage ``entries`` as one write; the number of entries."""
    repo = branch.repository
    cfg = repo.store.config
    max_key, max_value = cfg.max_key_bytes, cfg.max_value_bytes
    now = branch._now()
    stager = branch._link_stager(now)
    records: list[Staged | RecordTuple | None] = []
    add = records.append
    puts: list[tuple[int, _Put]] = []
    news: dict[int, str | None] = {}  # put/delete entries: index -> data address staged
    for n, entry in enumerate(entries):
        try:
            if type(entry) is not list or len(entry) < 2 or type(entry[0]) is not str:
                raise bad_request("an entry is an array [op, path, ...]")
            op = entry[0]
            if op == "kv":  # the hot path: one make_record, as the embedded put
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
                add(make_record(key, value, ident, max_key, max_value, defer_identity=True))
                continue
            if op == "kvdelete":
                if len(entry) != 2:
                    raise bad_request("kvdelete is [kvdelete, key]")
                add(Record(check_key(entry[1], max_key), b"", None))
                continue
            path = entry[1]
            key = check_path(path, max_key)
            if op == "link":  # looks nothing up, as link_many (docs/decisions.md)
                if not 5 <= len(entry) <= 8:
                    raise bad_request("link is [link, path, address, size, checksum, "
                                      "content_type?, metadata?, mtime?]")  # fmt: skip
                link = ObjectLink(path, entry[2], entry[3], entry[4], _opt(entry, 5),
                                  _opt(entry, 6), _opt(entry, 7))  # fmt: skip
                add(stager.stage(key, link)[0])
                continue
            news[len(records)] = None
            if op == "put":
                if not 3 <= len(entry) <= 5:
                    raise bad_request("put is [put, path, data, content_type?, metadata?]")
                data = _b64(entry[2], "put data") if json_body else entry[2]
                if not isinstance(data, bytes):
                    raise bad_request("put data must be bytes (base64 in JSON)")
                ctype = check_content_type(_opt(entry, 3))
                md = check_metadata(_opt(entry, 4))
                puts.append((len(records), _Put(path, key, data, ctype, md)))
                records.append(None)
            elif op == "delete":
                if len(entry) != 2:
                    raise bad_request("delete is [delete, path]")
                records.append(Record(key, b"", None))
            else:
                raise bad_request(f"unknown op {op!r} (kv, kvdelete, link, put, delete)")
        except EntryTooLargeError as e:
            raise ApiError(413, f"entry {n}: {e}") from None
        except LsmError as e:
            raise bad_request(f"entry {n}: {e}") from None
        except Exception as e:
            if getattr(e, "status", None) == 400:
                raise bad_request(f"entry {n}: {getattr(e, 'message', e)}") from None
            raise
    if not records:
        return 0
    written: list[str] = []

    async def write_data(i: int, p: _Put) -> None:
        data_key = layout.data_key(new_file_id(repo.store.clock))
        await repo.objects.put(data_key, p.data, PutMode.CREATE)
        written.append(data_key)
        md5 = hashlib.md5(p.data).hexdigest()
        e = ObjectEntry(data_key, AddressType.RELATIVE, len(p.data), md5, now[0], now[1],
                        p.content_type, p.metadata)  # fmt: skip
        records[i] = branch._record(p.key, e)
        news[i] = data_key

    try:
        if puts:
            await asyncio.gather(*(write_data(i, p) for i, p in puts))
            final = [r for r in records if r is not None]  # every put has its record now
        else:
            final = records  # type: ignore[assignment]  # no put: no hole
        looked = list(news)
        olds = await _previous_data(branch, [final[i][0] for i in looked]) if looked else []
        await branch._w().write_staged(final)
    except BaseException as e:
        unknown = not isinstance(e, LsmError) or (
            isinstance(e, UnavailableError) and e.outcome_unknown
        )
        if written:
            if unknown:
                await asyncio.shield(record_candidates(
                    repo.objects, repo.name, branch.name, [("", k) for k in written],
                    reason="stage-unknown", clock=repo.store.clock,
                ))  # fmt: skip
            else:
                for k in written:
                    try:
                        await asyncio.shield(repo.objects.delete(k))
                    except Exception:
                        pass
        raise
    if looked:
        await branch._replaced(
            [(final[i][0], old, news[i]) for i, old in zip(looked, olds, strict=True)],
            "overwritten",
        )
    return len(final)


async def _previous_data(branch: Branch, keys: list[bytes]) -> list[str | None]:
    """Per key, the data address of its *staged* object entry (replaced uncommitted
    data: a garbage candidate once the batch lands), else None -- what the object
    layer's per-key ``_previous`` finds, from one snapshot of the branch and without a
    task per key: warm keys are answered without awaiting."""
    try:
        snap = await branch._view.snapshot()
        out: list[str | None] = []
        for key in keys:
            found = snap.lookup_cached(key)
            if found is None:
                found = await snap.lookup(key)
            rec, staged = found
            out.append(_data_address(rec.value if rec is not None else None, staged))
        return out
    except ObjectNotFoundError:  # a staging file collected under the snapshot
        return [old for _, old in await asyncio.gather(*(branch._previous(k) for k in keys))]


def _data_address(value: bytes | None, staged: bool) -> str | None:
    if value is None or not staged:
        return None
    try:
        entry = decode_entry(value, "")
    except LsmError:
        return None  # a raw value: no data of ours behind it
    if entry.is_relative() and entry.address.startswith(layout.DATA):
        return entry.address
    return None


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
        entries = decode_body(await request.body(), content_type)
        started = time.perf_counter()
        async with ctx.locks.shared(repo.name, name):
            in_flight.inc()
            try:
                n = await apply(branch, entries, not content_type.startswith(MSGPACK))
            finally:
                in_flight.dec()
        metrics.batch_records.observe(n)
        seconds.observe(time.perf_counter() - started)
        return json_response({"entries": n})

    return [
        Route("POST", path, batch, "lsmBatch", "write", "lsm",
              body=((MSGPACK, SCHEMA), ("application/json", SCHEMA)),
              responses={200: ref("BatchResult")}, errors=(404,)),
    ]  # fmt: skip
