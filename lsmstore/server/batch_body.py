"""Decoding a batch request body within bounds (docs/security.md, "Limits").

A batch body (docs/server.md, "Batch write") is a top-level array of entries.  Its
size in bytes is bounded where it is read; this module bounds what it decodes to, so
that a small body cannot become a large heap:

* at most ``max_entries`` entries: a msgpack body's array header is read first and
  refused (413) before any entry is decoded;
* at most ``max_values`` values in all -- entries, their fields, metadata keys and
  values -- counted while decoding (msgpack: the containers' hooks, so at most one
  bounded container is decoded past the limit; JSON: every ``[``, ``{``, ``,`` and ``:`` of
  the text counted before it is parsed, an upper bound of its values; a text shorter
  than ``max_values`` bytes has fewer).  Past it: 413.

Either body is decoded in slices of :data:`SLICE` entries with the event loop free
between them, so other requests (a health probe) are served while a large batch is
decoded: msgpack from one streaming unpacker, JSON an entry at a time from the
standard library's C scanner (one ``orjson.loads`` of a maximal body held the loop
for 0.1-0.3 s) -- except a body of at most :data:`_ONE_STEP_BYTES`, which orjson
parses in one step (a 1,000-link request: 0.25 ms against the scanner's 1.1 ms) and
whose entries are orjson's lists as they are.  The JSON path refuses what orjson
refused: ``NaN``, ``Infinity``, a number out of a float's range, a lone UTF-16
surrogate escape (a body with a
surrogate escape -- rare: JSON encoders write UTF-8 unless told to write ASCII -- is
checked by orjson as a whole first, in one step).

Entries are tuples, but for the small JSON bodies parsed in one step: a tuple of
strings and bytes is untracked by CPython's cyclic collector at its first young
collection, so a maximal batch's 100,000 entries are not walked again by every older
collection while the batch is built and written (lists were, the full collections
taking 20-50 ms each; BENCHMARKS.md, "Connection limits and probes during maximal
batches").  A body parsed in one step is at most 256 KiB (a 1,000-kv request is
160 KB), and copying its entries into tuples cost more than it saved: about a sixth
of the server's CPU for a 1,000-kv request, in the copies and the collections they
caused.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import json.scanner
import math
import re
from collections.abc import Callable
from typing import Any

import msgpack
import orjson

from lsmstore.objects.rules import MAX_METADATA_ENTRIES
from lsmstore.server.errors import ApiError, bad_request

MSGPACK = "application/msgpack"
#: Entries decoded (and checked) between two turns of the event loop: at most a few
#: milliseconds of the loop's time on a loaded machine (4,096 held it 20-40 ms there).
SLICE = 1024
#: The longest array inside an entry (an entry has at most 8 fields).
_MAX_FIELDS = 64
#: The JSON characters counted as values (see :func:`_json_values_over`).
_VALUE_BYTES = b"[{,:"
#: Bytes of a JSON body counted in one step.
_COUNT_SLICE = 1 << 18
#: A JSON body up to this size is parsed in one step (orjson: ~0.5 ms for 256 KiB, a
#: request of ~1,800 links).
_ONE_STEP_BYTES = 1 << 18


class _TooMany(Exception):
    """The value budget ran out (raised from a decoding hook)."""


def _too_many_entries(n: int, max_entries: int) -> ApiError:
    return ApiError(413, f"batch of {n} entries: at most {max_entries} per request")


def _too_many_values(max_values: int) -> ApiError:
    return ApiError(413, f"batch body decodes to more than {max_values} values")


async def decode_batch(
    data: bytes, content_type: str, *, max_entries: int, max_values: int
) -> list[Any]:
    """The entries of a batch body, tuples -- or lists, from a JSON body parsed in one
    step (module docstring) -- still unchecked: the batch endpoint checks each; 400 for
    a malformed body or another media type, 413 past the bounds."""
    media = content_type.split(";")[0].strip().lower()
    if media in (MSGPACK, "application/x-msgpack"):
        return await _msgpack_entries(data, max_entries, max_values)
    if media in ("application/json", ""):
        return await _json_entries(data, max_entries, max_values)
    raise bad_request(f"batch body must be {MSGPACK} or application/json")


def _json_values_over(data: bytes, max_values: int) -> bool:
    """Whether the JSON text has ``max_values`` or more of the characters that open or
    separate values (``[``, ``{``, ``,``, ``:``): an upper bound of the values it
    decodes to.  Each is one byte, so a shorter text has fewer (the common batch is
    not looked at); a longer one is counted a slice at a time (a pass that deletes the
    other bytes, about twice the speed of a count per character, and stops early)."""
    if len(data) < max_values:
        return False
    found = 0
    for at in range(0, len(data), _COUNT_SLICE):
        part = data[at : at + _COUNT_SLICE]
        found += len(part) - len(part.translate(None, _VALUE_BYTES))
        if found >= max_values:
            return True
    return False


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} out of range")
    return value


#: One JSON value from an index of a text: ``(value, end)``, StopIteration if none.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)  # type: ignore[arg-type]  # typeshed: a decoder is its context
)
_SPACE = re.compile(r"[ \t\n\r]*")
_SPACES = frozenset(" \t\n\r")
#: A UTF-16 surrogate escape (or an escaped backslash before text that looks like one).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def _skip_space(text: str, pos: int) -> int:
    m = _SPACE.match(text, pos)
    return pos if m is None else m.end()


def _json_in_one_step(data: bytes, max_entries: int) -> list[Any] | None:
    """The array of a small JSON body parsed by orjson in one step (the loop held
    well under a millisecond; the scanner below costs about four times its CPU), or
    None -- a larger body, or one orjson refuses or that is not an array within
    ``max_entries``: the scanner then decodes it or finds its exact error."""
    if len(data) > _ONE_STEP_BYTES:
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if type(doc) is not list or len(doc) > max_entries:
        return None
    return doc


async def _json_entries(data: bytes, max_entries: int, max_values: int) -> list[Any]:
    if _json_values_over(data, max_values):
        raise _too_many_values(max_values)
    doc = _json_in_one_step(data, max_entries)
    if doc is not None:
        return doc
    try:
        if _SURROGATE.search(data):  # rare: orjson decides whether they pair, in one step
            orjson.loads(data)
        text = data.decode()
    except (orjson.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad_request(f"malformed batch body: {e}") from None
    space, scan = _skip_space, _SCAN
    pos = space(text, 0)
    if text[pos : pos + 1] != "[":
        raise bad_request("batch body must be an array of entries")
    pos = space(text, pos + 1)
    entries: list[Any] = []
    try:
        if text[pos : pos + 1] == "]":
            pos += 1
        else:
            while True:
                if len(entries) >= max_entries:
                    raise ApiError(413, f"batch of more than {max_entries} entries")
                if entries and not len(entries) % SLICE:
                    await asyncio.sleep(0)  # let other requests in between slices
                entry, pos = scan(text, pos)
                entries.append(tuple(entry) if type(entry) is list else entry)
                c = text[pos : pos + 1]
                if c in _SPACES:
                    pos = space(text, pos)
                    c = text[pos : pos + 1]
                if c == "]":
                    pos += 1
                    break
                if c != ",":
                    raise bad_request(f"malformed batch body: ',' or ']' expected at {pos}")
                pos += 1
                if text[pos : pos + 1] in _SPACES:
                    pos = space(text, pos)
    except StopIteration as e:  # the scanner's "no value at this index"
        raise bad_request(f"malformed batch body: a value expected at {e.value}") from None
    except (ValueError, RecursionError) as e:
        raise bad_request(f"malformed batch body: {e}") from None
    if space(text, pos) != len(text):
        raise bad_request("malformed batch body: extra data after the array")
    return entries


async def _msgpack_entries(data: bytes, max_entries: int, max_values: int) -> list[Any]:
    left = max_values

    def counted_list(value: tuple[Any, ...]) -> tuple[Any, ...]:
        nonlocal left
        left -= len(value) + 1
        if left < 0:
            raise _TooMany
        return value

    def counted_map(value: dict[Any, Any]) -> dict[Any, Any]:
        nonlocal left
        left -= 2 * len(value)
        if left < 0:
            raise _TooMany
        return value

    unpacker = msgpack.Unpacker(
        raw=False,
        use_list=False,  # tuples: untracked by the cyclic collector (module docstring)
        strict_map_key=True,
        list_hook=counted_list,
        object_hook=counted_map,
        max_buffer_size=max(1, len(data)),
        max_array_len=_MAX_FIELDS,
        max_map_len=MAX_METADATA_ENTRIES,
    )
    unpacker.feed(data)
    try:
        try:
            n = unpacker.read_array_header()
        except (msgpack.UnpackException, ValueError):
            raise bad_request("batch body must be an array of entries") from None
        if n > max_entries:
            raise _too_many_entries(n, max_entries)
        entries: list[Any] = []
        while len(entries) < n:
            if entries:
                await asyncio.sleep(0)  # let other requests in between slices
            want = min(SLICE, n - len(entries))
            got = list(itertools.islice(unpacker, want))
            if len(got) < want:
                raise bad_request("malformed batch body: truncated")
            entries.extend(got)
    except _TooMany:
        raise _too_many_values(max_values) from None
    except (ValueError, msgpack.UnpackException) as e:
        raise bad_request(f"malformed batch body: {e}") from None
    if unpacker.tell() != len(data):
        raise bad_request("malformed batch body: extra data after the array")
    return entries
