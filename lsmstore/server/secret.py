"""The token signing secret of a server (docs/security.md, "What an operator configures").

Tokens (``POST /api/v1/auth/login``) are signed with ``server_auth_secret_key``
(``[server] auth_secret_key`` in the TOML file, ``LSMSTORE_SERVER_AUTH_SECRET_KEY``),
as lakeFS signs with ``auth.encrypt.secret_key``.  It is configuration, never RefStore
data: whoever can read the RefStore (a Redis user, a DynamoDB reader, a backup) cannot
mint tokens.  Every server of one RefStore needs the same secret, or a token works
only on the server that issued it.

A server refuses to start without one, except on the embedded default (a ``local://``
RefStore: one machine, one user), where the first server generates a random secret
into ``<home>/auth-secret`` (0600, in a 0700 home if it creates it) and later ones
read it.  Changing the secret ends every token issued before.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from lsmstore import private
from lsmstore.config import Config
from lsmstore.errors import InvalidInputError

#: The generated secret of the embedded default, under the home.
SECRET_FILE = "auth-secret"
#: Shortest secret accepted (characters).
MIN_SECRET_CHARS = 32


def _checked(secret: str, where: str) -> bytes:
    secret = secret.strip()
    if len(secret) < MIN_SECRET_CHARS:
        raise InvalidInputError(
            f"{where}: the token signing secret has {len(secret)} characters; at least "
            f"{MIN_SECRET_CHARS} are needed (e.g. `openssl rand -base64 48`)"
        )
    return secret.encode("utf-8")


def signing_key(config: Config) -> bytes:
    """The configured secret, or the embedded default's generated one; InvalidInputError
    when none is configured for a shared RefStore, or the one given is too short."""
    if config.server_auth_secret_key:
        return _checked(config.server_auth_secret_key, "server_auth_secret_key")
    if not config.refstore_url.lower().startswith("local:"):
        raise InvalidInputError(
            f"the RefStore {config.refstore_url} is shared: configure the token signing "
            "secret (server_auth_secret_key: [server] auth_secret_key in the TOML file, or "
            "LSMSTORE_SERVER_AUTH_SECRET_KEY), the same on every server"
        )
    return _checked(_generated(config.home / SECRET_FILE), str(config.home / SECRET_FILE))


def _generated(path: Path) -> str:
    """The secret in ``path``, generated first if absent (two processes racing agree:
    the file appears whole, by a hard link, or not at all)."""
    if not path.exists():
        private.make_dirs(path.parent)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
        private.write_file(tmp, (secrets.token_urlsafe(48) + "\n").encode())
        try:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink()
    return path.read_text(encoding="utf-8")
