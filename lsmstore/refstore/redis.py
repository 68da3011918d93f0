"""The Redis RefStore: one Lua script per mutation, atomic on the Redis server.

Key layout under ``key_prefix`` (``P``; see docs/refstore.md)::

    P repos                 sorted set (score 0) of repository names
    P repo:<repo>           hash: storage_namespace, default_branch, created_at, metadata
    P refs:<repo>           sorted set (score 0) of the repository's ref names
    P ref:<repo>:<name>     hash: kind, base, l2, l1 (id lists comma-joined, see codec),
                            consumed (the ids the branch's swaps consumed; never read
                            by get_ref or listings)
    P lease:<key>           string: the owner, expiring with the lease (PX)

A script sees and changes a ref, its repository and the indexes in one atomic step,
so the indexes never disagree with the hashes.  Scripts are sent with ``EVALSHA``
and loaded again after ``NOSCRIPT`` (a restarted or flushed server).  A rejected
operation returns the value the script saw; the pure rule in
:mod:`lsmstore.refstore.transitions` then raises the error the contract names.
Scripts build some key names themselves, so all keys must live on one server (no
Redis Cluster).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

from redis import exceptions as redis_errors
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from lsmstore.errors import (
    ConflictError,
    RefExistsError,
    RefNotFoundError,
    RepositoryNotFoundError,
    UnavailableError,
)
from lsmstore.refstore import transitions
from lsmstore.refstore.base import (
    MAX_CONSUMED_IDS,
    MAX_FILE_IDS,
    Ref,
    RefKind,
    RefStore,
    Repository,
    encode_metadata,
)
from lsmstore.refstore.codec import decode_ids, decode_kind, encode_ids, prefix_end

T = TypeVar("T")

_LIB = """
local function count(s)
  if s == '' then return 0 end
  local _, n = string.gsub(s, ',', ',')
  return n + 1
