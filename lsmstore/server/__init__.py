"""The write service over HTTP: lakeFS's REST API v1 (the subset its SDK, lakefs-spec
and lakectl use) plus lsmstore's extensions under ``/api/v1/lsm``.  docs/server.md.

Modules: ``app`` (ASGI app: routing, auth, errors, metrics), ``routing``, ``http``
(request/response), ``errors`` (LsmError -> lakeFS status), ``auth`` (access keys,
tokens), ``routes/`` (one module per resource), ``openapi``, ``metrics``, ``locks``
(per-branch reader/writer locks), ``serve`` (uvicorn, drain), ``__main__`` (CLI).
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m lsmstore.server`` / ``lsmstore serve`` (lsmstore.server.__main__)."""
    from lsmstore.server.__main__ import main as run

    return run(argv)
