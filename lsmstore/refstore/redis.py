"""The Redis RefStore: one Lua script per mutation, atomic on the Redis server.

Key layout under ``key_prefix`` (``P``; see docs/refstore.md)::

    P repos                 sorted set (score 0) of repository names
    P repo:<repo>           hash: storage_namespace, default_branch, created_at, metadata,
                            uid, location (absent for repositories recorded before)
    P refs:<repo>           sorted set (score 0) of the repository's ref names
    P ref:<repo>:<name>     hash: kind, base, l2, l1 (id lists comma-joined, see codec),
                            consumed (the ids the branch's swaps consumed; never read
                            by get_ref or listings)
    P lease:<key>           string: the owner, expiring with the lease (PX)
    P wss:<repo>            sorted set (score 0) of the repository's workspace names
    P ws:<repo>:<name>      hash: branch, base, l2, l1, created_at
    P moves:<repo>          integer: stash and pop count (kept when the repository goes)
    P recs:<kind>           sorted set (score 0) of the record names of a kind
    P rec:<kind>            hash: name -> value (base64)
    P ctr:<name>            hash: value, ends_at (a window counter; the key expires
                            when its window ends, by the server's clock)

A script sees and changes a ref, its repository and the indexes in one atomic step,
so the indexes never disagree with the hashes.  Scripts are sent with ``EVALSHA``
and loaded again after ``NOSCRIPT`` (a restarted or flushed server).  A rejected
operation returns the value the script saw; the pure rule in
:mod:`lsmstore.refstore.transitions` then raises the error the contract names.
Scripts build some key names themselves, so all keys must live on one server (no
Redis Cluster).
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

from redis import exceptions as redis_errors
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from lsmstore.errors import (
    ConflictError,
    RecordExistsError,
    RecordNotFoundError,
    RefExistsError,
    RefNotFoundError,
    RepositoryNotFoundError,
    UnavailableError,
    WorkspaceExistsError,
    WorkspaceNotFoundError,
)
from lsmstore.refstore import transitions
from lsmstore.refstore.base import (
    MAX_CONSUMED_IDS,
    MAX_FILE_IDS,
    MAX_GROUP_IDS,
    Ref,
    RefKind,
    RefStore,
    Repository,
    WindowCount,
    Workspace,
    encode_metadata,
    replaced_message,
)
from lsmstore.refstore.codec import decode_ids, decode_kind, encode_ids, prefix_end

T = TypeVar("T")


def _condition(repository_id: str | None) -> str:
    """An append's repository condition as the scripts take it."""
    return "" if repository_id is None else "=" + repository_id


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
-- An append's repository condition: '' for none, else '=' .. the expected uid.
local function replaced(repo_key, expected)
  if expected == '' then return false end
  return '=' .. (redis.call('HGET', repo_key, 'uid') or '') ~= expected
end
-- Both swaps' condition: a branch on base b whose L2 is l2 and whose L1 starts with p.
local function swappable(v, b, l2, p)
  return v[1] == 'branch' and v[2] == b and v[3] == l2 and starts(v[4], p)
