"""Streaming ``multipart/form-data``: the ``content`` part of an upload, as lakectl's
``fs upload`` sends it (``pkg/api/helpers/upload.go``).

lakeFS takes the first part named ``content``; its ``Content-Type`` becomes the
object's.  :func:`content_part` reads the body chunk by chunk and yields that part's
bytes without holding more than one chunk plus a delimiter in memory; parts before it
are skipped, the rest of the body after it is drained (bounded by the request's limit).
A body without such a part, or one that ends before its closing delimiter, is 400.

A delimiter is exactly RFC 2046's: CRLF, ``--``, the boundary, then ``--`` (the close
delimiter) or optional spaces and tabs and CRLF.  A line that merely starts with
``--`` and the boundary (``--Bc`` for boundary ``B``) is data.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from email.parser import HeaderParser

from lsmstore.server.errors import bad_request

MAX_PART_HEADERS = 16 * 1024
#: Spaces and tabs accepted after a boundary before its CRLF (RFC 2046's transport
#: padding); more is read as data.
MAX_PADDING = 64


def boundary_of(content_type: str) -> bytes:
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "boundary":
            value = value.strip().strip('"')
            if 1 <= len(value) <= 200:
                return value.encode("latin-1")
    raise bad_request("multipart/form-data without a boundary")


def _part_headers(raw: bytes) -> tuple[str | None, str | None]:
    """``(form field name, content type)`` of a part's header block."""
    msg = HeaderParser().parsestr(raw.decode("utf-8", "replace"))
    name = msg.get_param("name", header="content-disposition")
    ctype = msg.get("content-type")
    return (str(name) if isinstance(name, str) else None), ctype


class ContentPart:
    """The ``content`` part of a multipart body: ``content_type`` once
    :meth:`start` returned, then its bytes by iterating."""

    def __init__(self, body: AsyncIterator[bytes], boundary: bytes) -> None:
        self._body = body
        self._delim = b"\r\n--" + boundary
        self._buf = b"\r\n"  # the first delimiter has no CRLF before it
        self.content_type: str | None = None
        self.filename: str | None = None

    def _delimiter(self, start: int = 0) -> tuple[int, bool]:
        """Where the next delimiter begins in the buffer, from ``start``: ``(i, True)``;
        ``(i, False)`` when the bytes at ``i`` may begin one but more must be read to
        tell; ``(-1, False)`` when none begins there."""
        buf, delim = self._buf, self._delim
        i = buf.find(delim, start)
        while i >= 0:
            after = i + len(delim)
            rest = buf[after : after + MAX_PADDING + 2]
            if rest.startswith(b"--"):
                return i, True
            stripped = rest.lstrip(b" \t")
            if len(rest) - len(stripped) <= MAX_PADDING:
                if stripped.startswith(b"\r\n"):
                    return i, True
                if rest in (b"", b"-") or stripped in (b"", b"\r"):
                    return i, False  # the buffer ends before it can tell
            i = buf.find(delim, i + 1)
        return -1, False

    async def _more(self) -> bool:
        chunk = await anext(self._body, None)
        if chunk is None:
            return False
        self._buf += chunk
        return True

    async def start(self) -> None:
        """Skip to the first part named ``content`` and read its headers."""
        while True:
            # the next delimiter line
            while True:
                i, found = self._delimiter()
                if found:
                    break
                if i > 0:
                    self._buf = self._buf[i:]  # a delimiter may begin there
                elif i < 0 and len(self._buf) > len(self._delim):
                    self._buf = self._buf[-len(self._delim) :]
                if not await self._more():
                    raise bad_request("multipart body has no part named 'content'")
            self._buf = self._buf[i + len(self._delim) :]
            while len(self._buf) < 2:
                if not await self._more():
                    raise bad_request("multipart body ends inside a delimiter")
            if self._buf.startswith(b"--"):
                raise bad_request("multipart body has no part named 'content'")
            while (j := self._buf.find(b"\r\n\r\n")) < 0:
                if len(self._buf) > MAX_PART_HEADERS:
                    raise bad_request("multipart part headers too long")
                if not await self._more():
                    raise bad_request("multipart body ends inside part headers")
            raw, self._buf = self._buf[:j], self._buf[j + 4 :]
            name, ctype = _part_headers(raw.lstrip(b" \t").removeprefix(b"\r\n"))
            if name == "content":
                self.content_type = ctype
                return

    async def __aiter__(self) -> AsyncIterator[bytes]:
        keep = len(self._delim) - 1
        while True:
            i, found = self._delimiter()
            if found:
                if i:
                    yield self._buf[:i]
                self._buf = self._buf[i:]
                break
            if i >= 0:  # a delimiter may begin at i: the data before it is the part's
                if i:
                    out, self._buf = self._buf[:i], self._buf[i:]
                    yield out
            elif len(self._buf) > keep:
                out, self._buf = self._buf[:-keep], self._buf[-keep:]
                yield out
            if not await self._more():
                raise bad_request("multipart body ends before the part's closing delimiter")
        async for _ in self._body:  # drain the rest (bounded by the request's limit)
            pass