end
local function has(s, id)  -- without copying s: it may be a long consumed tail
  local init = 1
  while true do
    local i, j = string.find(s, id, init, true)
    if not i then return false end
    if (i == 1 or string.byte(s, i - 1) == 44) and (j == #s or string.byte(s, j + 1) == 44) then
      return true
    end
    init = i + 1
  end
end
local function starts(s, p)
  if p == '' or s == p then return true end
  return string.sub(s, 1, #p + 1) == p .. ','
end
local function drop(s, p)
  if p == '' then return s end
  if s == p then return '' end
  return string.sub(s, #p + 2)
end
local function load(key)
  local v = redis.call('HMGET', key, 'kind', 'base', 'l2', 'l1')
  if not v[1] then return nil end
  return v
end
local function missing(repo_key)
  if redis.call('EXISTS', repo_key) == 1 then return {'noref'} end
  return {'norepo'}
end
local function reply(status, v) return {status, v[1], v[2], v[3], v[4]} end
-- Both swaps' condition: a branch on base b whose L2 is l2 and whose L1 starts with p.
local function swappable(v, b, l2, p)
  return v[1] == 'branch' and v[2] == b and v[3] == l2 and starts(v[4], p)
end
-- The consumed tail after a swap took prefix p: the last `cap` ids, but all of p.
local function consume(key, p, cap)
  if p == '' then return end
  local c = redis.call('HGET', key, 'consumed')
  if c and c ~= '' then c = c .. ',' .. p else c = p end
  local n, keep = count(c), math.max(cap, count(p))
  if n > keep then
    local pos = 0
    for _ = 1, n - keep do pos = string.find(c, ',', pos + 1, true) end
    c = string.sub(c, pos + 1)
  end
  redis.call('HSET', key, 'consumed', c)
end
"""

# KEYS: ref hash, repository hash.  ARGV: id, max ids.  An id in L1 or consumed: no-op.
_APPEND = """
local v = load(KEYS[1])
if not v then return missing(KEYS[2]) end
if v[1] ~= 'branch' then return reply('rejected', v) end
if has(v[4], ARGV[1]) then return reply('ok', v) end
local consumed = redis.call('HGET', KEYS[1], 'consumed')
if consumed and has(consumed, ARGV[1]) then return reply('ok', v) end
if count(v[3]) + count(v[4]) + 1 > tonumber(ARGV[2]) then return reply('rejected', v) end
if v[4] == '' then v[4] = ARGV[1] else v[4] = v[4] .. ',' .. ARGV[1] end
redis.call('HSET', KEYS[1], 'l1', v[4])
return reply('ok', v)
"""

# KEYS: ref hash, repository hash.  ARGV: base, l2_old, l1_prefix, l2_new, max ids,
# consumed ids kept.
_SWAP_COMPACTED = """
local v = load(KEYS[1])
if not v then return missing(KEYS[2]) end
if not swappable(v, ARGV[1], ARGV[2], ARGV[3]) then return reply('rejected', v) end
local l1 = drop(v[4], ARGV[3])
if count(ARGV[4]) + count(l1) > tonumber(ARGV[5]) then return reply('rejected', v) end
redis.call('HSET', KEYS[1], 'l2', ARGV[4], 'l1', l1)
consume(KEYS[1], ARGV[3], tonumber(ARGV[6]))
v[3] = ARGV[4]
v[4] = l1
return reply('ok', v)
"""

# KEYS: ref hash, repository hash.  ARGV: base, l2_old, l1_prefix, new_base, consumed
# ids kept.
_SWAP_COMMITTED = """
local v = load(KEYS[1])
if not v then return missing(KEYS[2]) end
if not swappable(v, ARGV[1], ARGV[2], ARGV[3]) then return reply('rejected', v) end
v[2] = ARGV[4]
v[3] = ''
v[4] = drop(v[4], ARGV[3])
redis.call('HSET', KEYS[1], 'base', v[2], 'l2', v[3], 'l1', v[4])
consume(KEYS[1], ARGV[3], tonumber(ARGV[5]))
return reply('ok', v)
"""

# KEYS: ref hash, repository hash.  ARGV: expected base, new base.
_SET_BASE = """
local v = load(KEYS[1])
if not v then return missing(KEYS[2]) end
if v[1] ~= 'branch' or v[2] ~= ARGV[1] then return reply('rejected', v) end
v[2] = ARGV[2]
redis.call('HSET', KEYS[1], 'base', v[2])
return reply('ok', v)
"""

# KEYS: ref hash, repository hash, ref index.  ARGV: name, kind, base, l2, l1.
_CREATE_REF = """
if redis.call('EXISTS', KEYS[2]) == 0 then return {'norepo'} end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
redis.call('HSET', KEYS[1], 'kind', ARGV[2], 'base', ARGV[3], 'l2', ARGV[4], 'l1', ARGV[5])
redis.call('ZADD', KEYS[3], 0, ARGV[1])
return {'ok'}
"""

# KEYS: ref hash, repository hash, ref index.  ARGV: name, expected kind, base, l2, l1.
_DELETE_REF = """
local v = load(KEYS[1])
if not v then return missing(KEYS[2]) end
if v[1] ~= ARGV[2] or v[2] ~= ARGV[3] or v[3] ~= ARGV[4] or v[4] ~= ARGV[5] then
  return reply('rejected', v)
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return {'ok'}
"""

# KEYS: repository hash, repository index.  ARGV: name, namespace, default, created, metadata.
_CREATE_REPOSITORY = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
redis.call('HSET', KEYS[1], 'storage_namespace', ARGV[2], 'default_branch', ARGV[3],
           'created_at', ARGV[4], 'metadata', ARGV[5])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return {'ok'}
"""

# KEYS: repository hash, repository index, ref index.  ARGV: name, ref key prefix.
_DELETE_REPOSITORY = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'norepo'} end
local names = redis.call('ZRANGE', KEYS[3], 0, -1)
for i = 1, #names, 1000 do
  local batch = {}
  for j = i, math.min(i + 999, #names) do batch[#batch + 1] = ARGV[2] .. names[j] end
  redis.call('DEL', unpack(batch))
end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[1])
return {'ok'}
"""

# KEYS: repository hash.  ARGV: ref key prefix, names...  (read only)
_GET_REFS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'norepo'} end
local out = {'ok'}
for i = 2, #ARGV do
  local v = load(ARGV[1] .. ARGV[i])
  if v then
    for _, x in ipairs({ARGV[i], v[1], v[2], v[3], v[4]}) do out[#out + 1] = x end
  end
end
return out
"""

# KEYS: repository hash, ref index.  ARGV: lex min, lex max, limit, ref key prefix.
_LIST_REFS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'norepo'} end
local out = {'ok'}
if tonumber(ARGV[3]) == 0 then return out end
local names = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], ARGV[2], 'LIMIT', 0, ARGV[3])
for _, name in ipairs(names) do
  local v = load(ARGV[4] .. name)
  if v then
    for _, x in ipairs({name, v[1], v[2], v[3], v[4]}) do out[#out + 1] = x end
  end
end
return out
"""

# KEYS: repository index.  ARGV: lex min, limit, repository key prefix.  (read only)
_LIST_REPOSITORIES = """
local out = {}
if tonumber(ARGV[2]) == 0 then return out end
local names = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], '+', 'LIMIT', 0, ARGV[2])
for _, name in ipairs(names) do
  local v = redis.call('HMGET', ARGV[3] .. name,
                       'storage_namespace', 'default_branch', 'created_at', 'metadata')
  if v[1] then
    for _, x in ipairs({name, v[1], v[2], v[3], v[4]}) do out[#out + 1] = x end
  end
end
return out
"""

# KEYS: lease.  ARGV: owner, ttl in ms.
_ACQUIRE_LEASE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# KEYS: lease.  ARGV: owner.
_RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""

_CONNECTION_ERRORS = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    OSError,
    TimeoutError,
)


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit((parts.scheme, user + netloc, parts.path, parts.query, parts.fragment))


def _ref(fields: Sequence[str], where: str) -> Ref:
    kind, base, l2, l1 = fields
    return Ref(decode_kind(kind, where), base, decode_ids(l2), decode_ids(l1))


class RedisRefStore(RefStore):
    """RefStore on a Redis server (``redis://`` or ``rediss://`` URL, no query).

    ``timeout`` bounds connecting, each command, and waiting for one of the
    ``max_connections`` pooled connections.
    """

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "lsm:",
        max_connections: int = 64,
        timeout: float = 5.0,
    ) -> None:
        self.url = _redact(url)
        self.key_prefix = key_prefix
        self._pool = BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            decode_responses=True,
            retry=Retry(NoBackoff(), 0),  # we decide what is safe to retry
        )
        self._redis = Redis(connection_pool=self._pool)
        script = self._redis.register_script
        self._append = script(_LIB + _APPEND)
        self._swap_compacted_script = script(_LIB + _SWAP_COMPACTED)
        self._swap_committed_script = script(_LIB + _SWAP_COMMITTED)
        self._set_base_script = script(_LIB + _SET_BASE)
        self._create_ref_script = script(_LIB + _CREATE_REF)
        self._delete_ref_script = script(_LIB + _DELETE_REF)
        self._create_repository_script = script(_CREATE_REPOSITORY)
        self._delete_repository_script = script(_DELETE_REPOSITORY)
        self._get_refs_script = script(_LIB + _GET_REFS)
        self._list_refs_script = script(_LIB + _LIST_REFS)
        self._list_repositories_script = script(_LIST_REPOSITORIES)
        self._acquire_lease_script = script(_ACQUIRE_LEASE)
        self._release_lease_script = script(_RELEASE_LEASE)

    # --- keys ------------------------------------------------------------------------

    def _repos_key(self) -> str:
        return f"{self.key_prefix}repos"

    def _repo_key(self, repo: str) -> str:
        return f"{self.key_prefix}repo:{repo}"

    def _refs_key(self, repo: str) -> str:
        return f"{self.key_prefix}refs:{repo}"

    def _ref_prefix(self, repo: str) -> str:
        return f"{self.key_prefix}ref:{repo}:"

    def _ref_key(self, repo: str, name: str) -> str:
        return self._ref_prefix(repo) + name

    # --- calls -----------------------------------------------------------------------

    async def _call(
        self, what: str, fn: Callable[[], Awaitable[T]], *, mutation: bool, idempotent: bool
    ) -> T:
        """Run ``fn``; map Redis failures to UnavailableError.

        An idempotent call is retried once on a fresh connection (a pooled connection
        may be stale after a server restart); others never, so that an applied attempt
        is not reported as a conflict.
        """
        attempts = 2 if idempotent else 1
        for attempt in range(attempts):
            try:
                return await fn()
            except _CONNECTION_ERRORS as e:
                if attempt + 1 < attempts:
                    continue
                raise UnavailableError(
                    f"redis {self.url}: {what}: {e}", outcome_unknown=mutation
                ) from e
            except redis_errors.RedisError as e:  # OOM, READONLY, BUSY, ...
                raise UnavailableError(
                    f"redis {self.url}: {what}: {e}", outcome_unknown=mutation
                ) from e
        raise AssertionError("unreachable")

    async def _script(
        self,
        what: str,
        script: Any,
        keys: list[str],
        args: list[str | int],
        *,
        idempotent: bool = False,
        mutation: bool = True,
    ) -> list[Any]:
        result = await self._call(
            what, lambda: script(keys=keys, args=args), mutation=mutation, idempotent=idempotent
        )
        return list(result)

    @staticmethod
    def _status(repo: str, name: str, reply: list[Any]) -> Ref | None:
        """The value in an 'ok'/'rejected' reply; not-found and exists replies raise."""
        status = reply[0]
        if status == "norepo":
            raise RepositoryNotFoundError(f"repository not found: {repo}")
        if status == "noref":
            raise RefNotFoundError(f"ref not found: {repo}/{name}")
        if status == "exists":
            raise RefExistsError(f"ref already exists: {repo}/{name}")
        return _ref(reply[1:5], f"redis ref {repo}/{name}") if len(reply) == 5 else None

    async def _mutate(
        self,
        repo: str,
        branch: str,
        what: str,
        script: Any,
        args: list[str | int],
        rule: Callable[[Ref], Ref],
        *,
        idempotent: bool = False,
    ) -> Ref:
        keys = [self._ref_key(repo, branch), self._repo_key(repo)]
        reply = await self._script(what, script, keys, args, idempotent=idempotent)
        value = self._status(repo, branch, reply)
        assert value is not None
        if reply[0] == "ok":
            return value
        rule(value)  # raises the contract's error for the value the script saw
        raise ConflictError(f"{repo}/{branch}: {what} rejected by the server", found=value)

    # --- repositories ----------------------------------------------------------------

    async def _create_repository(self, repo: Repository) -> None:
        reply = await self._script(
            "create repository",
            self._create_repository_script,
            [self._repo_key(repo.name), self._repos_key()],
            [
                repo.name,
                repo.storage_namespace,
                repo.default_branch,
                repr(float(repo.created_at)),
                encode_metadata(repo.metadata),
            ],
        )
        if reply[0] == "exists":
            raise RefExistsError(f"repository already exists: {repo.name}")

    async def _get_repository(self, name: str) -> Repository:
        fields = await self._call(
            "get repository",
            lambda: self._redis.hmget(
                self._repo_key(name),
                ["storage_namespace", "default_branch", "created_at", "metadata"],
            ),
            mutation=False,
            idempotent=True,
        )
        if fields[0] is None:
            raise RepositoryNotFoundError(f"repository not found: {name}")
        return self._repository(name, cast(list[str], fields))

    @staticmethod
    def _repository(name: str, fields: Sequence[str]) -> Repository:
        ns, default_branch, created_at, metadata = fields
        return Repository(name, ns, default_branch, float(created_at), json.loads(metadata))

    async def _list_repositories(self, after: str | None, limit: int) -> list[Repository]:
        reply = await self._script(
            "list repositories",
            self._list_repositories_script,
            [self._repos_key()],
            ["-" if after is None else f"({after}", limit, self._repo_key("")],
            idempotent=True,
            mutation=False,
        )
        return [self._repository(reply[i], reply[i + 1 : i + 5]) for i in range(0, len(reply), 5)]

    async def _delete_repository(self, name: str) -> None:
        reply = await self._script(
            "delete repository",
            self._delete_repository_script,
            [self._repo_key(name), self._repos_key(), self._refs_key(name)],
            [name, self._ref_prefix(name)],
        )
        if reply[0] == "norepo":
            raise RepositoryNotFoundError(f"repository not found: {name}")

    # --- refs ------------------------------------------------------------------------

    async def _get_ref(self, repo: str, name: str) -> Ref:
        fields = await self._call(
            "get ref",
            lambda: self._redis.hmget(self._ref_key(repo, name), ["kind", "base", "l2", "l1"]),
            mutation=False,
            idempotent=True,
        )
        if fields[0] is not None:
            return _ref(cast(list[str], fields), f"redis ref {repo}/{name}")
        exists = await self._call(
            "get ref",
            lambda: self._redis.exists(self._repo_key(repo)),
            mutation=False,
            idempotent=True,
        )
        if not exists:
            raise RepositoryNotFoundError(f"repository not found: {repo}")
        raise RefNotFoundError(f"ref not found: {repo}/{name}")

    @staticmethod
    def _refs(repo: str, reply: list[Any]) -> list[tuple[str, Ref]]:
        if reply[0] == "norepo":
            raise RepositoryNotFoundError(f"repository not found: {repo}")
        return [
            (reply[i], _ref(reply[i + 1 : i + 5], f"redis ref {repo}/{reply[i]}"))
            for i in range(1, len(reply), 5)
        ]

    async def _get_refs(self, repo: str, names: list[str]) -> dict[str, Ref]:
        reply = await self._script(
            "get refs",
            self._get_refs_script,
            [self._repo_key(repo)],
            [self._ref_prefix(repo), *names],
            idempotent=True,
            mutation=False,
        )
        return dict(self._refs(repo, reply))

    async def _list_refs(
        self, repo: str, prefix: str, after: str | None, limit: int, kind: RefKind | None
    ) -> list[tuple[str, Ref]]:
        low = f"[{prefix}" if prefix else "-"
        if after is not None and after >= prefix:
            low = f"({after}"
        end = prefix_end(prefix)
        high = "+" if end is None else f"({end}"
        reply = await self._script(
            "list refs",
            self._list_refs_script,
            [self._repo_key(repo), self._refs_key(repo)],
            [low, high, limit, self._ref_prefix(repo)],
            idempotent=True,
            mutation=False,
        )
        return [(n, r) for n, r in self._refs(repo, reply) if kind is None or r.kind == kind]

    async def _create_ref(self, repo: str, name: str, ref: Ref) -> None:
        reply = await self._script(
            "create ref",
            self._create_ref_script,
            [self._ref_key(repo, name), self._repo_key(repo), self._refs_key(repo)],
            [name, ref.kind, ref.base, encode_ids(ref.l2), encode_ids(ref.l1)],
        )
        self._status(repo, name, reply)

    async def _delete_ref(self, repo: str, name: str, expected: Ref) -> None:
        reply = await self._script(
            "delete ref",
            self._delete_ref_script,
            [self._ref_key(repo, name), self._repo_key(repo), self._refs_key(repo)],
            [name, expected.kind, expected.base, encode_ids(expected.l2), encode_ids(expected.l1)],
        )
        found = self._status(repo, name, reply)
        if found is not None:
            transitions.delete(f"{repo}/{name}", found, expected)
            raise ConflictError(f"{repo}/{name}: delete rejected by the server", found=found)

    # --- branch operations --------------------------------------------------------------

    async def _append_l1(self, repo: str, branch: str, file_id: str) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            "append_l1",
            self._append,
            [file_id, MAX_FILE_IDS],
            # The script rejects only an id in neither L1 nor the tail (for size).
            lambda cur: transitions.append_l1(where, cur, file_id),
            idempotent=True,
        )

    async def _swap_compacted(
        self,
        repo: str,
        branch: str,
        base: str,
        l2_old: tuple[str, ...],
        l1_prefix: tuple[str, ...],
        l2_new: tuple[str, ...],
    ) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            "swap_compacted",
            self._swap_compacted_script,
            [
                base,
                encode_ids(l2_old),
                encode_ids(l1_prefix),
                encode_ids(l2_new),
                MAX_FILE_IDS,
                MAX_CONSUMED_IDS,
            ],
            lambda cur: transitions.swap_compacted(where, cur, base, l2_old, l1_prefix, l2_new),
        )

    async def _swap_committed(
        self,
        repo: str,
        branch: str,
        base: str,
        l2_old: tuple[str, ...],
        l1_prefix: tuple[str, ...],
        new_base: str,
    ) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            "swap_committed",
            self._swap_committed_script,
            [base, encode_ids(l2_old), encode_ids(l1_prefix), new_base, MAX_CONSUMED_IDS],
            lambda cur: transitions.swap_committed(where, cur, base, l2_old, l1_prefix, new_base),
        )

    async def _set_base(self, repo: str, branch: str, expected_base: str, new_base: str) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            "set_base",
            self._set_base_script,
            [expected_base, new_base],
            lambda cur: transitions.set_base(where, cur, expected_base, new_base),
        )

    # --- leases --------------------------------------------------------------------------

    def _lease_key(self, key: str) -> str:
        return f"{self.key_prefix}lease:{key}"

    async def _acquire_lease(self, key: str, owner: str, ttl_seconds: float) -> bool:
        ttl_ms = max(1, round(ttl_seconds * 1000))
        reply = await self._call(
            "acquire lease",
            lambda: self._acquire_lease_script(keys=[self._lease_key(key)], args=[owner, ttl_ms]),
            mutation=True,
            idempotent=True,
        )
        return bool(reply)

    async def _release_lease(self, key: str, owner: str) -> None:
        await self._call(
            "release lease",
            lambda: self._release_lease_script(keys=[self._lease_key(key)], args=[owner]),
            mutation=True,
            idempotent=True,
        )

    # --- life cycle -------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._redis.aclose()
        await self._pool.disconnect()