end
-- The plain ids of p: qualified entries (they hold a '.') are never appended.
local function plain(p)
  if not string.find(p, '.', 1, true) then return p end
  local out = {}
  for e in string.gmatch(p, '[^,]+') do
    if not string.find(e, '.', 1, true) then out[#out + 1] = e end
  end
  return table.concat(out, ',')
end
-- The consumed tail after a swap took prefix p: the last `cap` ids, but all of p.
local function consume(key, p, cap)
  p = plain(p)
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

# KEYS: ref hash, repository hash.  ARGV: id, max ids, repository condition.  An id in
# L1 or consumed: no-op.
_APPEND = """
if replaced(KEYS[2], ARGV[3]) then return {'replaced'} end
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

# KEYS: ref hash, repository hash.  ARGV: group id ('' for none: append_l1_many), ids
# (comma-joined), max ids, max groups, repository condition.  A known group id: no-op;
# ids in L1 or consumed are skipped.
_APPEND_GROUP = """
if replaced(KEYS[2], ARGV[5]) then return {'replaced'} end
local v = load(KEYS[1])
if not v then return missing(KEYS[2]) end
if v[1] ~= 'branch' then return reply('rejected', v) end
local groups = redis.call('HGET', KEYS[1], 'groups') or ''
if ARGV[1] ~= '' and has(groups, ARGV[1]) then return reply('ok', v) end
local consumed = redis.call('HGET', KEYS[1], 'consumed') or ''
local add = {}
for id in string.gmatch(ARGV[2], '[^,]+') do
  if not has(v[4], id) and not has(consumed, id) then add[#add + 1] = id end
end
if count(v[3]) + count(v[4]) + #add > tonumber(ARGV[3]) then return reply('rejected', v) end
if #add > 0 then
  local joined = table.concat(add, ',')
  if v[4] == '' then v[4] = joined else v[4] = v[4] .. ',' .. joined end
end
if ARGV[1] == '' then
  if #add > 0 then redis.call('HSET', KEYS[1], 'l1', v[4]) end
  return reply('ok', v)
end
if groups == '' then groups = ARGV[1] else groups = groups .. ',' .. ARGV[1] end
local n = count(groups)
if n > tonumber(ARGV[4]) then
  local pos = 0
  for _ = 1, n - tonumber(ARGV[4]) do pos = string.find(groups, ',', pos + 1, true) end
  groups = string.sub(groups, pos + 1)
end
redis.call('HSET', KEYS[1], 'l1', v[4], 'groups', groups)
return reply('ok', v)
"""

# KEYS: ref hash, repository hash, workspace hash, workspace index, move counter.
# ARGV: expected kind, base, l2, l1, workspace name, branch, created_at, consumed kept.
_STASH = """
local v = load(KEYS[1])
if not v then return missing(KEYS[2]) end
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] or v[3] ~= ARGV[3] or v[4] ~= ARGV[4] then
  return reply('rejected', v)
end
if redis.call('EXISTS', KEYS[3]) == 1 then return {'wsexists'} end
redis.call('HSET', KEYS[3], 'branch', ARGV[6], 'base', v[2], 'l2', v[3], 'l1', v[4],
           'created_at', ARGV[7])
redis.call('ZADD', KEYS[4], 0, ARGV[5])
redis.call('HSET', KEYS[1], 'l2', '', 'l1', '')
consume(KEYS[1], v[4], tonumber(ARGV[8]))
redis.call('INCR', KEYS[5])
v[3] = ''
v[4] = ''
return reply('ok', v)
"""

# KEYS: ref hash, repository hash, workspace hash.  (read only)
_READ_POP = """
local v = load(KEYS[1])
local w = redis.call('HMGET', KEYS[3], 'branch', 'base', 'l2', 'l1', 'created_at')
if not w[1] then
  if redis.call('EXISTS', KEYS[2]) == 0 then return {'norepo'} end
  return {'nows'}
end
if not v then return missing(KEYS[2]) end
return {'ok', v[1], v[2], v[3], v[4], w[1], w[2], w[3], w[4], w[5]}
"""

# KEYS: ref hash, repository hash, workspace hash, workspace index, move counter.
# ARGV: kind, base, l2, l1 read before, the new l1, workspace name.  Applies the pop the
# caller computed if neither the ref nor the workspace changed since it read them.
_POP = """
local v = load(KEYS[1])
if not v or redis.call('EXISTS', KEYS[3]) == 0 then return {'retry'} end
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] or v[3] ~= ARGV[3] or v[4] ~= ARGV[4] then
  return {'retry'}
