"""Typed checks of what a caller passes in, for every public entry point.

The client, the configuration, the URL parsers (and the server and object layer on
top of them) check their arguments here, once, at the boundary: a bad argument raises
a typed :class:`~lsmstore.errors.InvalidInputError` (or the subclass the check names)
that says which argument is wrong and why, before anything is read or written.  Code
behind the boundary may then assume well-typed values.

Rules every check follows:

* ``None`` is the only "not given"; an empty string is a value, and where a name is
  required it is an invalid one.
* ``bool`` is not a number (``True`` is not a limit of 1).
* Numbers are finite: NaN and infinities are rejected, with the accepted range named.
* Text is valid Unicode (a lone surrogate cannot be stored as UTF-8).
* Messages quote at most :data:`PREVIEW_CHARS` characters of the offending value, so
  an error about a megabyte-long argument stays readable (:func:`preview`).
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lsmstore.errors import InvalidInputError

#: Characters of a value quoted in an error message.
PREVIEW_CHARS = 64
#: Bounds of commit/merge metadata: entries, and UTF-8 bytes of one key or value.
MAX_METADATA_ENTRIES = 1000
MAX_METADATA_BYTES = 64 * 1024
#: Longest committer name, in UTF-8 bytes.
MAX_COMMITTER_BYTES = 1024


def preview(value: object, limit: int = PREVIEW_CHARS) -> str:
    """``repr(value)``, cut to about ``limit`` characters for str/bytes (with the full
    length noted); other values are shown by type and a short repr."""
    if isinstance(value, str | bytes | bytearray | memoryview):
        data = bytes(value) if isinstance(value, bytearray | memoryview) else value
        if len(data) <= limit:
            return repr(data)
        unit = "characters" if isinstance(data, str) else "bytes"
        return f"{data[:limit]!r}... ({len(data)} {unit})"
    text = repr(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    return text


def key_text(key: str | bytes, limit: int = PREVIEW_CHARS) -> str:
    """A key (an object path) for a message: quoted text, not a bytes repr; bytes
    that are not UTF-8 show as ``\\xNN``."""
    text = key.decode("utf-8", "backslashreplace") if isinstance(key, bytes) else key
    return preview(text, limit)


def type_name(value: object) -> str:
    return type(value).__name__


def utf8(value: str, what: str, error: type[InvalidInputError] = InvalidInputError) -> bytes:
    """``value`` encoded as UTF-8; ``error`` if it holds a lone surrogate."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise error(f"{what} {preview(value)} is not valid Unicode: {e.reason}") from None


def has_control(text: str) -> bool:
    """True if ``text`` holds a C0/C1 control character or DEL (NUL included)."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def check_str(
    value: object,
    what: str,
    *,
    empty_ok: bool = False,
    max_bytes: int | None = None,
    control_ok: bool = True,
    error: type[InvalidInputError] = InvalidInputError,
) -> str:
    """A ``str`` of valid Unicode; non-empty unless ``empty_ok``; at most ``max_bytes``
    in UTF-8; without control characters unless ``control_ok``."""
    if not isinstance(value, str):
        raise error(f"{what} must be a str, not {type_name(value)}")
    if not value and not empty_ok:
        raise error(f"{what} must not be empty")
    data = utf8(value, what, error)
    if max_bytes is not None and len(data) > max_bytes:
        raise error(
            f"{what} {preview(value)} is {len(data)} bytes, over the {max_bytes}-byte limit"
        )
    if not control_ok and has_control(value):
        raise error(f"{what} {preview(value)} holds a control character")
    return value


def check_optional_str(
    value: object,
    what: str,
    *,
    empty_ok: bool = False,
    max_bytes: int | None = None,
    control_ok: bool = True,
) -> str | None:
    """None, or what :func:`check_str` accepts."""
    if value is None:
        return None
    return check_str(value, what, empty_ok=empty_ok, max_bytes=max_bytes, control_ok=control_ok)


def check_int(
    value: object, what: str, *, min_value: int | None = None, max_value: int | None = None
) -> int:
    """An ``int`` (not a bool) within ``[min_value, max_value]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{what} must be an int, not {type_name(value)} {preview(value)}")
    if (min_value is not None and value < min_value) or (
        max_value is not None and value > max_value
    ):
        raise InvalidInputError(f"{what} must be {_range(min_value, max_value)}, got {value}")
    return value


def check_optional_int(
    value: object, what: str, *, min_value: int | None = None, max_value: int | None = None
) -> int | None:
    """None, or what :func:`check_int` accepts."""
    if value is None:
        return None
    return check_int(value, what, min_value=min_value, max_value=max_value)


