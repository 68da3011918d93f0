"""Access keys, as lakeFS has them: an access key id and a secret.

Clients send ``Authorization: Basic base64(<access key id>:<secret>)`` (the lakeFS SDK,
lakectl, lakefs-spec) or ``Authorization: Bearer <token>`` with a token from
``POST /api/v1/auth/login``.  docs/security.md has the threat model.

**Storage.** One RefStore record per key (kind ``credentials``, name = access key id),
JSON: the role, the repositories it is limited to (empty: all), its creation time,
its ``generation`` (16 random bytes, hex: a key deleted and created again under the
same id is another generation) and ``secret_hash`` =
``scrypt$<n>$<r>$<p>$<salt>$<digest>`` (base64; n=2^14, r=8, p=1, 16-byte random
salt, 32-byte digest).  The secret itself is never stored: it is shown once, when
the key is created.

**Verification.** scrypt is slow on purpose (tens of ms), so it runs in a thread.  An
unknown key id costs the same scrypt work as a wrong secret (against a hash of no
key), so the answer time tells nothing about which key ids exist.  A successful check
is remembered per key id with the key's generation and the SHA-256 of the secret
(never the secret): a client's next requests cost a dictionary lookup.  Requests
from one address that present the same credentials while they are being checked share
that one check, throttle included (:meth:`Authenticator.authenticate`): a busy
client's connections arriving together at a fresh server, or when its entry expires,
cost one record read and at most one scrypt, not one each.  Digests and token
signatures are compared with :func:`hmac.compare_digest`.

**Propagation.** A remembered key is trusted for ``revalidate_s`` (2 s by default)
after its record was last read from the RefStore; the next request after that reads
the record again (one small read per active key and interval, no scrypt unless the
record changed).  So a key deleted, or deleted and created again, from any process
stops working on every server within ``revalidate_s`` of the change, and a new key
works at once.

**Roles.** ``reader`` may read; ``writer`` may also write (objects, branches, commits,
merges, tags); ``admin`` may also create and delete repositories and manage keys.
A key limited to repositories sees only those (others answer 403, listings skip them)
and may create no other.

**Tokens.** ``<payload>.<signature>``, both base64url: payload ``{"sub": key id,
"gen": key generation, "exp": epoch seconds}``, signature HMAC-SHA256 under the
server's signing secret (``server_auth_secret_key``, :mod:`lsmstore.server.secret`),
which never enters the RefStore.  A token is as good as its key generation: it stops
working, as the key does, when the key is deleted (and stays dead when a key of the
same id is created again).
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from lsmstore.errors import InvalidInputError, NotFoundError
from lsmstore.refstore.names import check_repository_name
from lsmstore.server import sealing
from lsmstore.server.errors import ApiError
from lsmstore.server.throttle import AuthThrottle
from lsmstore.tasks import retrieve_exception

Role = Literal["admin", "writer", "reader"]
ROLES: tuple[Role, ...] = ("admin", "writer", "reader")
Action = Literal["read", "write", "admin"]
_RANK = {"reader": 0, "writer": 1, "admin": 2}
_NEEDS = {"read": 0, "write": 1, "admin": 2}

KIND = "credentials"
SETTINGS_KIND = "settings"
#: The record that elects the process creating the first admin key (``--init``).
FIRST_ADMIN_NAME = "first-admin-key"

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
    #: The user the key belongs to (lsmstore.server.users); "": the key is its own.
    user: str = ""

    @property
    def user_id(self) -> str:
        return self.user or self.access_key_id

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
    generation: str

    def encode(self) -> bytes:
        p = self.principal
        return orjson.dumps(
            {
                "access_key_id": p.access_key_id,
                "role": p.role,
                "repositories": list(p.repositories),
                "created_at": p.created_at,
                "user": p.user,
                "generation": self.generation,
                "secret_hash": self.secret_hash,
            }
        )

    @staticmethod
    def decode(data: bytes) -> Credential:
        doc = orjson.loads(data)
        secret_hash = doc["secret_hash"]
        # Records written before generations existed: the random salt inside the hash
        # makes it unique per creation too.
        generation = doc.get("generation") or hashlib.sha256(secret_hash.encode()).hexdigest()[:32]
        return Credential(
            Principal(
                doc["access_key_id"],
                doc["role"],
                tuple(doc.get("repositories") or ()),
                int(doc.get("created_at", 0)),
                str(doc.get("user") or ""),
            ),
            secret_hash,
            generation,
        )


def hash_secret(secret: str, salt: bytes | None = None) -> str:
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(
        secret.encode("utf-8", "surrogatepass"),
        salt=salt,
        n=SCRYPT_N,
        r=SCRYPT_R,
        p=SCRYPT_P,
        dklen=32,
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
            secret.encode("utf-8", "surrogatepass"),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(want),
        )
    except (ValueError, binascii.Error):
        return False
    return hmac.compare_digest(got, want)


#: What an unknown key id's secret is checked against: the same scrypt work as a
#: known key's, so that the time of a refusal does not tell whether the id exists.
_NO_KEY_HASH = hash_secret(secrets.token_urlsafe(30))


def new_access_key_id() -> str:
    return "AKIAL" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(15))


def new_secret() -> str:
    return secrets.token_urlsafe(30)


def new_generation() -> str:
    return secrets.token_hex(16)


@dataclass(slots=True)
class _Cached:
    principal: Principal
    generation: str
    #: SHA-256 of the secret last verified for this generation (None: none yet).
    secret_sha: bytes | None
    #: When the record was read (monotonic clock, taken before the read).
    read_at: float


@dataclass(frozen=True, slots=True)
class _Basic:
    key_id: str
    secret: str


@dataclass(frozen=True, slots=True)
class _Token:
    key_id: str
    generation: str


@dataclass
class Authenticator:
    """Checks ``Authorization`` headers against the stored keys (module docstring).

    ``signing_key`` signs and checks tokens (None: this process issues and accepts
    none, as the credentials commands).  ``throttle`` counts failed authentications
    in the RefStore (:mod:`.throttle`); it is asked only when a request's credentials
    are not already known good, so it costs nothing on the hot path."""

    records: RecordStore
    signing_key: bytes | None = None
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    revalidate_s: float = 2.0
    cache_entries: int = 10_000
    throttle: AuthThrottle | None = None
    _cache: OrderedDict[str, _Cached] = field(default_factory=OrderedDict)
    #: key id -> (principal, secret, expiry): S3 signature checks within ``revalidate_s``
    #: cost no RefStore read (a deletion in another process shows within it, as for
    #: Basic credentials).  Only in memory, never logged.
    _secrets: OrderedDict[str, tuple[Principal, str, float]] = field(default_factory=OrderedDict)
    #: key id -> the one read of its secret in flight: the requests that miss together
    #: (every request of a busy key when its entry expires) share it.
    _secret_loads: dict[str, asyncio.Task[tuple[Principal, str] | None]] = field(
        default_factory=dict
    )
    #: (key id, SHA-256 of the secret or the token's generation, client address) -> the
    #: throttled check of those credentials in flight, which the requests presenting
    #: them meanwhile share.  An entry lives only while its check runs.
    _checks: dict[tuple[str, bytes | str, str | None], asyncio.Task[Principal]] = field(
        default_factory=dict
    )

    # --- keys ------------------------------------------------------------------------

    async def create_key(
        self,
        role: Role,
        repositories: tuple[str, ...] = (),
        *,
        access_key_id: str | None = None,
        secret: str | None = None,
        user: str = "",
    ) -> tuple[Principal, str]:
        """A new key and its secret (the only time the secret is available), belonging
        to ``user`` ("": to no user, it is its own).  RecordExistsError when the key id
        is taken."""
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
        principal = Principal(key_id, role, tuple(repositories), int(self.wall_clock()), user)
        await self.records.put_record(
            KIND,
            key_id,
            Credential(principal, encoded, new_generation()).encode(),
            if_absent=True,
        )
        # After the credential (a crash in between leaves a key without S3 access, never
        # a sealed secret overwriting another key's): lsmstore.server.sealing.  Without
        # the signing secret the key has no S3 access.
        if self.signing_key is not None:
            sealed = sealing.seal(self.signing_key, key_id, secret)
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

    async def key(self, access_key_id: str) -> Principal | None:
        """The key's principal, read now; None when there is no such key."""
        cred = await self._load(access_key_id)
        return cred.principal if cred is not None else None

    async def has_keys(self) -> bool:
        return bool(await self.records.list_records(KIND, limit=1))

    async def delete_key(self, access_key_id: str) -> None:
        """Delete the key: every server refuses it (and its tokens) within
        ``revalidate_s``.  RecordNotFoundError when there is no such key."""
        await self.records.delete_record(KIND, access_key_id)
        self._cache.pop(access_key_id, None)
        self._secrets.pop(access_key_id, None)
        self._secret_loads.pop(access_key_id, None)  # a read begun before: not kept
        for flight in [f for f in self._checks if f[0] == access_key_id]:
            del self._checks[flight]  # a check begun before: not shared any more
        with contextlib.suppress(NotFoundError):
            await self.records.delete_record(sealing.KIND, access_key_id)

    async def signing_secret(self, key_id: str) -> tuple[Principal, str] | None:
        """The principal and the secret of ``key_id`` for checking a request signature
        (S3's SigV4 / SigV2), or None for an unknown key or one created before secrets
        were sealed (:mod:`lsmstore.server.sealing`), or when this process has no
        signing secret.  Remembered for ``revalidate_s``: a key deleted in this process
        stops at once, in another within that time."""
        now = self.clock()
        hit = self._secrets.get(key_id)
        if hit is not None and hit[2] > now:
            return hit[0], hit[1]
        loading = self._secret_loads.get(key_id)
        if loading is None:
            loading = asyncio.ensure_future(self._load_secret(key_id, now))
            self._secret_loads[key_id] = loading
            loading.add_done_callback(retrieve_exception)
            loading.add_done_callback(lambda task: self._end_load(key_id, task))
        return await asyncio.shield(loading)

    def _end_load(self, key_id: str, task: asyncio.Task[Any]) -> None:
        if self._secret_loads.get(key_id) is task:
            del self._secret_loads[key_id]

    async def _load_secret(self, key_id: str, now: float) -> tuple[Principal, str] | None:
        cred = await self._load(key_id)
        if cred is None:
            return None
        try:
            sealed = await self.records.get_record(sealing.KIND, key_id)
        except NotFoundError:
            return None
        if self.signing_key is None:
            return None
        secret = sealing.unseal(self.signing_key, key_id, sealed)
        if secret is None:
            return None
        if self._secret_loads.get(key_id) is asyncio.current_task():  # not deleted since
            self._secrets[key_id] = (cred.principal, secret, now + self.revalidate_s)
            self._secrets.move_to_end(key_id)
            while len(self._secrets) > self.cache_entries:
                self._secrets.popitem(last=False)
        return cred.principal, secret

    # --- requests --------------------------------------------------------------------

    async def authenticate(self, header: str | None, client: str | None = None) -> Principal:
        """The principal of an ``Authorization`` header, or ApiError(401); ApiError(429)
        while its key id or the ``client`` address is throttled (:mod:`.throttle`)."""
        if not header:
            raise ApiError(
                401, "missing credentials", {"WWW-Authenticate": 'Basic realm="lsmstore"'}
            )
        parsed = self._parse(header)
        known = self._known(parsed)
        if known is not None:
            return known
        if parsed is None:
            return await self._guarded(None, client, lambda: self._check(None))
        claimed = parsed.key_id if isinstance(parsed, _Basic) else None
        return await self._shared_check(parsed, claimed, client)

    async def login(self, key_id: str, secret: str, client: str | None = None) -> Principal:
        """:meth:`check_secret`, throttled like :meth:`authenticate`."""
        parsed = _Basic(key_id, secret)
        known = self._known(parsed)
        if known is not None:
            return known
        return await self._shared_check(parsed, key_id, client)

    async def check_secret(self, key_id: str, secret: str) -> Principal:
        """The principal of a key id and secret, or ApiError(401) (not throttled)."""
        return self._known(_Basic(key_id, secret)) or await self._check(_Basic(key_id, secret))

    async def key_generation(self, principal: Principal) -> str:
        """The current generation of the key ``principal`` authenticated with (its cache
        entry, fresh after :meth:`authenticate`), for naming the caller in a forwarded
        request (:mod:`.forwarding`); ApiError(401) when the key is gone."""
        hit = self._cache.get(principal.access_key_id)
        if hit is not None and hit.read_at + self.revalidate_s > self.clock():
            return hit.generation
        cred = await self._load(principal.access_key_id)
        if cred is None:
            raise _unauthorized()
        return cred.generation

    async def check_generation(self, key_id: str, generation: str) -> Principal:
        """The principal of a key still at ``generation`` (as a token names it), or
        ApiError(401): the owner's check of a forwarded request's caller -- a key
        deleted or re-created since is refused, its current role applies."""
        parsed = _Token(key_id, generation)
        return self._known(parsed) or await self._check(parsed)

    async def _guarded(
        self, key_id: str | None, client: str | None, attempt: Callable[[], Awaitable[Principal]]
    ) -> Principal:
        if self.throttle is None:
            return await attempt()
        return await self.throttle.guard(key_id, client, attempt)

    def _parse(self, header: str) -> _Basic | _Token | None:
        """The credentials a header claims; None for junk (a malformed header, a token
        that is unsigned, signed with another secret, malformed or expired)."""
        scheme, _, value = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            key_id, sep, secret = decoded.partition(":")
            return _Basic(key_id, secret) if sep else None
        if scheme == "bearer":
            return self._token(value.strip())
        return None

    def _known(self, parsed: _Basic | _Token | None) -> Principal | None:
        """The principal when the cache proves the credentials good (fresh entry, same
        generation, same secret); None when the RefStore must be asked."""
        if parsed is None:
            return None
        hit = self._cache.get(parsed.key_id)
        if hit is None or hit.read_at + self.revalidate_s <= self.clock():
            return None
        if isinstance(parsed, _Token):
            return hit.principal if hmac.compare_digest(hit.generation, parsed.generation) else None
        if hit.secret_sha is not None and hmac.compare_digest(hit.secret_sha, _sha(parsed.secret)):
            return hit.principal
        return None

    async def _shared_check(
        self, parsed: _Basic | _Token, claimed: str | None, client: str | None
    ) -> Principal:
        """The throttled :meth:`_check`, run once for the requests from ``client``
        presenting the same credentials while it runs: they share its answer (a 401
        counts once: the same guess, made again at the same moment, tells nothing new)."""
        proof = _sha(parsed.secret) if isinstance(parsed, _Basic) else parsed.generation
        flight = (parsed.key_id, proof, client)
        task = self._checks.get(flight)
        if task is None:
            task = asyncio.ensure_future(
                self._guarded(claimed, client, lambda: self._check(parsed))
            )
            self._checks[flight] = task
            task.add_done_callback(retrieve_exception)
            task.add_done_callback(lambda done: self._end_check(flight, done))
        try:
            return await asyncio.shield(task)
        except ApiError as e:  # each request gets an answer of its own
            raise ApiError(e.status, e.message, e.headers, kind=e.kind) from None

    def _end_check(
        self, flight: tuple[str, bytes | str, str | None], task: asyncio.Task[Any]
    ) -> None:
        if self._checks.get(flight) is task:
            del self._checks[flight]

    async def _check(self, parsed: _Basic | _Token | None) -> Principal:
        """Credentials checked against the key's record, read now."""
        if parsed is None:
            raise _unauthorized()
        read_at = self.clock()
        cred = await self._load(parsed.key_id)
        if isinstance(parsed, _Token):
            if cred is None or not hmac.compare_digest(cred.generation, parsed.generation):
                raise _unauthorized()
            hit = self._cache.get(parsed.key_id)
            sha = hit.secret_sha if hit is not None and hit.generation == cred.generation else None
            self._remember(parsed.key_id, _Cached(cred.principal, cred.generation, sha, read_at))
            return cred.principal
        sha = _sha(parsed.secret)
        hit = self._cache.get(parsed.key_id)
        if (
            cred is not None
            and hit is not None
            and hit.generation == cred.generation
            and hit.secret_sha is not None
            and hmac.compare_digest(hit.secret_sha, sha)
        ):  # verified before, and the key is unchanged: no scrypt
            self._remember(parsed.key_id, _Cached(cred.principal, cred.generation, sha, read_at))
            return cred.principal
        encoded = cred.secret_hash if cred is not None else _NO_KEY_HASH
        good = await asyncio.to_thread(verify_secret, parsed.secret, encoded)
        if cred is None or not good:
            raise _unauthorized()
        self._remember(parsed.key_id, _Cached(cred.principal, cred.generation, sha, read_at))
        return cred.principal

    async def _load(self, key_id: str) -> Credential | None:
        if not key_id or len(key_id) > 128 or not key_id.isascii() or not key_id.isalnum():
            return None  # no key has such an id
        try:
            return Credential.decode(await self.records.get_record(KIND, key_id))
        except NotFoundError:
            self._cache.pop(key_id, None)
            return None

    def _remember(self, key_id: str, entry: _Cached) -> None:
        self._cache[key_id] = entry
        self._cache.move_to_end(key_id)
        while len(self._cache) > self.cache_entries:
            self._cache.popitem(last=False)

    # --- tokens ----------------------------------------------------------------------

    def _signer(self) -> bytes:
        if self.signing_key is None:
            raise ApiError(503, "this process has no token signing secret")
        return self.signing_key

    async def issue_token(self, principal: Principal, ttl_s: int = TOKEN_TTL_S) -> tuple[str, int]:
        """A token for ``principal``'s current key generation, valid ``ttl_s``."""
        cred = await self._load(principal.access_key_id)
        if cred is None:
            raise _unauthorized()
        exp = int(self.wall_clock()) + ttl_s
        payload = _b64(
            orjson.dumps({"sub": principal.access_key_id, "gen": cred.generation, "exp": exp})
        )
        sig = _b64(hmac.new(self._signer(), payload.encode(), hashlib.sha256).digest())
        return f"{payload}.{sig}", exp

    def _token(self, token: str) -> _Token | None:
        """The key a token names, if its signature is ours and it has not expired."""
        if self.signing_key is None:
            return None
        payload, sep, sig = token.partition(".")
        if not sep:
            return None
        want = hmac.new(self.signing_key, payload.encode(), hashlib.sha256).digest()
        try:
            got = _unb64(sig)
            if not hmac.compare_digest(got, want):
                return None
            doc: Any = orjson.loads(_unb64(payload))
        except (ValueError, binascii.Error, orjson.JSONDecodeError):
            return None
        if not isinstance(doc, dict):
            return None
        exp, sub, gen = doc.get("exp"), doc.get("sub"), doc.get("gen")
        if (
            not isinstance(exp, int)
            or not isinstance(sub, str)
            or not isinstance(gen, str)
            or not gen
            or exp <= self.wall_clock()
        ):
            return None
        return _Token(sub, gen)


def _sha(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


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