end
redis.call('HSET', KEYS[1], 'l1', ARGV[5])
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[6])
redis.call('INCR', KEYS[5])
return {'ok'}
"""

# KEYS: workspace hash, workspace index, repository hash.  ARGV: name.
_DROP_WORKSPACE = """
if redis.call('EXISTS', KEYS[3]) == 0 then return {'norepo'} end
if redis.call('DEL', KEYS[1]) == 0 then return {'nows'} end
redis.call('ZREM', KEYS[2], ARGV[1])
return {'ok'}
"""

# KEYS: repository hash, workspace index.  ARGV: lex min, limit, workspace key prefix.
_LIST_WORKSPACES = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'norepo'} end
local out = {'ok'}
if tonumber(ARGV[2]) == 0 then return out end
local names = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], '+', 'LIMIT', 0, ARGV[2])
for _, name in ipairs(names) do
  local w = redis.call('HMGET', ARGV[3] .. name, 'branch', 'base', 'l2', 'l1', 'created_at')
  if w[1] then
    for _, x in ipairs({name, w[1], w[2], w[3], w[4], w[5]}) do out[#out + 1] = x end
  end
end
return out
"""

# KEYS: record hash, record index.  ARGV: name, value (base64), if absent (0/1).
_PUT_RECORD = """
if ARGV[3] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
"""

# KEYS: record hash, record index.  ARGV: name.
_DELETE_RECORD = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""

# KEYS: record hash, record index.  ARGV: lex min, limit.  (read only)
_LIST_RECORDS = """
local out = {}
if tonumber(ARGV[2]) == 0 then return out end
local names = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], '+', 'LIMIT', 0, ARGV[2])
for _, name in ipairs(names) do
  local v = redis.call('HGET', KEYS[1], name)
  if v then
    out[#out + 1] = name
    out[#out + 1] = v
  end
end
return out
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

# KEYS: repository hash, repository index.  ARGV: name, namespace, default, created,
# metadata, uid, location.
_CREATE_REPOSITORY = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
redis.call('HSET', KEYS[1], 'storage_namespace', ARGV[2], 'default_branch', ARGV[3],
           'created_at', ARGV[4], 'metadata', ARGV[5], 'uid', ARGV[6], 'location', ARGV[7])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return {'ok'}
"""

