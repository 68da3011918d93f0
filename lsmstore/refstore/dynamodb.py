"""The DynamoDB RefStore: conditional writes on one table, through aiobotocore.

Table: partition key ``repo`` (S), sort key ``name`` (S); see docs/refstore.md.

=======================  ===================  ==========================================
partition ``repo``       sort key ``name``    attributes
=======================  ===================  ==========================================
``<repository>``         ``<ref name>``       kind, base, l2 (L), l1 (L), n (N), ver (S),
                                              [consumed (S), cver (S)]
``_repositories``        ``<repository>``     storage_namespace, default_branch,
                                              created_at (N), metadata (S), [uid,
                                              location, deleting]
``_leases``              ``<lease key>``      owner, expires (N)
``_ws:<repository>``     ``<workspace>``      branch, base, l2 (L), l1 (L), created_at (N)
``_moves``               ``<repository>``     n (N): stash and pop count
``_rec:<kind>``          ``<record name>``    value (B)
``_counters``            ``<counter name>``   value (N), ends_at (N), expires (N: whole
                                              seconds, for the table's optional TTL)
=======================  ===================  ==========================================

Repository names cannot start with ``_``, so the reserved partitions never meet a
repository's refs.  ``n`` is ``len(l1) + len(l2)`` (for the size limit inside a
condition); ``ver`` is a fresh random token on every write.  ``consumed`` is the
branch's consumed tail as ``",id1,id2,"`` (absent until a swap consumes something) and
``cver`` a fresh token whenever a swap rewrites it.

Atomicity: ``append_l1`` is one ``UpdateItem`` (``list_append`` under ``NOT
contains`` on L1 and on the consumed tail).  A swap whose L1 prefix has at most
``max_prefix_conditions`` ids is one ``UpdateItem`` whose condition names the base,
the whole L2 and each prefix element (``l1[i] = :pi``) and whose ``REMOVE l1[0], ...
l1[k-1]`` drops the prefix (indexes refer to the list before the update), so appends
never disturb it; it also sets the new consumed tail, computed from the tail read
just before and conditioned on that tail's ``cver`` (appends leave it alone).  A
longer prefix would break DynamoDB's 4 KB / 300-operator expression limits: it is
read, checked with :mod:`~lsmstore.refstore.transitions` and written back under
``ver = <read token>``, retried while only appends got in between.  Every rejected
write returns the old item (``ReturnValuesOnConditionCheckFailure=ALL_OLD``) and the
pure rule on that value raises the contract's error; a missing item is resolved by
reading the repository record.  ``create_ref`` is a transaction with a condition
check on the repository record.  ``delete_repository`` first marks the record
``deleting`` (no new refs can be created), then deletes the refs, then the record;
it resumes if interrupted.  An append given a ``repository_id`` is a transaction of a
condition check on the repository record's ``uid`` and the append's own write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session
from botocore.exceptions import BotoCoreError, ClientError

from lsmstore.errors import (
    ConflictError,
    CorruptFileError,
    EntryTooLargeError,
    InvalidInputError,
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
    MAX_FILE_IDS,
    Ref,
    RefKind,
    RefStore,
    Repository,
    WindowCount,
    Workspace,
    encode_metadata,
    replaced_message,
)
from lsmstore.refstore.codec import decode_kind

REPOSITORIES = "_repositories"
LEASES = "_leases"
#: A repository's stash/pop counter: item (MOVES, <repository>), attribute ``n``.
MOVES = "_moves"
COUNTERS = "_counters"
#: Attempts of a window count that keeps meeting a concurrent window start.
_COUNT_ATTEMPTS = 8


def workspaces_partition(repo: str) -> str:
    """The partition of a repository's workspaces (no repository name has a ``_``
    first, so it never meets one)."""
    return f"_ws:{repo}"


def records_partition(kind: str) -> str:
    return f"_rec:{kind}"


#: DynamoDB's item size limit.  A ref holds at most MAX_FILE_IDS ids of <= 64 bytes
#: (about 134 KB) in L1 and L2, and a consumed tail of at most
#: max(MAX_CONSUMED_IDS, MAX_FILE_IDS) more (one string, about 130 KB): under 270 KB,
#: so only repository records can come near the limit.
ITEM_LIMIT = 400 * 1024
#: A swap checks its L1 prefix element by element up to this many ids (2 operators
#: each, under DynamoDB's 300 per expression); longer prefixes go read-check-write.
MAX_PREFIX_CONDITIONS = 100

_THROTTLING = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "TransactionInProgressException",
}
_TRANSIENT = {"InternalServerError", "ServiceUnavailable", "InternalFailure"}
_CONNECTION_ERRORS = (BotoCoreError, aiohttp.ClientError, OSError, asyncio.TimeoutError)
_PLACEHOLDER = re.compile(r"#[A-Za-z0-9_]+")
#: What get_ref fetches: the consumed tail (up to tens of KB) stays on the server.
_REF_ATTRIBUTES = ("kind", "base", "l2", "l1")
_SESSION: list[AioSession] = []  # one session for all stores: loading models is slow


def _session() -> AioSession:
    if not _SESSION:
        _SESSION.append(get_session())
    return _SESSION[0]


def _s(value: str) -> dict[str, Any]:
    return {"S": value}


def _n(value: float) -> dict[str, Any]:
    return {"N": repr(value) if isinstance(value, float) else str(value)}


def _l(ids: Sequence[str]) -> dict[str, Any]:
    return {"L": [{"S": i} for i in ids]}


def _names(*expressions: str) -> dict[str, str]:
    """``#attr`` placeholders used in the expressions (every one maps to ``attr``)."""
    return {p: p[1:] for e in expressions for p in _PLACEHOLDER.findall(e)}


def _encode_tail(ids: Sequence[str]) -> str:
    """A consumed tail as one string, ``",a,b,"``: ``contains(consumed, ",id,")`` is an
    exact membership test, and a string parses far faster than a list of 1,000."""
    return f",{','.join(ids)}," if ids else ","


def _id_list(item: Mapping[str, Any], attr: str, where: str, what: str) -> tuple[str, ...]:
    """The ids of an :func:`_encode_tail`-encoded attribute of a ref item (none if the
    item has no ``attr``); ``what`` names it in the error."""
    value = item.get(attr)
    if value is None:
        return ()
    try:
        return tuple(i for i in value["S"].split(",") if i)
    except (KeyError, TypeError, AttributeError) as e:
        raise CorruptFileError(where, f"malformed {what}: {e!r}") from e