def check_number(
    value: object,
    what: str,
    *,
    min_value: float | None = None,
    max_value: float | None = None,
    min_exclusive: bool = False,
) -> float:
    """A finite int or float (not a bool) within the bounds, as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{what} must be a number, not {type_name(value)} {preview(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise InvalidInputError(f"{what} {preview(value)} is too large") from None
    if not math.isfinite(number):
        raise InvalidInputError(f"{what} must be a finite number, got {value!r}")
    low_bad = min_value is not None and (
        number <= min_value if min_exclusive else number < min_value
    )
    if low_bad or (max_value is not None and number > max_value):
        bound = _range(min_value, max_value, min_exclusive)
        raise InvalidInputError(f"{what} must be {bound}, got {value!r}")
    return number


def _range(lo: float | None, hi: float | None, lo_exclusive: bool = False) -> str:
    op = ">" if lo_exclusive else ">="
    if lo is not None and hi is not None:
        return f"{op} {lo:g} and <= {hi:g}"
    if lo is not None:
        return f"{op} {lo:g}"
    return f"<= {hi:g}"


def check_bool(value: object, what: str) -> bool:
    """A real ``bool`` (``"no"`` is not False)."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{what} must be True or False, not {type_name(value)}")
    return value


def check_bytes(value: object, what: str) -> bytes:
    """``bytes``, ``bytearray`` or ``memoryview``, as bytes."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise InvalidInputError(f"{what} must be bytes, not {type_name(value)}")


def check_metadata(value: object, what: str = "metadata") -> dict[str, str]:
    """None (empty) or a mapping of non-empty ``str`` keys to ``str`` values, bounded in
    count and size; a plain ``dict`` copy."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be a mapping of str to str, not {type_name(value)}")
    if len(value) > MAX_METADATA_ENTRIES:
        raise InvalidInputError(f"{what} has {len(value)} entries, over {MAX_METADATA_ENTRIES}")
    out: dict[str, str] = {}
    for k, v in value.items():
        check_str(k, f"{what} key", max_bytes=MAX_METADATA_BYTES)
        check_str(v, f"{what} value of {preview(k)}", empty_ok=True, max_bytes=MAX_METADATA_BYTES)
        out[k] = v
    return out


def check_committer(value: object) -> str | None:
    """None (the default committer) or a non-empty name without control characters."""
    return check_optional_str(value, "committer", max_bytes=MAX_COMMITTER_BYTES, control_ok=False)


def check_message(value: object, what: str = "message") -> str | None:
    """None (the default message) or any ``str`` of valid Unicode (empty allowed)."""
    return check_optional_str(value, what, empty_ok=True)


def check_path(value: object, what: str) -> Path:
    """A local file path: ``str`` or ``os.PathLike`` (not bytes), non-empty, without NUL,
    encodable for the filesystem."""
    if isinstance(value, os.PathLike):
        try:
            raw = os.fspath(value)
        except TypeError as e:  # a PathLike returning something odd
            raise InvalidInputError(f"{what}: {e}") from None
    else:
        raw = value
    if not isinstance(raw, str):
        raise InvalidInputError(f"{what} must be a str or path, not {type_name(value)}")
    if not raw:
        raise InvalidInputError(f"{what} must not be empty")
    if "\0" in raw:
        raise InvalidInputError(f"{what} {preview(raw)} holds a NUL character")
    try:
        os.fsencode(raw)
    except UnicodeEncodeError as e:
        raise InvalidInputError(f"{what} {preview(raw)} cannot be encoded: {e.reason}") from None
    return Path(raw)


async def sst_argument(sst: object) -> bytes:
    """The bytes of an SST argument: the bytes themselves, or the contents of a local
    file path (read in a thread); InvalidInputError for anything else or a file that
    cannot be read."""
    if isinstance(sst, bytes | bytearray | memoryview):
        return bytes(sst)
    if isinstance(sst, str | os.PathLike):
        path = check_path(sst, "SST path")
        try:
            return await asyncio.to_thread(path.read_bytes)
        except OSError as e:
            raise InvalidInputError(f"cannot read SST file {path}: {e}") from e
    raise InvalidInputError(f"stage_sst needs a path or bytes, not {type_name(sst)}")


def check_url_text(
    value: object, what: str, error: type[InvalidInputError] = InvalidInputError
) -> str:
    """The text of a URL: a non-empty ``str`` of valid Unicode, at most 4096 bytes, with
    no control characters (NUL, newlines, ...) or whitespace at either end."""
    text = check_str(value, what, max_bytes=4096, control_ok=False, error=error)
    if text != text.strip():
        raise error(f"{what} {preview(text)} has leading or trailing whitespace")
    return text


def put_items(items: object, what: str = "put_many items") -> Iterator[tuple[Any, Any, Any]]:
    """``(key, value, identity or None)`` of each ``(key, value)`` or ``(key, value,
    identity)`` tuple (or list) of ``items``; the key, value and identity themselves are
    the caller's to check."""
    for i, item in enumerate(check_items(items, what)):
        n = len(item) if isinstance(item, tuple | list) else 0
        if n == 2:
            yield item[0], item[1], None
        elif n == 3:
            yield item[0], item[1], item[2]
        else:
            raise InvalidInputError(
                f"{what}: item {i} must be a (key, value) or (key, value, identity) tuple, "
                f"not {preview(item)}"
            )


def check_items(value: object, what: str) -> Iterator[Any]:
    """An iterator over an iterable argument (a list of items, of keys...); a ``str``,
    ``bytes`` or mapping is refused (iterating it is almost never what was meant)."""
    if isinstance(value, str | bytes | bytearray | memoryview | Mapping) or not isinstance(
        value, Iterable
    ):
        raise InvalidInputError(f"{what} must be an iterable of items, not {type_name(value)}")
    return iter(value)
