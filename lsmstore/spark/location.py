"""``lsm://<repository>/<ref>[/<prefix>]``: what a Spark read or write names."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from lsmstore.errors import InvalidURLError
from lsmstore.refstore.names import check_repository_name

SCHEME = "lsm"


@dataclass(frozen=True, slots=True)
class Location:
    """A repository, a ref expression (a branch for writes) and a key prefix.

    Ref names hold no ``/``, so everything after the ref is the prefix (percent-decoded,
    as UTF-8).  ``lsm://repo/main/logs/2026/`` reads keys starting with ``logs/2026/``.
    """

    repo: str
    ref: str
    prefix: bytes = b""

    def __str__(self) -> str:
        tail = "/" + self.prefix.decode("utf-8", "backslashreplace") if self.prefix else ""
        return f"{SCHEME}://{self.repo}/{self.ref}{tail}"


def parse_location(url: str) -> Location:
    """InvalidURLError unless ``url`` is ``lsm://repo/ref[/prefix]``."""
    if not isinstance(url, str):
        raise InvalidURLError(f"not an lsm:// URL: {url!r}")
    parts = urlsplit(url)
    if parts.scheme.lower() != SCHEME or parts.query or parts.fragment:
        raise InvalidURLError(f"expected lsm://<repository>/<ref>[/<prefix>], got {url!r}")
    repo = parts.netloc
    try:
        check_repository_name(repo)
    except Exception as e:
        raise InvalidURLError(f"{url!r}: {e}") from None
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    ref, _, prefix = path.partition("/")
    ref = unquote(ref)
    if not ref:
        raise InvalidURLError(f"{url!r} names no ref: lsm://<repository>/<ref>[/<prefix>]")
    return Location(repo, ref, unquote(prefix).encode("utf-8"))