def _tail(item: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The consumed tail of a ref item (none if the item has no ``consumed``)."""
    return _id_list(item, "consumed", where, "consumed tail")


def _groups(item: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The group ids a ref item remembers (``append_l1_group``)."""
    return _id_list(item, "groups", where, "group ids")


def _item_size(item: Mapping[str, Any]) -> int:
    """DynamoDB's item size (attribute names + values), a close upper estimate."""

    def size(v: Any) -> int:
        if "S" in v:
            return len(v["S"].encode("utf-8"))
        if "N" in v:
            return len(v["N"]) + 1
        if "L" in v:
            return 3 + sum(1 + size(x) for x in v["L"])
        return 1

    return sum(len(k.encode("utf-8")) + size(v) for k, v in item.items())


class _Rejected(Exception):
    """A condition failed; ``item`` is the item as DynamoDB saw it (None if absent)."""

    def __init__(self, item: dict[str, Any] | None) -> None:
        super().__init__("condition failed")
        self.item = item


class DynamoRefStore(RefStore):
    """RefStore on one DynamoDB table (create it with :meth:`create_table`).

    Throttling is retried up to ``max_attempts`` times in all; connection errors and
    timeouts only for reads and idempotent writes.  ``clock`` (seconds since the epoch)
    times leases; ``rng`` makes the write tokens and retry jitter.
    """

    def __init__(
        self,
        table: str,
        *,
        region: str,
        endpoint_url: str | None = None,
        timeout: float = 5.0,
        max_attempts: int = 5,
        max_pool_connections: int = 64,
        max_prefix_conditions: int = MAX_PREFIX_CONDITIONS,
        page_size: int = 1000,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        if (
            max_attempts < 1
            or not 0 <= max_prefix_conditions <= MAX_PREFIX_CONDITIONS
            or not 1 <= page_size <= 1000
        ):
            raise InvalidInputError(
                f"DynamoDB max_attempts must be >= 1, max_prefix_conditions in "
                f"0..{MAX_PREFIX_CONDITIONS} and page_size in 1..1000"
            )
        self.table = table
        self.url = f"dynamodb://{table}?region={region}" + (
            f"&endpoint_url={endpoint_url}" if endpoint_url else ""
        )
        self._region = region
        self._endpoint_url = endpoint_url
        self._max_attempts = max_attempts
        self._max_prefix = max_prefix_conditions
        self._page_size = page_size
        self._clock = clock
        self._rng = rng or random.Random()
        self._config = AioConfig(
            retries={"total_max_attempts": 1, "mode": "standard"},  # we retry what is safe
            connect_timeout=timeout,
            read_timeout=timeout,
            max_pool_connections=max_pool_connections,
        )
        self._client: Any = None
        self._stack = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()

    # --- client and requests -------------------------------------------------------------

    async def _connect(self) -> Any:
        if self._client is None:
            async with self._lock:
                self._check_open()
                if self._client is None:
                    ctx = _session().create_client(
                        "dynamodb",
                        region_name=self._region,
                        endpoint_url=self._endpoint_url,
                        config=self._config,
                    )
                    self._client = await self._stack.enter_async_context(ctx)
        return self._client

    async def _request(
        self, op: str, what: str, *, mutation: bool, idempotent: bool, **kwargs: Any
    ) -> dict[str, Any]:
        """One DynamoDB call.  A failed condition raises :class:`_Rejected`."""
        client = await self._connect()
        for attempt in range(self._max_attempts):
            last = attempt + 1 == self._max_attempts
            try:
                response: dict[str, Any] = await getattr(client, op)(**kwargs)
                return response
            except ClientError as e:
                error = e.response.get("Error", {})
                code, message = str(error.get("Code", "")), str(error.get("Message", ""))
                status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
                if code == "ConditionalCheckFailedException":
                    raise _Rejected(e.response.get("Item")) from e
                if code == "TransactionCanceledException":
                    raise  # the caller reads the cancellation reasons
                if code in _THROTTLING and not last:
                    await self._backoff(attempt)
                    continue
                if (code in _TRANSIENT or status >= 500) and idempotent and not last:
                    await self._backoff(attempt)
                    continue
                if code == "ResourceNotFoundException":
                    raise UnavailableError(
                        f"{self.url}: {what}: table {self.table!r} does not exist ({message})"
                    ) from e
                if code == "ValidationException" and "size" in message.lower():
                    raise EntryTooLargeError(f"{self.url}: {what}: {message}") from e
                raise UnavailableError(
                    f"{self.url}: {what}: {code} {message}",
                    outcome_unknown=mutation and (status >= 500 or code in _TRANSIENT),
                ) from e
            except _CONNECTION_ERRORS as e:
                if idempotent and not last:
                    await self._backoff(attempt)
                    continue
                raise UnavailableError(
                    f"{self.url}: {what}: {type(e).__name__}: {e}", outcome_unknown=mutation
                ) from e
        raise AssertionError("unreachable")

    async def _backoff(self, attempt: int) -> None:
        await asyncio.sleep(min(1.0, 0.025 * 2**attempt) * (0.5 + self._rng.random() / 2))

    def _token(self) -> str:
        return f"{self._rng.getrandbits(64):016x}"

    def _key(self, partition: str, name: str) -> dict[str, Any]:
        return {"repo": _s(partition), "name": _s(name)}

    async def create_table(self, *, billing_mode: str = "PAY_PER_REQUEST") -> None:
        """Create the table (key schema above) if it does not exist; wait until ACTIVE."""
        self._check_open()
        try:
            await self._request(
                "create_table",
                "create table",
                mutation=True,
                idempotent=False,
                TableName=self.table,
                AttributeDefinitions=[
                    {"AttributeName": "repo", "AttributeType": "S"},
                    {"AttributeName": "name", "AttributeType": "S"},
                ],
                KeySchema=[
                    {"AttributeName": "repo", "KeyType": "HASH"},
                    {"AttributeName": "name", "KeyType": "RANGE"},
                ],
                BillingMode=billing_mode,
            )
        except UnavailableError as e:
            if "ResourceInUseException" not in str(e):
                raise
        client = await self._connect()
        waiter = client.get_waiter("table_exists")
        await waiter.wait(TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 60})

    async def delete_table(self) -> None:
        """Delete the table and everything in it (tests and benchmarks)."""
        self._check_open()
        await self._request(
            "delete_table", "delete table", mutation=True, idempotent=False, TableName=self.table
        )

    # --- items -----------------------------------------------------------------------------

    def _ref_item(self, repo: str, name: str, ref: Ref) -> dict[str, Any]:
        return {
            **self._key(repo, name),
            "kind": _s(ref.kind),
            "base": _s(ref.base),
            "l2": _l(ref.l2),
            "l1": _l(ref.l1),
            "n": _n(len(ref.l1) + len(ref.l2)),
            "ver": _s(self._token()),
        }

    @staticmethod
    def _ref(item: Mapping[str, Any], where: str) -> Ref:
        try:
            return Ref(
                decode_kind(item["kind"]["S"], where),
                item["base"]["S"],
                tuple(v["S"] for v in item["l2"]["L"]),
                tuple(v["S"] for v in item["l1"]["L"]),
            )
        except (KeyError, TypeError) as e:
            raise CorruptFileError(where, f"malformed ref item: {e!r}") from e

    @staticmethod
    def _repository(item: Mapping[str, Any]) -> Repository:
        return Repository(
            item["name"]["S"],
            item["storage_namespace"]["S"],
            item["default_branch"]["S"],
            float(item["created_at"]["N"]),
            json.loads(item["metadata"]["S"]),
            item.get("uid", {}).get("S", ""),
            item.get("location", {}).get("S", ""),
        )

    async def _get_item(
        self, partition: str, name: str, what: str, attributes: Sequence[str] = ()
    ) -> dict[str, Any] | None:
        """The item (strongly consistent), or only ``attributes`` of it if given."""
        projection: dict[str, Any] = {}
        if attributes:
            names = {f"#{a}": a for a in attributes}
            projection = {
                "ProjectionExpression": ", ".join(names),
                "ExpressionAttributeNames": names,
            }
        response = await self._request(
            "get_item",
            what,
            mutation=False,
            idempotent=True,
            TableName=self.table,
            Key=self._key(partition, name),
            ConsistentRead=True,
            **projection,
        )
        item: dict[str, Any] | None = response.get("Item")
        return item

    async def _missing(self, repo: str, name: str) -> Exception:
        """The error for an absent ref: its repository is missing, or just the ref."""
        record = await self._get_item(REPOSITORIES, repo, "get repository")
        if record is None or "deleting" in record:
            return RepositoryNotFoundError(f"repository not found: {repo}")
        return RefNotFoundError(f"ref not found: {repo}/{name}")

    async def _query(
        self, partition: str, what: str, *, after: str | None, prefix: str, limit: int
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` items of ``partition`` whose name starts with ``prefix``, after
        ``after``, in name order."""
        values: dict[str, Any] = {":p": _s(partition)}
        condition = "#repo = :p"
        if after is not None and after >= prefix:
            condition += " AND #name > :after"
            values[":after"] = _s(after)
        elif prefix:
            condition += " AND begins_with(#name, :prefix)"
            values[":prefix"] = _s(prefix)
        items: list[dict[str, Any]] = []
        start: dict[str, Any] | None = None
        while len(items) < limit:
            kwargs: dict[str, Any] = {"ExclusiveStartKey": start} if start else {}
            response = await self._request(
                "query",
                what,
                mutation=False,
                idempotent=True,
                TableName=self.table,
                KeyConditionExpression=condition,
                ExpressionAttributeNames=_names(condition),
                ExpressionAttributeValues=values,
                ConsistentRead=True,
                Limit=min(self._page_size, limit - len(items)),
                **kwargs,
            )
            for item in response.get("Items", []):
                if not item["name"]["S"].startswith(prefix):
                    return items
                items.append(item)
            start = response.get("LastEvaluatedKey")
            if not start:
                break
        return items[:limit]

    # --- repositories --------------------------------------------------------------------

    async def _create_repository(self, repo: Repository) -> None:
        item = {
            **self._key(REPOSITORIES, repo.name),
            "storage_namespace": _s(repo.storage_namespace),
            "default_branch": _s(repo.default_branch),
            "created_at": _n(float(repo.created_at)),
            "metadata": _s(encode_metadata(repo.metadata)),
            "uid": _s(repo.uid),
            "location": _s(repo.location),
        }
        if _item_size(item) > ITEM_LIMIT:
            raise EntryTooLargeError(f"repository {repo.name}: record exceeds 400 KB")
        for _ in range(2):
            try:
                await self._request(
                    "put_item",
                    "create repository",
                    mutation=True,
                    idempotent=False,
                    TableName=self.table,
                    Item=item,
                    ConditionExpression="attribute_not_exists(#name)",
                    ExpressionAttributeNames={"#name": "name"},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                return
            except _Rejected as e:
                if e.item is None or "deleting" not in e.item:
                    raise RefExistsError(f"repository already exists: {repo.name}") from None
                await self._finish_delete(repo.name)  # an interrupted delete: finish it
        raise RefExistsError(f"repository already exists: {repo.name}")

    async def _get_repository(self, name: str) -> Repository:
        item = await self._get_item(REPOSITORIES, name, "get repository")
        if item is None or "deleting" in item:
            raise RepositoryNotFoundError(f"repository not found: {name}")
        return self._repository(item)

    async def _list_repositories(self, after: str | None, limit: int) -> list[Repository]:
        found: list[Repository] = []
        while len(found) < limit:
            items = await self._query(
                REPOSITORIES, "list repositories", after=after, prefix="", limit=limit
            )
            found += [self._repository(i) for i in items if "deleting" not in i]
            if len(items) < limit:
                break
            after = items[-1]["name"]["S"]
        return found[:limit]

    async def _delete_repository(self, name: str) -> None:
        try:
            await self._request(
                "update_item",
                "delete repository",
                mutation=True,
                idempotent=True,
                TableName=self.table,
                Key=self._key(REPOSITORIES, name),
                UpdateExpression="SET #deleting = :t",
                ConditionExpression="attribute_exists(#name)",
                ExpressionAttributeNames={"#deleting": "deleting", "#name": "name"},
                ExpressionAttributeValues={":t": {"BOOL": True}},
            )
        except _Rejected:
            raise RepositoryNotFoundError(f"repository not found: {name}") from None
        await self._finish_delete(name)

    async def _finish_delete(self, name: str) -> None:
        """Delete every ref and workspace of a repository marked ``deleting``, then its
        record."""
        for partition in (name, workspaces_partition(name)):
            await self._delete_partition(partition)
        await self._request(
            "delete_item",
            "delete repository",
            mutation=True,
            idempotent=True,
            TableName=self.table,
            Key=self._key(REPOSITORIES, name),
        )

    async def _delete_partition(self, partition: str) -> None:
        while items := await self._query(
            partition, "delete repository", after=None, prefix="", limit=1000
        ):
            for i in range(0, len(items), 25):
                requests = [
                    {"DeleteRequest": {"Key": self._key(partition, it["name"]["S"])}}
                    for it in items[i : i + 25]
                ]
                attempt = 0
                while requests:
                    response = await self._request(
                        "batch_write_item",
                        "delete repository",
                        mutation=True,
                        idempotent=True,
                        RequestItems={self.table: requests},
                    )
                    requests = response.get("UnprocessedItems", {}).get(self.table, [])
                    if requests:
                        await self._backoff(min(attempt, 5))
                        attempt += 1

    # --- refs -----------------------------------------------------------------------------

    async def _get_ref(self, repo: str, name: str) -> Ref:
        item = await self._get_item(repo, name, "get ref", _REF_ATTRIBUTES)
        if item is None:
            raise await self._missing(repo, name)
        return self._ref(item, f"{self.table}: {repo}/{name}")

    async def _get_refs(self, repo: str, names: list[str]) -> dict[str, Ref]:
        keys = [self._key(REPOSITORIES, repo), *(self._key(repo, n) for n in names)]
        items: list[dict[str, Any]] = []
        for i in range(0, len(keys), 100):
            pending: dict[str, Any] = {
                self.table: {"Keys": keys[i : i + 100], "ConsistentRead": True}
            }
            attempt = 0
            while pending:
                response = await self._request(
                    "batch_get_item",
                    "get refs",
                    mutation=False,
                    idempotent=True,
                    RequestItems=pending,
                )
                items += response.get("Responses", {}).get(self.table, [])
                pending = response.get("UnprocessedKeys") or {}
                if pending:
                    await self._backoff(min(attempt, 5))
                    attempt += 1
        refs: dict[str, Ref] = {}
        repo_found = False
        for item in items:
            if item["repo"]["S"] == REPOSITORIES:
                repo_found = "deleting" not in item
            else:
                name = item["name"]["S"]
                refs[name] = self._ref(item, f"{self.table}: {repo}/{name}")
        if not repo_found:
            raise RepositoryNotFoundError(f"repository not found: {repo}")
        return refs

    async def _list_refs(
        self, repo: str, prefix: str, after: str | None, limit: int, kind: RefKind | None
    ) -> list[tuple[str, Ref]]:
        record, items = await asyncio.gather(
            self._get_item(REPOSITORIES, repo, "list refs"),
            self._query(repo, "list refs", after=after, prefix=prefix, limit=limit),
        )
        if record is None or "deleting" in record:
            raise RepositoryNotFoundError(f"repository not found: {repo}")
        page = [(i["name"]["S"], self._ref(i, f"{self.table}: {repo}")) for i in items]
        return [(n, r) for n, r in page if kind is None or r.kind == kind]

    async def _create_ref(self, repo: str, name: str, ref: Ref) -> None:
        check = {
            "TableName": self.table,
            "Key": self._key(REPOSITORIES, repo),
            "ConditionExpression": "attribute_exists(#name) AND attribute_not_exists(#deleting)",
            "ExpressionAttributeNames": {"#name": "name", "#deleting": "deleting"},
        }
        put = {
            "TableName": self.table,
            "Item": self._ref_item(repo, name, ref),
            "ConditionExpression": "attribute_not_exists(#name)",
            "ExpressionAttributeNames": {"#name": "name"},
        }
        for attempt in range(self._max_attempts):
            try:
                await self._request(
                    "transact_write_items",
                    "create ref",
                    mutation=True,
                    idempotent=False,
                    TransactItems=[{"ConditionCheck": check}, {"Put": put}],
                )
                return
            except ClientError as e:
                reasons = [str(r.get("Code")) for r in e.response.get("CancellationReasons", [])]
                if reasons[:1] == ["ConditionalCheckFailed"]:
                    raise RepositoryNotFoundError(f"repository not found: {repo}") from None
                if reasons[1:2] == ["ConditionalCheckFailed"]:
                    raise RefExistsError(f"ref already exists: {repo}/{name}") from None
                if "TransactionConflict" in reasons and attempt + 1 < self._max_attempts:
                    await self._backoff(attempt)  # not applied: safe to send again
                    continue
                raise UnavailableError(
                    f"{self.url}: create ref {repo}/{name}: transaction cancelled {reasons}"
                ) from e
        raise AssertionError("unreachable")

    async def _delete_ref(self, repo: str, name: str, expected: Ref) -> None:
        condition = "#kind = :kind AND #base = :base AND #l2 = :l2 AND #l1 = :l1"
        try:
            await self._request(
                "delete_item",
                "delete ref",
                mutation=True,
                idempotent=False,
                TableName=self.table,
                Key=self._key(repo, name),
                ConditionExpression=condition,
                ExpressionAttributeNames=_names(condition),
                ExpressionAttributeValues={
                    ":kind": _s(expected.kind),
                    ":base": _s(expected.base),
                    ":l2": _l(expected.l2),
                    ":l1": _l(expected.l1),
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except _Rejected as e:
            if e.item is None:
                raise await self._missing(repo, name) from None
            found = self._ref(e.item, f"{self.table}: {repo}/{name}")
            transitions.delete(f"{repo}/{name}", found, expected)
            raise ConflictError(f"{repo}/{name}: delete rejected", found=found) from None

    # --- branch operations -----------------------------------------------------------------

    async def _write(
        self,
        repo: str,
        name: str,
        what: str,
        *,
        update: str,
        condition: str,
        values: dict[str, Any],
        idempotent: bool = False,
    ) -> dict[str, Any]:
        """One conditional UpdateItem (with a fresh ``ver``): the new item, or _Rejected."""
        values = {**values, ":ver": _s(self._token())}
        update = update.replace("SET ", "SET #ver = :ver, ", 1)
        response = await self._request(
            "update_item",
            what,
            mutation=True,
            idempotent=idempotent,
            TableName=self.table,
            Key=self._key(repo, name),
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=_names(update, condition),
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        item: dict[str, Any] = response["Attributes"]
        return item

    async def _update(
        self,
        repo: str,
        name: str,
        what: str,
        rule: Callable[[Ref, tuple[str, ...]], Ref],
        *,
        update: str,
        condition: str,
        values: dict[str, Any],
        idempotent: bool = False,
    ) -> Ref:
        """A conditional UpdateItem; on rejection the rule, given the old value and its
        consumed tail, explains it."""
        where = f"{self.table}: {repo}/{name}"
        try:
            item = await self._write(
                repo,
                name,
                what,
                update=update,
                condition=condition,
                values=values,
                idempotent=idempotent,
            )
        except _Rejected as e:
            if e.item is None:
                raise await self._missing(repo, name) from None
            found = self._ref(e.item, where)
            if rule(found, _tail(e.item, where)) == found:  # an append of an id present
                return found  # in L1 or consumed: idempotent
            raise ConflictError(f"{repo}/{name}: {what} rejected", found=found) from None
        return self._ref(item, where)

    async def _swap(
        self,
        repo: str,
        name: str,
        what: str,
        rule: Callable[[Ref], Ref],
        base: str,
        l2_old: tuple[str, ...],
        l1_prefix: tuple[str, ...],
        *,
        update: str,
        condition: str = "",
        values: dict[str, Any],
    ) -> Ref:
        """A swap: one conditional UpdateItem that also rewrites the consumed tail.

        ``update``/``condition``/``values`` hold the swap's own clauses; the condition
        both swaps share (a branch on ``base`` whose L2 is ``l2_old`` and whose L1
        starts with ``l1_prefix``) is added here.  An empty prefix leaves the tail
        alone.  Otherwise the tail is read first and the write is conditioned on the
        tail's token ``cver``, which only swaps change (appends do not): a rejection
        whose item still passes the rule means another swap moved the tail, and the
        write is sent again with the tail the rejection returned.  A prefix too long
        for one expression goes :meth:`_replace`.
        """
        if len(l1_prefix) > self._max_prefix:
            return await self._replace(repo, name, what, rule, l1_prefix)
        values = {":branch": _s("branch"), ":base": _s(base), ":l2old": _l(l2_old), **values}
        prefix_condition, remove = self._prefix_condition(l1_prefix, values)
        condition = (
            "#kind = :branch AND #base = :base AND #l2 = :l2old" + condition + prefix_condition
        )
        if not l1_prefix:
            return await self._update(
                repo,
                name,
                what,
                lambda cur, _: rule(cur),
                update=update,
                condition=condition,
                values=values,
            )
        where = f"{self.table}: {repo}/{name}"
        item = await self._get_item(repo, name, what)
        for _ in range(100):
            if item is None:
                raise await self._missing(repo, name)
            rule(self._ref(item, where))  # the contract's error when the swap cannot apply
            tail = transitions.consume(_tail(item, where), l1_prefix)
            tail_values = {**values, ":tail": _s(_encode_tail(tail)), ":cver": _s(self._token())}
            if "cver" in item:
                tail_condition = " AND #cver = :cverold"
                tail_values[":cverold"] = item["cver"]
            else:
                tail_condition = " AND attribute_not_exists(#cver)"
            try:
                new = await self._write(
                    repo,
                    name,
                    what,
                    update=update + ", #consumed = :tail, #cver = :cver" + remove,
                    condition=condition + tail_condition,
                    values=tail_values,
                )
            except _Rejected as e:
                item = e.item  # checked again at the top
                continue
            return self._ref(new, where)
        raise UnavailableError(f"{self.url}: {what} {repo}/{name}: kept losing to other swaps")

    async def _replace(
        self,
        repo: str,
        name: str,
        what: str,
        rule: Callable[[Ref], Ref],
        l1_prefix: tuple[str, ...],
    ) -> Ref:
        """Read, apply ``rule`` (and consume ``l1_prefix`` into the tail), write back
        only if no write came between (``ver``)."""
        where = f"{self.table}: {repo}/{name}"
        for attempt in range(100):
            item = await self._get_item(repo, name, what)
            if item is None:
                raise await self._missing(repo, name)
            new = rule(self._ref(item, where))
            tail = transitions.consume(_tail(item, where), l1_prefix)
            fresh = self._full_item(repo, name, item, new, tail, _groups(item, where))
            if await self._put_over(what, item, fresh):
                return new
            await self._backoff(min(attempt, 4))
        raise UnavailableError(f"{self.url}: {what} {repo}/{name}: kept losing to other writes")

    @staticmethod
    def _prefix_condition(prefix: Sequence[str], values: dict[str, Any]) -> tuple[str, str]:
        """``#l1[i] = :pi`` for each element, and the matching ``REMOVE`` clause."""
        for i, file_id in enumerate(prefix):
            values[f":p{i}"] = _s(file_id)
        condition = "".join(f" AND #l1[{i}] = :p{i}" for i in range(len(prefix)))
        remove = " REMOVE " + ", ".join(f"#l1[{i}]" for i in range(len(prefix))) if prefix else ""
        return condition, remove

    async def _append_l1(
        self, repo: str, branch: str, file_id: str, repository_id: str | None
    ) -> Ref:
        where = f"{repo}/{branch}"
        update = "SET #l1 = list_append(#l1, :ids), #n = #n + :one"
        condition = (
            "#kind = :branch AND NOT contains(#l1, :id) "
            "AND NOT contains(#consumed, :cid) AND #n < :max"
        )
        values = {
            ":ids": _l([file_id]),
            ":id": _s(file_id),
            ":cid": _s(f",{file_id},"),
            ":one": _n(1),
            ":branch": _s("branch"),
            ":max": _n(MAX_FILE_IDS),
        }
        if repository_id is not None:
            return await self._append_checked(
                repo, branch, repository_id, where, file_id, update, condition, values
            )
        return await self._update(
            repo,
            branch,
            "append_l1",
            lambda cur, tail: transitions.append_l1(where, cur, file_id, tail),
            update=update,
            condition=condition,
            values=values,
            idempotent=True,
        )

    def _uid_check(self, repo: str, uid: str) -> dict[str, Any]:
        """A transaction's condition: the repository is live and its ``uid`` is ``uid``."""
        check = self._repository_check(repo)
        if uid:
            check["ConditionExpression"] += " AND #uid = :uid"
            check["ExpressionAttributeValues"] = {":uid": _s(uid)}
        else:
            check["ConditionExpression"] += " AND (attribute_not_exists(#uid) OR #uid = :uid)"
            check["ExpressionAttributeValues"] = {":uid": _s("")}
        check["ExpressionAttributeNames"] = {**check["ExpressionAttributeNames"], "#uid": "uid"}
        return check

    async def _append_checked(
        self,
        repo: str,
        branch: str,
        uid: str,
        where: str,
        file_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
    ) -> Ref:
        """``append_l1`` conditioned on the repository's id: one transaction."""
        values = {**values, ":ver": _s(self._token())}
        update = update.replace("SET ", "SET #ver = :ver, ", 1)
        write = {
            "TableName": self.table,
            "Key": self._key(repo, branch),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": _names(update, condition),
            "ExpressionAttributeValues": values,
        }
        for attempt in range(self._max_attempts):
            try:
                # Idempotent: an applied attempt leaves the id in L1, which a re-sent one
                # finds (its condition fails and the read below returns the value).
                await self._request(
                    "transact_write_items",
                    "append_l1",
                    mutation=True,
                    idempotent=True,
                    TransactItems=[
                        {"ConditionCheck": self._uid_check(repo, uid)},
                        {"Update": write},
                    ],
                )
                reasons: list[str] = []
            except ClientError as e:
                reasons = [str(r.get("Code")) for r in e.response.get("CancellationReasons", [])]
            if reasons[:1] == ["ConditionalCheckFailed"]:
                raise RepositoryNotFoundError(replaced_message(repo))
            if "TransactionConflict" in reasons and attempt + 1 < self._max_attempts:
                await self._backoff(attempt)
                continue
            if reasons and reasons[1:2] != ["ConditionalCheckFailed"]:
                raise UnavailableError(f"{self.url}: append_l1 {where}: cancelled {reasons}")
            item = await self._get_item(repo, branch, "append_l1")
            if item is None:
                raise await self._missing(repo, branch)
            found = self._ref(item, f"{self.table}: {where}")
            tail = _tail(item, where)
            if reasons and transitions.append_l1(where, found, file_id, tail) != found:
                raise ConflictError(f"{where}: append_l1 rejected", found=found)
            return found
        raise AssertionError("unreachable")

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

        def rule(cur: Ref) -> Ref:
            return transitions.swap_compacted(where, cur, base, l2_old, l1_prefix, l2_new)

        delta = len(l2_new) - len(l2_old) - len(l1_prefix)
        return await self._swap(
            repo,
            branch,
            "swap_compacted",
            rule,
            base,
            l2_old,
            l1_prefix,
            update="SET #l2 = :l2new, #n = #n + :delta",
            condition=" AND #n <= :nmax",
            values={
                ":l2new": _l(l2_new),
                ":delta": _n(delta),
                ":nmax": _n(MAX_FILE_IDS - delta),
            },
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

        def rule(cur: Ref) -> Ref:
            return transitions.swap_committed(where, cur, base, l2_old, l1_prefix, new_base)

        return await self._swap(
            repo,
            branch,
            "swap_committed",
            rule,
            base,
            l2_old,
            l1_prefix,
            update="SET #base = :newbase, #l2 = :empty, #n = #n - :gone",
            values={
                ":empty": _l(()),
                ":newbase": _s(new_base),
                ":gone": _n(len(l2_old) + len(l1_prefix)),
            },
        )

    async def _set_base(self, repo: str, branch: str, expected_base: str, new_base: str) -> Ref:
        where = f"{repo}/{branch}"
        return await self._update(
            repo,
            branch,
            "set_base",
            lambda cur, _: transitions.set_base(where, cur, expected_base, new_base),
            update="SET #base = :new",
            condition="#kind = :branch AND #base = :expected",
            values={":branch": _s("branch"), ":expected": _s(expected_base), ":new": _s(new_base)},
        )

    async def _put_over(
        self,
        what: str,
        old: Mapping[str, Any],
        fresh: dict[str, Any],
        repository_id: str | None = None,
    ) -> bool:
        """Put ``fresh`` in place of ``old`` if no write came between (``ver``); False
        if one did.  With ``repository_id``, also only while the repository has that id
        (RepositoryNotFoundError otherwise)."""
        if repository_id is not None:
            repo = fresh["repo"]["S"]
            reasons = await self._transact(
                what,
                [
                    {"ConditionCheck": self._uid_check(repo, repository_id)},
                    {"Put": self._put_if_version(fresh, old)},
                ],
            )
            if reasons[:1] == ["ConditionalCheckFailed"]:
                raise RepositoryNotFoundError(replaced_message(repo))
            if (
                reasons
                and reasons[1:2] != ["ConditionalCheckFailed"]
                and ("TransactionConflict" not in reasons)
            ):
                raise UnavailableError(f"{self.url}: {what}: transaction cancelled {reasons}")
            return not reasons
        try:
            await self._request(
                "put_item",
                what,
                mutation=True,
                idempotent=False,
                TableName=self.table,
                Item=fresh,
                ConditionExpression="#ver = :ver",
                ExpressionAttributeNames={"#ver": "ver"},
                ExpressionAttributeValues={":ver": old["ver"]},
            )
        except _Rejected:
            return False
        return True

    def _full_item(
        self,
        repo: str,
        name: str,
        old: Mapping[str, Any],
        ref: Ref,
        tail: tuple[str, ...],
        groups: tuple[str, ...],
    ) -> dict[str, Any]:
        """A ref item to put in place of ``old``: a new ``ver``; a new ``cver`` only if
        the consumed tail changed (swaps in flight condition on it)."""
        where = f"{self.table}: {repo}/{name}"
        item = self._ref_item(repo, name, ref)
        if tail:
            item["consumed"] = _s(_encode_tail(tail))
        if tail != _tail(old, where):
            item["cver"] = _s(self._token())
        elif "cver" in old:
            item["cver"] = old["cver"]
        if groups:
            item["groups"] = _s(_encode_tail(groups))
        return item

    async def _rewrite(
        self,
        repo: str,
        name: str,
        what: str,
        rule: Callable[
            [Ref, tuple[str, ...], tuple[str, ...]],
            tuple[Ref, tuple[str, ...], tuple[str, ...]],
        ],
        repository_id: str | None = None,
    ) -> Ref:
        """Read the ref, apply ``rule`` to it, its consumed tail and group ids, and put
        the result back if no write came between (``ver``); again on a lost race."""
        where = f"{self.table}: {repo}/{name}"
        for attempt in range(100):
            item = await self._get_item(repo, name, what)
            if item is None:
                raise await self._missing(repo, name)
            cur, tail, groups = self._ref(item, where), _tail(item, where), _groups(item, where)
            new, new_tail, new_groups = rule(cur, tail, groups)
            if (new, new_tail, new_groups) == (cur, tail, groups):
                return cur
            fresh = self._full_item(repo, name, item, new, new_tail, new_groups)
            if await self._put_over(what, item, fresh, repository_id):
                return new
            await self._backoff(min(attempt, 4))
        raise UnavailableError(f"{self.url}: {what} {repo}/{name}: kept losing to other writes")

    async def _append_l1_many(
        self, repo: str, branch: str, file_ids: tuple[str, ...], repository_id: str | None
    ) -> Ref:
        where = f"{repo}/{branch}"

        def rule(
            cur: Ref, tail: tuple[str, ...], groups: tuple[str, ...]
        ) -> tuple[Ref, tuple[str, ...], tuple[str, ...]]:
            return transitions.append_l1_many(where, cur, file_ids, tail), tail, groups

        return await self._retry_idempotent(repo, branch, "append_l1_many", rule, repository_id)

    async def _append_l1_group(
        self,
        repo: str,
        branch: str,
        group_id: str,
        file_ids: tuple[str, ...],
        repository_id: str | None,
    ) -> Ref:
        where = f"{repo}/{branch}"

        def rule(
            cur: Ref, tail: tuple[str, ...], groups: tuple[str, ...]
        ) -> tuple[Ref, tuple[str, ...], tuple[str, ...]]:
            new, new_groups = transitions.append_group(where, cur, group_id, file_ids, tail, groups)
            return new, tail, new_groups

        # Idempotent (a known group id is a no-op), so a lost answer may be re-sent.
        return await self._retry_idempotent(repo, branch, "append_l1_group", rule, repository_id)

    async def _retry_idempotent(
        self,
        repo: str,
        branch: str,
        op: str,
        rule: Callable[
            [Ref, tuple[str, ...], tuple[str, ...]],
            tuple[Ref, tuple[str, ...], tuple[str, ...]],
        ],
        repository_id: str | None = None,
    ) -> Ref:
        """``_rewrite`` re-sent after an unknown outcome (for idempotent rules)."""
        for attempt in range(self._max_attempts):
            try:
                return await self._rewrite(repo, branch, op, rule, repository_id)
            except UnavailableError as e:
                if not e.outcome_unknown or attempt + 1 == self._max_attempts:
                    raise
                await self._backoff(attempt)
        raise AssertionError("unreachable")

    # --- workspaces --------------------------------------------------------------------------

    def _workspace_item(self, repo: str, ws: Workspace) -> dict[str, Any]:
        return {
            **self._key(workspaces_partition(repo), ws.name),
            "branch": _s(ws.branch),
            "base": _s(ws.base),
            "l2": _l(ws.l2),
            "l1": _l(ws.l1),
            "created_at": _n(float(ws.created_at)),
        }

    @staticmethod
    def _workspace(item: Mapping[str, Any], where: str) -> Workspace:
        try:
            return Workspace(
                item["name"]["S"],
                item["branch"]["S"],
                item["base"]["S"],
                tuple(v["S"] for v in item["l2"]["L"]),
                tuple(v["S"] for v in item["l1"]["L"]),
                float(item["created_at"]["N"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptFileError(where, f"malformed workspace item: {e!r}") from e

    def _moves_update(self, repo: str) -> dict[str, Any]:
        return {
            "TableName": self.table,
            "Key": self._key(MOVES, repo),
            "UpdateExpression": "SET #n = if_not_exists(#n, :zero) + :one",
            "ExpressionAttributeNames": {"#n": "n"},
            "ExpressionAttributeValues": {":zero": _n(0), ":one": _n(1)},
        }

    def _repository_check(self, repo: str) -> dict[str, Any]:
        return {
            "TableName": self.table,
            "Key": self._key(REPOSITORIES, repo),
            "ConditionExpression": "attribute_exists(#name) AND attribute_not_exists(#deleting)",
            "ExpressionAttributeNames": {"#name": "name", "#deleting": "deleting"},
        }

    def _put_if_version(self, item: dict[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "TableName": self.table,
            "Item": item,
            "ConditionExpression": "#ver = :ver",
            "ExpressionAttributeNames": {"#ver": "ver"},
            "ExpressionAttributeValues": {":ver": old["ver"]},
        }

    async def _transact(self, what: str, items: list[dict[str, Any]]) -> list[str]:
        """One TransactWriteItems; [] if applied, else the cancellation reason codes."""
        try:
            await self._request(
                "transact_write_items",
                what,
                mutation=True,
                idempotent=False,
                TransactItems=items,
            )
        except ClientError as e:
            return [str(r.get("Code")) for r in e.response.get("CancellationReasons", [])]
        return []

    async def _stash_workspace(
        self, repo: str, branch: str, name: str, expected: Ref, created_at: float
    ) -> Ref:
        where = f"{self.table}: {repo}/{branch}"
        for attempt in range(100):
            item = await self._get_item(repo, branch, "stash workspace")
            if item is None:
                raise await self._missing(repo, branch)
            cur = self._ref(item, where)
            new, ws = transitions.stash(f"{repo}/{branch}", cur, expected, branch, name, created_at)
            ref_item = self._full_item(
                repo,
                branch,
                item,
                new,
                transitions.consume(_tail(item, where), cur.l1),
                _groups(item, where),
            )
            reasons = await self._transact(
                "stash workspace",
                [
                    {"Put": self._put_if_version(ref_item, item)},
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": self._workspace_item(repo, ws),
                            "ConditionExpression": "attribute_not_exists(#name)",
                            "ExpressionAttributeNames": {"#name": "name"},
                        }
                    },
                    {"Update": self._moves_update(repo)},
                    {"ConditionCheck": self._repository_check(repo)},
                ],
            )
            if not reasons:
                return new
            if reasons[3:4] == ["ConditionalCheckFailed"]:
                raise RepositoryNotFoundError(f"repository not found: {repo}")
            if reasons[1:2] == ["ConditionalCheckFailed"]:
                raise WorkspaceExistsError(f"workspace already exists: {repo}/{name}")
            if reasons[:1] == ["ConditionalCheckFailed"] or "TransactionConflict" in reasons:
                await self._backoff(min(attempt, 4))
                continue  # the ref changed: the rule decides on a fresh read
            raise UnavailableError(f"{self.url}: stash {repo}/{branch}: cancelled {reasons}")
        raise UnavailableError(f"{self.url}: stash {repo}/{branch}: kept losing to other writes")

    async def _pop_workspace(self, repo: str, name: str, branch: str) -> Ref:
        where = f"{self.table}: {repo}/{branch}"
        for attempt in range(100):
            ws = await self._get_workspace(repo, name)
            item = await self._get_item(repo, branch, "pop workspace")
            if item is None:
                raise await self._missing(repo, branch)
            cur = self._ref(item, where)
            new = transitions.pop(f"{repo}/{branch}", cur, ws, branch)
            ref_item = self._full_item(
                repo, branch, item, new, _tail(item, where), _groups(item, where)
            )
            reasons = await self._transact(
                "pop workspace",
                [
                    {"Put": self._put_if_version(ref_item, item)},
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": self._key(workspaces_partition(repo), name),
                            "ConditionExpression": "attribute_exists(#name)",
                            "ExpressionAttributeNames": {"#name": "name"},
                        }
                    },
                    {"Update": self._moves_update(repo)},
                ],
            )
            if not reasons:
                return new
            if "ConditionalCheckFailed" in reasons or "TransactionConflict" in reasons:
                await self._backoff(min(attempt, 4))
                continue  # the ref or the workspace changed: read both again
            raise UnavailableError(f"{self.url}: pop {repo}/{name}: cancelled {reasons}")
        raise UnavailableError(f"{self.url}: pop {repo}/{name}: kept losing to other writes")

    async def _missing_workspace(self, repo: str, name: str) -> Exception:
        record = await self._get_item(REPOSITORIES, repo, "get repository")
        if record is None or "deleting" in record:
            return RepositoryNotFoundError(f"repository not found: {repo}")
        return WorkspaceNotFoundError(f"workspace not found: {repo}/{name}")

    async def _get_workspace(self, repo: str, name: str) -> Workspace:
        item = await self._get_item(workspaces_partition(repo), name, "get workspace")
        if item is None:
            raise await self._missing_workspace(repo, name)
        return self._workspace(item, f"{self.table}: workspace {repo}/{name}")

    async def _list_workspaces(self, repo: str, after: str | None, limit: int) -> list[Workspace]:
        record, items = await asyncio.gather(
            self._get_item(REPOSITORIES, repo, "list workspaces"),
            self._query(
                workspaces_partition(repo), "list workspaces", after=after, prefix="", limit=limit
            ),
        )
        if record is None or "deleting" in record:
            raise RepositoryNotFoundError(f"repository not found: {repo}")
        return [self._workspace(i, f"{self.table}: workspaces of {repo}") for i in items]

    async def _drop_workspace(self, repo: str, name: str) -> None:
        if not await self._delete_existing(workspaces_partition(repo), name, "drop workspace"):
            raise await self._missing_workspace(repo, name)

    async def _move_count(self, repo: str) -> int:
        record, item = await asyncio.gather(
            self._get_item(REPOSITORIES, repo, "move count"),
            self._get_item(MOVES, repo, "move count"),
        )
        if record is None or "deleting" in record:
            raise RepositoryNotFoundError(f"repository not found: {repo}")
        return int(item["n"]["N"]) if item else 0

    # --- records --------------------------------------------------------------------------

    async def _put_record(self, kind: str, name: str, value: bytes, if_absent: bool) -> None:
        condition: dict[str, Any] = {}
        if if_absent:
            condition = {
                "ConditionExpression": "attribute_not_exists(#name)",
                "ExpressionAttributeNames": {"#name": "name"},
            }
        try:
            await self._request(
                "put_item",
                "put record",
                mutation=True,
                idempotent=not if_absent,
                TableName=self.table,
                Item={**self._key(records_partition(kind), name), "value": {"B": value}},
                **condition,
            )
        except _Rejected:
            raise RecordExistsError(f"record already exists: {kind}/{name}") from None

    async def _get_record(self, kind: str, name: str) -> bytes:
        item = await self._get_item(records_partition(kind), name, "get record")
        if item is None:
            raise RecordNotFoundError(f"record not found: {kind}/{name}")
        return bytes(item["value"]["B"])

    async def _list_records(
        self, kind: str, after: str | None, limit: int
    ) -> list[tuple[str, bytes]]:
        items = await self._query(
            records_partition(kind), "list records", after=after, prefix="", limit=limit
        )
        return [(i["name"]["S"], bytes(i["value"]["B"])) for i in items]

    async def _delete_record(self, kind: str, name: str) -> None:
        if not await self._delete_existing(records_partition(kind), name, "delete record"):
            raise RecordNotFoundError(f"record not found: {kind}/{name}")

    async def _delete_existing(self, partition: str, name: str, what: str) -> bool:
        """Delete the item ``name`` of ``partition`` if it exists; False if it did not
        (a conditional delete: never idempotent, the caller reports the missing item)."""
        try:
            await self._request(
                "delete_item",
                what,
                mutation=True,
                idempotent=False,
                TableName=self.table,
                Key=self._key(partition, name),
                ConditionExpression="attribute_exists(#name)",
                ExpressionAttributeNames={"#name": "name"},
            )
        except _Rejected:
            return False
        return True

    # --- window counters -------------------------------------------------------------------

    async def _count_in_window(self, name: str, window_s: float, now: float) -> WindowCount:
        # Within the window: one conditional ADD.  Absent or ended: a conditional put
        # starts a new window; a concurrent start makes one of them add instead.
        for _ in range(_COUNT_ATTEMPTS):
            try:
                response = await self._request(
                    "update_item",
                    "count in window",
                    mutation=True,
                    idempotent=False,
                    TableName=self.table,
                    Key=self._key(COUNTERS, name),
                    UpdateExpression="ADD #value :one",
                    ConditionExpression="#ends_at > :now",
                    ExpressionAttributeNames={"#value": "value", "#ends_at": "ends_at"},
                    ExpressionAttributeValues={":one": _n(1), ":now": _n(now)},
                    ReturnValues="ALL_NEW",
                )
                item = response["Attributes"]
                return WindowCount(int(item["value"]["N"]), float(item["ends_at"]["N"]))
            except _Rejected:
                pass
            ends = now + window_s
            condition = "attribute_not_exists(#name) OR #ends_at <= :now"
            try:
                await self._request(
                    "put_item",
                    "count in window",
                    mutation=True,
                    idempotent=False,
                    TableName=self.table,
                    Item={
                        **self._key(COUNTERS, name),
                        "value": _n(1),
                        "ends_at": _n(ends),
                        "expires": _n(math.ceil(ends)),
                    },
                    ConditionExpression=condition,
                    ExpressionAttributeNames=_names(condition),
                    ExpressionAttributeValues={":now": _n(now)},
                )
                return WindowCount(1, ends)
            except _Rejected:
                continue
        raise UnavailableError(
            f"dynamodb {self.table}: counter {name}: {_COUNT_ATTEMPTS} attempts met "
            "concurrent window starts",
            outcome_unknown=False,
        )

    async def _read_window_count(self, name: str, now: float) -> WindowCount:
        item = await self._get_item(COUNTERS, name, "read window count")
        if item is None or float(item["ends_at"]["N"]) <= now:
            return WindowCount(0, 0.0)
        return WindowCount(int(item["value"]["N"]), float(item["ends_at"]["N"]))

    # --- leases ------------------------------------------------------------------------------

    async def _acquire_lease(self, key: str, owner: str, ttl_seconds: float) -> bool:
        now = self._clock()
        condition = "attribute_not_exists(#name) OR #owner = :owner OR #expires <= :now"
        try:
            await self._request(
                "put_item",
                "acquire lease",
                mutation=True,
                idempotent=True,
                TableName=self.table,
                Item={
                    **self._key(LEASES, key),
                    "owner": _s(owner),
                    "expires": _n(float(now + ttl_seconds)),
                },
                ConditionExpression=condition,
                ExpressionAttributeNames=_names(condition),
                ExpressionAttributeValues={":owner": _s(owner), ":now": _n(float(now))},
            )
        except _Rejected:
            return False
        return True

    async def _release_lease(self, key: str, owner: str) -> None:
        with contextlib.suppress(_Rejected):
            await self._request(
                "delete_item",
                "release lease",
                mutation=True,
                idempotent=True,
                TableName=self.table,
                Key=self._key(LEASES, key),
                ConditionExpression="#owner = :owner",
                ExpressionAttributeNames={"#owner": "owner"},
                ExpressionAttributeValues={":owner": _s(owner)},
            )

    # --- life cycle -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            return
        async with self._lock:
            self._closed = True
            self._client = None
            await self._stack.aclose()
