"""Open a RefStore from a URL.

=====================================================  ==================================
URL                                                    backend
=====================================================  ==================================
``local:///abs/dir[?synchronous=FULL|NORMAL]``         :class:`EmbeddedRefStore` (SQLite)
``redis://[user:pass@]host[:port][/db][?prefix=lsm:``  :class:`RedisRefStore`
``&max_connections=64&timeout=5]`` (``rediss://`` TLS)
``dynamodb://table?region=us-east-1``                  :class:`DynamoRefStore`
``[&endpoint_url=http://127.0.0.1:8000&timeout=5]``
=====================================================  ==================================

Keyword ``options`` are passed to the backend's constructor and win over the URL's
query.  An unknown scheme, an unknown query parameter or a malformed URL raises
:class:`InvalidURLError` naming the problem.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit, urlunsplit

from lsmstore.errors import InvalidURLError
from lsmstore.refstore.base import RefStore
from lsmstore.validate import check_url_text, has_control

DYNAMODB_TABLE = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")


def _query(url: str, query: str, allowed: set[str]) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as e:
        raise InvalidURLError(f"malformed query in RefStore URL {url!r}: {e}") from e
    params: dict[str, str] = {}
    for key, value in pairs:
        if key not in allowed:
            raise InvalidURLError(
                f"unknown parameter {key!r} in RefStore URL {url!r} "
                f"(allowed: {', '.join(sorted(allowed))})"
            )
        if key in params:
            raise InvalidURLError(f"parameter {key!r} repeated in RefStore URL {url!r}")
        params[key] = value
    return params


def _number(url: str, key: str, value: str, kind: type[int] | type[float]) -> Any:
    try:
        number = kind(value)
    except ValueError as e:
        raise InvalidURLError(f"parameter {key}={value!r} in RefStore URL {url!r}") from e
    if not number > 0:
        raise InvalidURLError(f"parameter {key}={value!r} in RefStore URL {url!r} must be > 0")
    return number


def open_refstore(url: str, **options: Any) -> RefStore:
    """The RefStore ``url`` names (no connection is made until the first call)."""
    check_url_text(url, "RefStore URL", InvalidURLError)
    try:
        parts = urlsplit(url)
    except ValueError as e:
        raise InvalidURLError(f"malformed RefStore URL {url!r}: {e}") from e
    if parts.fragment:
        raise InvalidURLError(f"RefStore URL {url!r} must not have a fragment")
    scheme = parts.scheme.lower()
    if scheme == "local":
        return _local(url, parts, options)
    if scheme in ("redis", "rediss"):
        return _redis(url, parts, options)
    if scheme == "dynamodb":
        return _dynamodb(url, parts, options)
    raise InvalidURLError(
        f"unknown RefStore URL scheme {parts.scheme!r} in {url!r} "
        "(expected local://, redis://, rediss:// or dynamodb://)"
    )


def _local(url: str, parts: SplitResult, options: dict[str, Any]) -> RefStore:
    from lsmstore.refstore.embedded import EmbeddedRefStore

    netloc, path, query = parts.netloc, parts.path, parts.query
    if netloc not in ("", "localhost"):
        raise InvalidURLError(f"local RefStore URL {url!r} must have no host: local:///abs/dir")
    try:
        path = unquote(path, errors="strict")
    except UnicodeDecodeError as e:
        raise InvalidURLError(f"local RefStore URL {url!r}: path is not UTF-8 ({e})") from None
    if not path.startswith("/") or any(seg == ".." for seg in path.split("/")) or has_control(path):
        raise InvalidURLError(
            f"local RefStore URL {url!r} needs an absolute path without '..' or control characters"
        )
    params = _query(url, query, {"synchronous"})
    kwargs: dict[str, Any] = {}
    if "synchronous" in params:
        sync = params["synchronous"].upper()
        if sync not in ("FULL", "NORMAL"):
            raise InvalidURLError(f"synchronous must be FULL or NORMAL in RefStore URL {url!r}")
        kwargs["synchronous"] = sync
    return EmbeddedRefStore(path, **(kwargs | options))


def _redis(url: str, parts: SplitResult, options: dict[str, Any]) -> RefStore:
    from lsmstore.refstore.redis import RedisRefStore

    params = _query(url, parts.query, {"prefix", "max_connections", "timeout"})
    try:
        parts.port  # noqa: B018 -- raises ValueError on a malformed port
    except ValueError as e:
        raise InvalidURLError(f"malformed port in RefStore URL {url!r}: {e}") from e
    if not parts.hostname:
        raise InvalidURLError(f"RefStore URL {url!r} has no host")
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise InvalidURLError(f"Redis database {db!r} in RefStore URL {url!r} must be a number")
    kwargs: dict[str, Any] = {}
    if "prefix" in params:
        kwargs["key_prefix"] = params["prefix"]
    if "max_connections" in params:
        kwargs["max_connections"] = _number(url, "max_connections", params["max_connections"], int)
    if "timeout" in params:
        kwargs["timeout"] = _number(url, "timeout", params["timeout"], float)
    plain = urlunsplit((parts.scheme.lower(), parts.netloc, f"/{db or 0}", "", ""))
    return RedisRefStore(plain, **(kwargs | options))


def _dynamodb(url: str, parts: SplitResult, options: dict[str, Any]) -> RefStore:
    from lsmstore.refstore.dynamodb import DynamoRefStore

    table = unquote(parts.netloc)
    if not DYNAMODB_TABLE.fullmatch(table) or parts.path not in ("", "/"):
        raise InvalidURLError(
            f"RefStore URL {url!r} must be dynamodb://<table>?region=... "
            f"with a table name matching {DYNAMODB_TABLE.pattern}"
        )
    params = _query(url, parts.query, {"region", "endpoint_url", "timeout"})
    region = (
        params.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    )
    if not region and "region" not in options:
        raise InvalidURLError(f"RefStore URL {url!r} names no region (add ?region=...)")
    kwargs: dict[str, Any] = {"region": region}
    if "endpoint_url" in params:
        endpoint = urlsplit(params["endpoint_url"])
        if endpoint.scheme not in ("http", "https") or not endpoint.netloc:
            raise InvalidURLError(f"endpoint_url in RefStore URL {url!r} must be http(s)://host")
        kwargs["endpoint_url"] = params["endpoint_url"]
    if "timeout" in params:
        kwargs["timeout"] = _number(url, "timeout", params["timeout"], float)
    return DynamoRefStore(table, **(kwargs | options))
