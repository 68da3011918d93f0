"""Sealed secrets: an access key's secret kept recoverable for signature checks.

A SigV4 or SigV2 signature is an HMAC under the secret itself, so checking one needs
the secret, not its scrypt hash (:mod:`lsmstore.server.auth`).  When a key is created
its secret is also stored sealed: AES-256-GCM under a key derived (HMAC-SHA256) from
the server's signing secret (``server_auth_secret_key``, :mod:`lsmstore.server.secret`:
configuration, never RefStore data), with the access key id as associated data (a sealed secret
moved to another key id does not open).  Format: ``v1.<base64url(nonce | ciphertext)>``.

Whoever reads both the configured secret and the sealed record can recover the
secret, as with lakeFS, which keeps secrets encrypted under its configured
``auth.encrypt.secret_key``.  Changing the signing secret ends S3 access of every key
created before (their sealed secrets no longer open).  docs/gateway.md says so.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KIND = "s3-secrets"
_VERSION = "v1."
_PURPOSE = b"lsmstore sealed access key secret v1"


def _aead(signing_key: bytes) -> AESGCM:
    return AESGCM(hmac.new(signing_key, _PURPOSE, hashlib.sha256).digest())


def seal(signing_key: bytes, key_id: str, secret: str) -> bytes:
    nonce = secrets.token_bytes(12)
    box = _aead(signing_key).encrypt(nonce, secret.encode("utf-8"), key_id.encode())
    return (_VERSION + base64.urlsafe_b64encode(nonce + box).decode()).encode()


def unseal(signing_key: bytes, key_id: str, sealed: bytes) -> str | None:
    """The secret, or None when ``sealed`` is not a secret sealed for ``key_id``."""
    text = sealed.decode("ascii", "replace")
    if not text.startswith(_VERSION):
        return None
    try:
        raw = base64.urlsafe_b64decode(text[len(_VERSION) :])
        plain = _aead(signing_key).decrypt(raw[:12], raw[12:], key_id.encode())
        return plain.decode("utf-8")
    except (ValueError, InvalidTag, UnicodeDecodeError):
        return None
