"""Raw key/value reads under ``/api/v1/lsm`` (docs/server.md, "Raw key/value"): the
embedded ``Ref`` reads ``get``, ``stat`` (``exists``) and ``list`` of any ref, for
records written with ``put`` (the batch endpoint's ``kv`` entries) or anything else.

A record is returned as stored: ``get`` of an object's path answers its entry's bytes,
as the embedded ``get`` does.  Keys are bytes: by default the ``key``, ``prefix``,
``after`` and ``delimiter`` parameters and the keys of an answer are UTF-8 text (a
listing that meets a key that is not UTF-8 answers 400); with ``encoding=base64`` all
of them are base64url (RFC 4648 section 5, padding optional), so every key can be
named.  Identities are hex.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from lsmstore.client import Ref
from lsmstore.server import pagination
from lsmstore.server.context import Context
from lsmstore.server.errors import bad_request
from lsmstore.server.http import Request, Response, json_response
from lsmstore.server.routes.schemas import ref
from lsmstore.server.routing import Param, Route
from lsmstore.types import Entry

BASE = "/api/v1/lsm/repositories/{repository}/refs/{ref}/kv"
_OCTETS = {"type": "string", "format": "binary"}
#: Response header of a value read: whether its newest record is staged.
STAGED = "X-Lsm-Staged"
ENCODING = Param(
    "encoding",
    {"type": "string", "enum": ["text", "base64"], "default": "text"},
    description="how keys are written in the parameters and the answer",
)
KEY = Param("key", {"type": "string", "minLength": 1}, required=True, description="the key")


def _base64(request: Request) -> bool:
    enc = request.arg("encoding", "text") or "text"
    if enc not in ("text", "base64"):
        raise bad_request(f"query parameter 'encoding' must be text or base64, not {enc!r}")
    return enc == "base64"


def _key_arg(request: Request, name: str, b64: bool) -> bytes | None:
    value = request.arg(name)
    if value is None:
        return None
    if not b64:
        return value.encode("utf-8")  # the query is valid UTF-8 (Request.query)
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"query parameter {name!r} is not base64url") from None


def _show(key: bytes, b64: bool) -> str:
    if b64:
        return base64.urlsafe_b64encode(key).decode("ascii").rstrip("=")
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request(f"key {key[:64]!r} is not valid UTF-8: use encoding=base64") from None


def _entry_json(e: Entry, b64: bool) -> dict[str, Any]:
    return {
        "key": _show(e.key, b64),
        "size_bytes": e.size,
        "identity": e.identity.hex(),
        "common_prefix": e.common_prefix,
    }


def routes(ctx: Context) -> list[Route]:
    async def _ref(request: Request) -> Ref:
        repo = await ctx.repository(request.params["repository"])
        return repo.ref(request.params["ref"])

    def _key(request: Request, b64: bool) -> bytes:
        key = _key_arg(request, "key", b64)
        if key is None:
            raise bad_request("missing query parameter 'key'")
        return key

    async def get_value(request: Request) -> Response:
        b64 = _base64(request)
        key = _key(request, b64)
        value, st = await (await _ref(request)).lookup(key)
        headers = {"ETag": f'"{st.identity.hex()}"', STAGED: "true" if st.staged else "false"}
        return Response(200, value, "application/octet-stream", headers)

    async def stat_value(request: Request) -> Response:
        b64 = _base64(request)
        key = _key(request, b64)
        st = await (await _ref(request)).stat(key)
        return json_response(
            {"key": _show(st.key, b64), "size_bytes": st.size, "identity": st.identity.hex(),
             "staged": st.staged}
        )  # fmt: skip

    async def list_values(request: Request) -> Response:
        b64 = _base64(request)
        limit = pagination.amount(request)
        prefix = _key_arg(request, "prefix", b64) or b""
        after = _key_arg(request, "after", b64) or None
        delimiter = _key_arg(request, "delimiter", b64) or None
        r = await _ref(request)
        found = [e async for e in r.list(prefix, after=after, limit=limit + 1,
                                         delimiter=delimiter)]  # fmt: skip
        body = pagination.page(
            found, limit, lambda e: _show(e.key, b64), lambda e: _entry_json(e, b64)
        )
        return json_response(body)

    return [
        Route("GET", BASE, get_value, "lsmGetValue", "read", "lsm", query=(KEY, ENCODING),
              responses={200: _OCTETS}, produces="application/octet-stream",
              errors=(404,), response_headers=("ETag", STAGED)),
        Route("GET", BASE + "/stat", stat_value, "lsmStatValue", "read", "lsm",
              query=(KEY, ENCODING), responses={200: ref("KvStat")}, errors=(404,)),
        Route("GET", BASE + "/ls", list_values, "lsmListValues", "read", "lsm",
              query=(*pagination.PARAMS, Param("delimiter", {"type": "string"}), ENCODING),
              responses={200: ref("KvEntryList")}, errors=(404,)),
    ]  # fmt: skip
