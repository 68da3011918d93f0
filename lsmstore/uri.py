"""``lsm://repository/ref/path`` URIs (``lakefs://`` is accepted as a synonym).

::

    lsm://demo                    the repository "demo"
    lsm://demo/main               its branch (or tag, commit ID, ``main~2`` ...) "main"
    lsm://demo/main/tables/a.csv  an object path on that ref
    lsm://demo/main/tables/       a "directory": the paths starting with ``tables/``

The path is everything after the ref's slash, taken literally (no percent-decoding,
like lakectl): object paths may hold any character but NUL.  What a command needs
(a repository, a ref, a path) is checked by :meth:`LsmURI.require`; every problem is
an :class:`~lsmstore.errors.InvalidURLError` naming the URI and the fault.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsmstore.errors import InvalidURLError
from lsmstore.refstore.names import check_repository_name

SCHEMES = ("lsm", "lakefs")
#: What ``str()`` writes: URIs read as ``lakefs://`` print as ``lsm://``.
CANONICAL_SCHEME = "lsm"


@dataclass(frozen=True, slots=True)
class LsmURI:
    """A parsed URI: ``ref`` and ``path`` are None when the URI stops before them."""

    repository: str
    ref: str | None = None
    path: str | None = None

    def __str__(self) -> str:
        s = f"{CANONICAL_SCHEME}://{self.repository}"
        if self.ref is not None:
            s += f"/{self.ref}"
            if self.path is not None:
                s += f"/{self.path}"
        return s

    @property
    def ref_or_error(self) -> str:
        if self.ref is None:
            raise InvalidURLError(f"{self}: the URI names no branch or ref (lsm://repo/REF)")
        return self.ref

    @property
    def path_or_empty(self) -> str:
        return self.path or ""

    def require(self, *, ref: bool = False, path: bool = False, no_path: bool = False) -> LsmURI:
        """This URI, or InvalidURLError when a part the caller needs is missing (or,
        with ``no_path``, present)."""
        if (ref or path) and self.ref is None:
            raise InvalidURLError(f"{self}: expected lsm://repository/ref{'/path' if path else ''}")
        if path and not self.path:
            raise InvalidURLError(f"{self}: expected an object path (lsm://repository/ref/PATH)")
        if no_path and self.path:
            raise InvalidURLError(f"{self}: expected no object path after the ref")
        return self

    def join(self, name: str) -> LsmURI:
        """The URI of ``name`` under this one's path (a directory)."""
        base = self.path_or_empty
        if base and not base.endswith("/"):
            base += "/"
        return LsmURI(self.repository, self.ref_or_error, base + name)


def is_uri(text: str) -> bool:
    """Whether ``text`` is written as an lsm:// or lakefs:// URI (valid or not)."""
    head, sep, _ = text.partition("://")
    return bool(sep) and head.lower() in SCHEMES


def parse_uri(text: str) -> LsmURI:
    """Parse ``lsm://repository[/ref[/path]]``; InvalidURLError names the problem."""
    if not isinstance(text, str):
        raise InvalidURLError(f"expected an lsm:// URI, got {type(text).__name__}")
    head, sep, rest = text.partition("://")
    if not sep:
        raise InvalidURLError(f"{text!r} is not a URI: expected lsm://repository/ref/path")
    if head.lower() not in SCHEMES:
        raise InvalidURLError(
            f"unknown URI scheme {head!r} in {text!r}: expected lsm:// (or lakefs://)"
        )
    if "\x00" in rest:
        raise InvalidURLError(f"URI {text!r} contains a NUL character")
    repo, slash, after = rest.partition("/")
    if not repo:
        raise InvalidURLError(f"URI {text!r} names no repository: expected lsm://repository/...")
    try:
        check_repository_name(repo)
    except InvalidURLError:
        raise
    except ValueError as e:
        raise InvalidURLError(f"URI {text!r}: {e}") from e
    if not slash or not after:
        return LsmURI(repo)
    ref, slash, path = after.partition("/")
    if not ref:
        raise InvalidURLError(f"URI {text!r} has an empty ref (two slashes after the repository)")
    if any(c.isspace() or ord(c) < 0x20 for c in ref):
        raise InvalidURLError(f"URI {text!r}: the ref {ref!r} holds whitespace or a control char")
    if not slash:
        return LsmURI(repo, ref)
    return LsmURI(repo, ref, path or None)
