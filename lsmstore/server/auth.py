"""Access keys, as lakeFS has them: an access key id and a secret.

Clients send ``Authorization: Basic base64(<access key id>:<secret>)`` (the lakeFS SDK,
lakectl, lakefs-spec) or ``Authorization: Bearer <token>`` with a token from
``POST /api/v1/auth/login``.

**Storage.** One RefStore record per key (kind ``credentials``, name = access key id),
JSON: the role, the repositories it is limited to (empty: all), its creation time and
``secret_hash`` = ``scrypt$<n>$<r>$<p>$<salt>$<digest>`` (base64; n=2^14, r=8, p=1,
16-byte random salt, 32-byte digest).  The secret itself is never stored: it is shown
once, when the key is created.

**Verification.** scrypt is slow on purpose (tens of ms), so it runs in a thread, and a
successful check is remembered for ``cache_ttl_s`` under the SHA-256 of the secret
(never the secret): a client's next requests cost a dictionary lookup.  Digests and
token signatures are compared with :func:`hmac.compare_digest`.  A deleted key stops
working at once in this process and within ``cache_ttl_s`` in others.

**Roles.** ``reader`` may read; ``writer`` may also write (objects, branches, commits,
merges, tags); ``admin`` may also create and delete repositories and manage keys.
A key limited to repositories sees only those (others answer 403, listings skip them).

**Tokens.** ``<payload>.<signature>``, both base64url: payload ``{"sub": key id,
"exp": epoch seconds}``, signature HMAC-SHA256 under a random 32-byte signing key kept
as the record ``settings/token-signing-key`` (created on first use).  A token is as
good as its key: it stops working when the key is deleted.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import secrets
import string
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from lsmstore.errors import InvalidInputError, NotFoundError
from lsmstore.refstore.names import check_repository_name
from lsmstore.server import sealing
from lsmstore.server.errors import ApiError
from lsmstore.server.throttle import AuthThrottle

Role = Literal["admin", "writer", "reader"]
ROLES: tuple[Role, ...] = ("admin", "writer", "reader")
Action = Literal["read", "write", "admin"]
_RANK = {"reader": 0, "writer": 1, "admin": 2}
_NEEDS = {"read": 0, "write": 1, "admin": 2}

KIND = "credentials"
SETTINGS_KIND = "settings"
SIGNING_KEY_NAME = "token-signing-key"

SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 1
_KEY_ALPHABET = string.ascii_uppercase + "234567"
TOKEN_TTL_S = 3600


class RecordStore(Protocol):
    """The RefStore's small-record API (``lsmstore.refstore.base.RefStore``)."""

    async def put_record(
        self, kind: str, name: str, value: bytes, *, if_absent: bool = False
    ) -> None: ...

    async def get_record(self, kind: str, name: str) -> bytes: ...

    async def list_records(
        self, kind: str, *, after: str | None = None, limit: int = ...
    ) -> list[tuple[str, bytes]]: ...

    async def delete_record(self, kind: str, name: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated key: what it may do."""

    access_key_id: str
    role: Role
    repositories: tuple[str, ...] = ()  # empty: every repository
    created_at: int = 0

    def allows(self, action: Action, repository: str | None = None) -> bool:
        if _RANK[self.role] < _NEEDS[action]:
            return False
        return repository is None or not self.repositories or repository in self.repositories

    def sees(self, repository: str) -> bool:
        return not self.repositories or repository in self.repositories


@dataclass(frozen=True, slots=True)
class Credential:
    principal: Principal
    secret_hash: str

    def encode(self) -> bytes:
        p = self.principal
        return orjson.dumps(
            {
                "access_key_id": p.access_key_id,
                "role": p.role,
                "repositories": list(p.repositories),
                "created_at": p.created_at,
                "secret_hash": self.secret_hash,
            }
        )

    @staticmethod
    def decode(data: bytes) -> Credential:
        doc = orjson.loads(data)
        return Credential(
            Principal(
                doc["access_key_id"],
                doc["role"],
                tuple(doc.get("repositories") or ()),
                int(doc.get("created_at", 0)),
            ),
            doc["secret_hash"],
        )


def hash_secret(secret: str, salt: bytes | None = None) -> str:
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(
        secret.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    b64 = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def verify_secret(secret: str, encoded: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = encoded.split("$")
        if scheme != "scrypt":
            return False
        want = base64.b64decode(digest)
        got = hashlib.scrypt(
            secret.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(want),
        )
    except (ValueError, binascii.Error):
        return False
    return hmac.compare_digest(got, want)


def new_access_key_id() -> str:
    return "AKIAL" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(15))


def new_secret() -> str:
    return secrets.token_urlsafe(30)


@dataclass(slots=True)
class _Cached:
    principal: Principal
    secret_sha: bytes
    expires: float


@dataclass
class Authenticator:
    """Checks ``Authorization`` headers against the stored keys (module docstring)."""

    records: RecordStore
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    cache_ttl_s: float = 60.0
    cache_entries: int = 10_000
    throttle: AuthThrottle | None = None
    _cache: OrderedDict[str, _Cached] = field(default_factory=OrderedDict)
    _signing_key: bytes | None = None
    #: key id -> (principal, secret, expiry): S3 signature checks within ``cache_ttl_s``
    #: cost no RefStore read (a deletion in another process shows within the TTL, as
    #: for Basic credentials).  Only in memory, never logged.
    _secrets: OrderedDict[str, tuple[Principal, str, float]] = field(default_factory=OrderedDict)

    # --- keys ------------------------------------------------------------------------

    async def create_key(
        self,
        role: Role,
        repositories: tuple[str, ...] = (),
        *,
        access_key_id: str | None = None,
        secret: str | None = None,
    ) -> tuple[Principal, str]:
        """A new key and its secret (the only time the secret is available)."""
        if role not in ROLES:
            raise InvalidInputError(f"unknown role {role!r} (known: {', '.join(ROLES)})")
        for repo in repositories:
            check_repository_name(repo)
        key_id = access_key_id or new_access_key_id()
        if not key_id.isascii() or not key_id.isalnum() or not 3 <= len(key_id) <= 128:
            raise InvalidInputError("an access key id is 3-128 ASCII letters and digits")
        secret = secret or new_secret()
        if len(secret) < 8:
            raise InvalidInputError("a secret has at least 8 characters")
        encoded = await asyncio.to_thread(hash_secret, secret)
        principal = Principal(key_id, role, tuple(repositories), int(self.wall_clock()))
        await self.records.put_record(
            KIND, key_id, Credential(principal, encoded).encode(), if_absent=True
        )
        # After the credential (a crash in between leaves a key without S3 access, never
        # a sealed secret overwriting another key's): lsmstore.server.sealing.
        sealed = sealing.seal(await self._key(), key_id, secret)
        await self.records.put_record(sealing.KIND, key_id, sealed)
        return principal, secret

    async def list_keys(self) -> list[Principal]:
        out: list[Principal] = []
        after: str | None = None
        while True:
            page = await self.records.list_records(KIND, after=after, limit=1000)
            out.extend(Credential.decode(v).principal for _, v in page)
            if len(page) < 1000:
                return out
            after = page[-1][0]

    async def has_keys(self) -> bool:
        return bool(await self.records.list_records(KIND, limit=1))

    async def delete_key(self, access_key_id: str) -> None:
        await self.records.delete_record(KIND, access_key_id)
        self._cache.pop(access_key_id, None)
        self._secrets.pop(access_key_id, None)
        with contextlib.suppress(NotFoundError):
            await self.records.delete_record(sealing.KIND, access_key_id)

    async def signing_secret(self, key_id: str) -> tuple[Principal, str] | None:
        """The principal and the secret of ``key_id`` for checking a request signature
        (S3's SigV4 / SigV2), or None for an unknown key or one created before secrets
        were sealed (:mod:`lsmstore.server.sealing`).  Remembered for ``cache_ttl_s``: a
        key deleted in this process stops at once, in another within the TTL."""
        now = self.clock()
        hit = self._secrets.get(key_id)
        if hit is not None and hit[2] > now:
            return hit[0], hit[1]
        cred = await self._load(key_id)
        if cred is None:
            return None
        try:
            sealed = await self.records.get_record(sealing.KIND, key_id)
        except NotFoundError:
            return None
        secret = sealing.unseal(await self._key(), key_id, sealed)
        if secret is None:
            return None
        self._secrets[key_id] = (cred.principal, secret, now + self.cache_ttl_s)
        self._secrets.move_to_end(key_id)
        while len(self._secrets) > self.cache_entries:
            self._secrets.popitem(last=False)
        return cred.principal, secret

    # --- requests --------------------------------------------------------------------

    async def authenticate(self, header: str | None, client: str | None = None) -> Principal:
        """The principal of an ``Authorization`` header, or ApiError(401); ApiError(429)
        while its key id or the ``client`` address is throttled (:mod:`.throttle`)."""
        if self.throttle is None or not header:
            return await self._authenticate(header)
        return await self.throttle.guard(
            lambda: _claimed_key_id(header), client, lambda: self._authenticate(header)
        )

    async def login(self, key_id: str, secret: str, client: str | None = None) -> Principal:
        """:meth:`check_secret`, throttled like :meth:`authenticate`."""
        if self.throttle is None:
            return await self.check_secret(key_id, secret)
        return await self.throttle.guard(
            lambda: key_id, client, lambda: self.check_secret(key_id, secret)
        )

    async def _authenticate(self, header: str | None) -> Principal:
        if not header:
            raise ApiError(
                401, "missing credentials", {"WWW-Authenticate": 'Basic realm="lsmstore"'}
            )
        scheme, _, value = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raise _unauthorized() from None
            key_id, sep, secret = decoded.partition(":")
            if not sep:
                raise _unauthorized()
            return await self.check_secret(key_id, secret)
        if scheme == "bearer":
            return await self._check_token(value.strip())
        raise _unauthorized()

    async def check_secret(self, key_id: str, secret: str) -> Principal:
        sha = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()
        now = self.clock()
        hit = self._cache.get(key_id)
        if hit is not None and hit.expires > now:
            if hmac.compare_digest(hit.secret_sha, sha):
                return hit.principal
            raise _unauthorized()
        cred = await self._load(key_id)
        if cred is None or not await asyncio.to_thread(verify_secret, secret, cred.secret_hash):
            raise _unauthorized()
        self._remember(key_id, _Cached(cred.principal, sha, now + self.cache_ttl_s))
        return cred.principal

    async def _load(self, key_id: str) -> Credential | None:
        if not key_id or len(key_id) > 128:
            return None
        try:
            return Credential.decode(await self.records.get_record(KIND, key_id))
        except NotFoundError:
            return None

    def _remember(self, key_id: str, entry: _Cached) -> None:
        self._cache[key_id] = entry
        self._cache.move_to_end(key_id)
        while len(self._cache) > self.cache_entries:
            self._cache.popitem(last=False)

    # --- tokens ----------------------------------------------------------------------

    async def _key(self) -> bytes:
        if self._signing_key is None:
            try:
                self._signing_key = await self.records.get_record(SETTINGS_KIND, SIGNING_KEY_NAME)
            except NotFoundError:
                try:
                    await self.records.put_record(
                        SETTINGS_KIND, SIGNING_KEY_NAME, secrets.token_bytes(32), if_absent=True
                    )
                except Exception:  # another process created it first
                    pass
                self._signing_key = await self.records.get_record(SETTINGS_KIND, SIGNING_KEY_NAME)
        return self._signing_key

    async def issue_token(self, principal: Principal, ttl_s: int = TOKEN_TTL_S) -> tuple[str, int]:
        exp = int(self.wall_clock()) + ttl_s
        payload = _b64(orjson.dumps({"sub": principal.access_key_id, "exp": exp}))
        sig = _b64(hmac.new(await self._key(), payload.encode(), hashlib.sha256).digest())
        return f"{payload}.{sig}", exp

    async def _check_token(self, token: str) -> Principal:
        payload, sep, sig = token.partition(".")
        if not sep:
            raise _unauthorized()
        want = hmac.new(await self._key(), payload.encode(), hashlib.sha256).digest()
        try:
            got = _unb64(sig)
            doc: Any = orjson.loads(_unb64(payload))
        except (ValueError, binascii.Error, orjson.JSONDecodeError):
            raise _unauthorized() from None
        if not hmac.compare_digest(got, want) or not isinstance(doc, dict):
            raise _unauthorized()
        exp, sub = doc.get("exp"), doc.get("sub")
        if not isinstance(exp, int) or not isinstance(sub, str) or exp <= self.wall_clock():
            raise _unauthorized()
        hit = self._cache.get(sub)
        if hit is not None and hit.expires > self.clock():
            return hit.principal
        cred = await self._load(sub)
        if cred is None:
            raise _unauthorized()
        return cred.principal


def _claimed_key_id(header: str) -> str | None:
    """The access key id Basic credentials name (None for other schemes, or junk)."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    key_id, sep, _ = decoded.partition(":")
    return key_id[:128] if sep else None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _unauthorized() -> ApiError:
    return ApiError(401, "invalid credentials", {"WWW-Authenticate": 'Basic realm="lsmstore"'})


def forbidden(principal: Principal, action: str, repository: str | None) -> ApiError:
    where = f" on repository {repository!r}" if repository else ""
    return ApiError(
        403, f"access key {principal.access_key_id} ({principal.role}) may not {action}{where}"
    )