# KEYS: repository hash, repository index, ref index, workspace index.  ARGV: name, ref
# key prefix, workspace key prefix.
_DELETE_REPOSITORY = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'norepo'} end
for k, index in ipairs({KEYS[3], KEYS[4]}) do
  local names = redis.call('ZRANGE', index, 0, -1)
  for i = 1, #names, 1000 do
    local batch = {}
    for j = i, math.min(i + 999, #names) do batch[#batch + 1] = ARGV[k + 1] .. names[j] end
    redis.call('DEL', unpack(batch))
  end
end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
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
  local v = redis.call('HMGET', ARGV[3] .. name, 'storage_namespace', 'default_branch',
                       'created_at', 'metadata', 'uid', 'location')
  if v[1] then
    for _, x in ipairs({name, v[1], v[2], v[3], v[4], v[5] or '', v[6] or ''}) do
      out[#out + 1] = x
    end
  end
end
return out
"""

# KEYS: counter.  ARGV: now, window (seconds), window in ms.  Window counters are
# timed by the client's clock (``now``); the key's expiry only removes ended ones.
_COUNT_IN_WINDOW = """
local ends = tonumber(redis.call('HGET', KEYS[1], 'ends_at') or '0')
local now = tonumber(ARGV[1])
if ends <= now then
  ends = now + tonumber(ARGV[2])
  redis.call('HSET', KEYS[1], 'value', 1, 'ends_at', tostring(ends))
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, tostring(ends)}
end
local value = redis.call('HINCRBY', KEYS[1], 'value', 1)
return {value, tostring(ends)}
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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = _redact(url)
        self._clock = clock
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
        self._append_group_script = script(_LIB + _APPEND_GROUP)
        self._stash_script = script(_LIB + _STASH)
        self._read_pop_script = script(_LIB + _READ_POP)
        self._pop_script = script(_LIB + _POP)
        self._drop_workspace_script = script(_DROP_WORKSPACE)
        self._list_workspaces_script = script(_LIST_WORKSPACES)
        self._put_record_script = script(_PUT_RECORD)
        self._delete_record_script = script(_DELETE_RECORD)
        self._list_records_script = script(_LIST_RECORDS)
        self._count_script = script(_COUNT_IN_WINDOW)

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

    def _workspaces_key(self, repo: str) -> str:
        return f"{self.key_prefix}wss:{repo}"

    def _workspace_prefix(self, repo: str) -> str:
        return f"{self.key_prefix}ws:{repo}:"

    def _moves_key(self, repo: str) -> str:
        return f"{self.key_prefix}moves:{repo}"

    def _records_key(self, kind: str) -> str:
        return f"{self.key_prefix}recs:{kind}"

    def _record_key(self, kind: str) -> str:
        return f"{self.key_prefix}rec:{kind}"

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
        if status == "replaced":
            raise RepositoryNotFoundError(replaced_message(repo))
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
                repo.uid,
                repo.location,
            ],
        )
        if reply[0] == "exists":
            raise RefExistsError(f"repository already exists: {repo.name}")

    async def _get_repository(self, name: str) -> Repository:
        fields = await self._call(
            "get repository",
            lambda: self._redis.hmget(
                self._repo_key(name),
                [
                    "storage_namespace",
                    "default_branch",
                    "created_at",
                    "metadata",
                    "uid",
                    "location",
                ],
            ),
            mutation=False,
            idempotent=True,
        )
        if fields[0] is None:
            raise RepositoryNotFoundError(f"repository not found: {name}")
        return self._repository(name, cast(list[str], fields))

    @staticmethod
    def _repository(name: str, fields: Sequence[str | None]) -> Repository:
        ns, default_branch, created_at, metadata, uid, location = fields
        assert ns is not None and default_branch is not None and created_at is not None
        return Repository(
            name,
            ns,
            default_branch,
            float(created_at),
            json.loads(metadata or "{}"),
            uid or "",
            location or "",
        )

    async def _list_repositories(self, after: str | None, limit: int) -> list[Repository]:
        reply = await self._script(
            "list repositories",
            self._list_repositories_script,
            [self._repos_key()],
            ["-" if after is None else f"({after}", limit, self._repo_key("")],
            idempotent=True,
            mutation=False,
        )
        return [self._repository(reply[i], reply[i + 1 : i + 7]) for i in range(0, len(reply), 7)]

    async def _delete_repository(self, name: str) -> None:
        reply = await self._script(
            "delete repository",
            self._delete_repository_script,
            [
                self._repo_key(name),
                self._repos_key(),
                self._refs_key(name),
                self._workspaces_key(name),
            ],
            [name, self._ref_prefix(name), self._workspace_prefix(name)],
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

    async def _append_l1(
        self, repo: str, branch: str, file_id: str, repository_id: str | None
    ) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            "append_l1",
            self._append,
            [file_id, MAX_FILE_IDS, _condition(repository_id)],
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

    async def _append_l1_many(
        self, repo: str, branch: str, file_ids: tuple[str, ...], repository_id: str | None
    ) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            "append_l1_many",
            self._append_group_script,
            ["", encode_ids(file_ids), MAX_FILE_IDS, MAX_GROUP_IDS, _condition(repository_id)],
            # The script rejects a tag or ids too many for the ref.
            lambda cur: transitions.append_l1_many(where, cur, file_ids),
            idempotent=True,
        )

    async def _append_l1_group(
        self,
        repo: str,
        branch: str,
        group_id: str,
        file_ids: tuple[str, ...],
        repository_id: str | None,
    ) -> Ref:
        where = f"{repo}/{branch}"
        return await self._mutate(
            repo,
            branch,
            "append_l1_group",
            self._append_group_script,
            [
                group_id,
                encode_ids(file_ids),
                MAX_FILE_IDS,
                MAX_GROUP_IDS,
                _condition(repository_id),
            ],
            # The script rejects a tag or a group too large for the ref.
            lambda cur: transitions.append_group(where, cur, group_id, file_ids)[0],
            idempotent=True,
        )

    # --- workspaces ----------------------------------------------------------------------

    def _workspace_keys(self, repo: str, branch: str, name: str) -> list[str]:
        return [
            self._ref_key(repo, branch),
            self._repo_key(repo),
            self._workspace_prefix(repo) + name,
            self._workspaces_key(repo),
            self._moves_key(repo),
        ]

    async def _stash_workspace(
        self, repo: str, branch: str, name: str, expected: Ref, created_at: float
    ) -> Ref:
        where = f"{repo}/{branch}"
        reply = await self._script(
            "stash workspace",
            self._stash_script,
            self._workspace_keys(repo, branch, name),
            [
                expected.kind,
                expected.base,
                encode_ids(expected.l2),
                encode_ids(expected.l1),
                name,
                branch,
                repr(created_at),
                MAX_CONSUMED_IDS,
            ],
        )
        if reply[0] == "wsexists":
            raise WorkspaceExistsError(f"workspace already exists: {repo}/{name}")
        value = self._status(repo, branch, reply)
        assert value is not None
        if reply[0] == "ok":
            return value
        transitions.stash(where, value, expected, branch, name, created_at)
        raise ConflictError(f"{where}: stash rejected by the server", found=value)

    async def _pop_workspace(self, repo: str, name: str, branch: str) -> Ref:
        where = f"{repo}/{branch}"
        keys = self._workspace_keys(repo, branch, name)
        for _ in range(100):
            read = await self._script(
                "pop workspace",
                self._read_pop_script,
                keys[:3],
                [],
                idempotent=True,
                mutation=False,
            )
            if read[0] == "nows":
                raise WorkspaceNotFoundError(f"workspace not found: {repo}/{name}")
            cur = self._status(repo, branch, read[:5])
            assert cur is not None
            ws = self._workspace_of(name, read[5:10])
            new = transitions.pop(where, cur, ws, branch)
            reply = await self._script(
                "pop workspace",
                self._pop_script,
                keys,
                [
                    cur.kind,
                    cur.base,
                    encode_ids(cur.l2),
                    encode_ids(cur.l1),
                    encode_ids(new.l1),
                    name,
                ],
            )
            if reply[0] == "ok":
                return new
        raise UnavailableError(f"redis {self.url}: pop {repo}/{name}: kept losing to writes")

    @staticmethod
    def _workspace_of(name: str, fields: Sequence[str]) -> Workspace:
        branch, base, l2, l1, created_at = fields
        return Workspace(name, branch, base, decode_ids(l2), decode_ids(l1), float(created_at))

    async def _get_workspace(self, repo: str, name: str) -> Workspace:
        fields = await self._call(
            "get workspace",
            lambda: self._redis.hmget(
                self._workspace_prefix(repo) + name, ["branch", "base", "l2", "l1", "created_at"]
            ),
            mutation=False,
            idempotent=True,
        )
        if fields[0] is not None:
            return self._workspace_of(name, cast(list[str], fields))
        await self._require_repository(repo)
        raise WorkspaceNotFoundError(f"workspace not found: {repo}/{name}")

    async def _require_repository(self, repo: str) -> None:
        exists = await self._call(
            "get repository",
            lambda: self._redis.exists(self._repo_key(repo)),
            mutation=False,
            idempotent=True,
        )
        if not exists:
            raise RepositoryNotFoundError(f"repository not found: {repo}")

    async def _list_workspaces(self, repo: str, after: str | None, limit: int) -> list[Workspace]:
        reply = await self._script(
            "list workspaces",
            self._list_workspaces_script,
            [self._repo_key(repo), self._workspaces_key(repo)],
            ["-" if after is None else f"({after}", limit, self._workspace_prefix(repo)],
            idempotent=True,
            mutation=False,
        )
        if reply[0] == "norepo":
            raise RepositoryNotFoundError(f"repository not found: {repo}")
        return [self._workspace_of(reply[i], reply[i + 1 : i + 6]) for i in range(1, len(reply), 6)]

    async def _drop_workspace(self, repo: str, name: str) -> None:
        reply = await self._script(
            "drop workspace",
            self._drop_workspace_script,
            [
                self._workspace_prefix(repo) + name,
                self._workspaces_key(repo),
                self._repo_key(repo),
            ],
            [name],
        )
        if reply[0] == "norepo":
            raise RepositoryNotFoundError(f"repository not found: {repo}")
        if reply[0] == "nows":
            raise WorkspaceNotFoundError(f"workspace not found: {repo}/{name}")

    async def _move_count(self, repo: str) -> int:
        await self._require_repository(repo)
        value = await self._call(
            "move count",
            lambda: self._redis.get(self._moves_key(repo)),
            mutation=False,
            idempotent=True,
        )
        return int(value or 0)

    # --- records ---------------------------------------------------------------------------

    async def _put_record(self, kind: str, name: str, value: bytes, if_absent: bool) -> None:
        reply = await self._call(
            "put record",
            lambda: self._put_record_script(
                keys=[self._record_key(kind), self._records_key(kind)],
                args=[name, base64.b64encode(value).decode("ascii"), int(if_absent)],
            ),
            mutation=True,
            idempotent=not if_absent,
        )
        if not reply:
            raise RecordExistsError(f"record already exists: {kind}/{name}")

    async def _get_record(self, kind: str, name: str) -> bytes:
        value = await self._call(
            "get record",
            lambda: self._redis.hget(self._record_key(kind), name),
            mutation=False,
            idempotent=True,
        )
        if value is None:
            raise RecordNotFoundError(f"record not found: {kind}/{name}")
        return base64.b64decode(value)

    async def _list_records(
        self, kind: str, after: str | None, limit: int
    ) -> list[tuple[str, bytes]]:
        reply = await self._script(
            "list records",
            self._list_records_script,
            [self._record_key(kind), self._records_key(kind)],
            ["-" if after is None else f"({after}", limit],
            idempotent=True,
            mutation=False,
        )
        return [(reply[i], base64.b64decode(reply[i + 1])) for i in range(0, len(reply), 2)]

    async def _delete_record(self, kind: str, name: str) -> None:
        reply = await self._call(
            "delete record",
            lambda: self._delete_record_script(
                keys=[self._record_key(kind), self._records_key(kind)], args=[name]
            ),
            mutation=True,
            idempotent=False,
        )
        if not reply:
            raise RecordNotFoundError(f"record not found: {kind}/{name}")

    # --- leases --------------------------------------------------------------------------

    def _lease_key(self, key: str) -> str:
        return f"{self.key_prefix}lease:{key}"

    # --- window counters -------------------------------------------------------------

    def _counter_key(self, name: str) -> str:
        return f"{self.key_prefix}ctr:{name}"

    async def _count_in_window(self, name: str, window_s: float, now: float) -> WindowCount:
        reply = await self._script(
            "count in window",
            self._count_script,
            [self._counter_key(name)],
            [repr(now), repr(window_s), max(1, math.ceil(window_s * 1000))],
        )
        return WindowCount(int(reply[0]), float(reply[1]))

    async def _read_window_count(self, name: str, now: float) -> WindowCount:
        fields = await self._call(
            "read window count",
            lambda: self._redis.hmget(self._counter_key(name), ["value", "ends_at"]),
            mutation=False,
            idempotent=True,
        )
        value, ends = fields
        if value is None or ends is None or float(ends) <= now:
            return WindowCount(0, 0.0)
        return WindowCount(int(value), float(ends))

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
