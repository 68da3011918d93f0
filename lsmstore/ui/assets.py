"""The web UI's files: ``GET /`` (the page) and ``GET /ui/<name>`` (its scripts and
styles), from the package folder ``lsmstore/ui/static``.

Only files present in that folder when the server starts are served, looked up by
name in a table built then: a request names a table key or gets 404, so no path can
lead outside the folder (``..``, encoded slashes, absolute paths all miss).  The files
are public -- the page and its code hold no data; everything the page shows comes from
the API with the key the user logs in with (docs/ui.md).

Every answer carries security headers: a Content-Security-Policy allowing only this
origin's scripts, styles, images and API calls (no inline script, no framing:
``frame-ancestors 'none'``), ``X-Content-Type-Options: nosniff``, ``X-Frame-Options:
DENY`` and ``Referrer-Policy: no-referrer``.  Files are revalidated by ETag
(``Cache-Control: no-cache``), so an upgraded server serves its new UI at once.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from lsmstore.server.http import Request, Response
from lsmstore.server.routing import Route

PREFIX = "/ui/"
INDEX = "index.html"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}


def page_url(scheme: str, host: str, port: int) -> str:
    """The address to open the UI at; a wildcard listening address is shown as this
    machine's loopback address."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "[::1]"
    elif ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}/"


def load() -> dict[str, tuple[bytes, str, str]]:
    """name -> (bytes, content type, ETag) of every file of the static folder whose
    type is known (sub-folders are not served)."""
    out: dict[str, tuple[bytes, str, str]] = {}
    for entry in resources.files("lsmstore.ui").joinpath("static").iterdir():
        name = entry.name
        ctype = _TYPES.get(name[name.rfind(".") :]) if "." in name else None
        if ctype is None or not entry.is_file():
            continue
        data = entry.read_bytes()
        out[name] = (data, ctype, '"' + hashlib.sha256(data).hexdigest()[:32] + '"')
    return out


def routes() -> list[Route]:
    files = load()

    def answer(request: Request, name: str) -> Response:
        found = files.get(name)
        headers = dict(SECURITY_HEADERS)
        if found is None:
            return Response(404, b"not found\n", "text/plain; charset=utf-8", headers)
        data, ctype, etag = found
        headers["ETag"] = etag
        headers["Cache-Control"] = "no-cache"
        if request.headers.get("if-none-match") == etag:
            return Response(304, b"", None, headers)
        return Response(200, data, ctype, headers)

    async def index(request: Request) -> Response:
        return answer(request, INDEX)

    async def asset(request: Request) -> Response:
        return answer(request, request.params["name"])

    return [
        Route("GET", "/", index, "uiIndex", None, "ui"),
        Route("GET", PREFIX + "{name}", asset, "uiAsset", None, "ui"),
    ]
