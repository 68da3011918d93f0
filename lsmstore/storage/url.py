"""Open an object store from its storage-namespace URL.

=========================================  ============================================
``file:///abs/path``                       :class:`LocalStore` rooted at ``/abs/path``
                                           (``file://localhost/abs/path`` also works)
``s3://bucket/prefix?option=value&...``    :class:`S3Store` on ``bucket`` under ``prefix``
``mem://name``                             :class:`MemoryStore` shared by ``name``
``local://relative/path``                  :class:`LocalStore` at ``$LSMSTORE_HOME/data/``
                                           ``relative/path`` (lakeFS's local blockstore
                                           form; no ``..``, no absolute path)
=========================================  ============================================

S3 options (query parameters override keyword arguments of the same name):
``endpoint_url`` (an S3-compatible endpoint, e.g. ``http://127.0.0.1:9000``),
``region``, ``path_style`` (``true``/``false``: path-style addressing),
``max_attempts`` (total attempts per request, default 5), ``connect_timeout`` and
``read_timeout`` (seconds, default 5 and 30), ``max_pool_connections`` (default 64),
``page_size`` (keys per ListObjectsV2 page, 1..1000), ``part_size`` (bytes per part of
a streamed upload, default 8 MiB, at least 5 MiB), ``part_concurrency`` (parts of one
streamed upload sent at once, default 4, 1..64), ``direct`` (``false``: every request
through botocore, none on the store's own aiohttp path; default true), ``max_read``
(the largest object ``get`` reads whole, default 5 GiB).  ``file`` and ``mem`` take no
options.  Anything else -- another scheme, a relative path, an unknown option, a value
of the wrong type -- raises :class:`InvalidURLError` naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from lsmstore.errors import InvalidInputError, InvalidURLError
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.local import LocalStore
from lsmstore.storage.memory import MemoryStore
from lsmstore.validate import check_url_text, has_control, preview


def _unquoted(url: str, part: str) -> str:
    """A percent-decoded URL part: valid UTF-8 without control characters (``%00``)."""
    try:
        text = unquote(part, errors="strict") if "%" in part else part
    except UnicodeDecodeError as e:
        raise InvalidURLError(f"{preview(url)}: escaped bytes are not UTF-8 ({e})") from None
    if has_control(text):
        raise InvalidURLError(f"{preview(url)} holds an escaped control character")
    return text


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


S3_OPTIONS: dict[str, Callable[[Any], Any]] = {
    "endpoint_url": str,
    "region": str,
    "path_style": _bool,
    "max_attempts": int,
    "connect_timeout": float,
    "read_timeout": float,
    "max_pool_connections": int,
    "page_size": int,
    "part_size": int,
    "part_concurrency": int,
    "direct": _bool,
    "max_read": int,
}


def _s3_options(url: str, query: str, options: dict[str, Any]) -> dict[str, Any]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as e:
        raise InvalidURLError(f"malformed query in {url!r}: {e}") from None
    merged = {**options, **dict(pairs)}
    typed: dict[str, Any] = {}
    for name, value in merged.items():
        convert = S3_OPTIONS.get(name)
        if convert is None:
            raise InvalidURLError(
                f"unknown S3 option {name!r} for {url!r}; known: {', '.join(S3_OPTIONS)}"
            )
        try:
            typed[name] = None if value is None else convert(value)
        except (TypeError, ValueError):
            raise InvalidURLError(f"S3 option {name}={value!r} in {url!r} is invalid") from None
    return typed


def local_namespace_path(url: str, home: Path | None = None) -> Path:
    """Where a ``local://relative/path`` namespace lives: under ``home/data`` (by
    default ``$LSMSTORE_HOME/data``).  A repository records where its namespace
    resolved when it was created (lsmstore.namespace), and every process uses that."""
    from lsmstore.config import default_home

    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise InvalidURLError(f"local:// URLs take no options: {url!r}")
    rel = _unquoted(url, parts.netloc + parts.path)
    segments = rel.split("/")
    if not rel or rel.startswith("/") or any(s in ("", ".", "..") for s in segments):
        raise InvalidURLError(
            f"local URL must be local://<relative/path> without '.', '..' or empty parts: {url!r}"
        )
    return (home or default_home()) / "data" / rel


def open_object_store(url: str, *, local_sync: str = "auto", **options: Any) -> ObjectStore:
    """The store for ``url`` (see the module doc for forms and options). No I/O happens
    here.  ``local_sync``: how a ``file``/``local`` store makes puts durable (the
    ``local_sync`` setting, :data:`lsmstore.storage.local.SYNC_MODES`)."""
    check_url_text(url, "storage namespace URL", InvalidURLError)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a malformed port
    except ValueError as e:
        raise InvalidURLError(f"malformed storage namespace URL {preview(url)}: {e}") from None
    scheme = parts.scheme.lower()
    if scheme in ("file", "mem") and (options or parts.query):
        names = sorted({*options, *(k for k, _ in parse_qsl(parts.query, keep_blank_values=True))})
        raise InvalidURLError(f"{scheme}:// URLs take no options; got {names} for {url!r}")
    try:
        if scheme == "file":
            path = _unquoted(url, parts.path)
            if parts.netloc not in ("", "localhost") or not path.startswith("/"):
                raise InvalidURLError(f"file URL must name an absolute path (file:///...): {url!r}")
            return LocalStore(Path(path), sync=local_sync)
        if scheme == "local":
            return LocalStore(local_namespace_path(url), sync=local_sync)
        if scheme == "mem":
            if not parts.netloc or parts.path not in ("", "/"):
                raise InvalidURLError(f"memory store URL must be mem://<name>: {url!r}")
            return MemoryStore(_unquoted(url, parts.netloc))
        if scheme == "s3":
            if not parts.netloc:
                raise InvalidURLError(f"S3 URL must be s3://<bucket>/<prefix>: {url!r}")
            from lsmstore.storage.s3 import S3Store  # aiobotocore is imported only when needed

            typed = _s3_options(url, parts.query, options)
            return S3Store(parts.netloc, _unquoted(url, parts.path), **typed)
    except InvalidURLError:
        raise
    except InvalidInputError as e:
        raise InvalidURLError(f"{url!r}: {e}") from None
    raise InvalidURLError(
        f"unknown object store scheme {parts.scheme!r} in {url!r}; expected file, local, s3 or mem"
    )
