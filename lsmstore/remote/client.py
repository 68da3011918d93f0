"""The client API over a server: ``RemoteStore`` -> ``RemoteRepository`` ->
``RemoteBranch`` / ``RemoteRef``, the same methods as the embedded classes
(:mod:`lsmstore.api`), each one request (or a page of requests for a listing) to the
server's lakeFS API and its ``/api/v1/lsm`` extensions (docs/server.md), which call the
server's operations layer (:mod:`lsmstore.operations`): the rules of an operation are
the server's, never re-implemented here.  Arguments are checked as the embedded calls
check them, before any request; errors are the types the server's bodies name.

Raw keys and values are the embedded ones: ``put``/``put_many``/``delete``/
``delete_many`` travel as ``kv``/``kvdelete`` entries of the batch endpoint (coalesced:
:mod:`lsmstore.remote.batcher`), which stages exactly the records the embedded calls
stage; ``get``/``exists``/``stat``/``list``/``lookup`` use the server's raw reads
(``/api/v1/lsm/.../kv``, keys base64url so any bytes travel).  Objects use the lakeFS
routes.  What the embedded store knows and a server does not say: a ``Change`` carries
no records, and ``Commit``/``MergeResult`` fields are those the API returns.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

import msgpack

from lsmstore import refexpr, validate
from lsmstore.closing import AsyncCloseable
from lsmstore.config import Config
from lsmstore.errors import (
    ClosedError,
    InvalidInputError,
    NotFoundError,
    RefNotFoundError,
    UnavailableError,
)
from lsmstore.objects.addresses import check_address
from lsmstore.objects.api import check_listing
from lsmstore.objects.linking import LINKS
from lsmstore.objects.model import LinkItem, as_link
from lsmstore.objects.rules import (
    check_checksum,
    check_content_type,
    check_metadata,
    check_mtime,
    check_path,
    check_size,
)
from lsmstore.objects.source import Source
from lsmstore.operations.imports import check_paths as check_import_paths
from lsmstore.operations.protection import check_patterns
from lsmstore.refstore.base import Ref as RefValue
from lsmstore.refstore.base import Repository as RepositoryInfo
from lsmstore.refstore.base import Workspace
from lsmstore.refstore.names import (
    check_new_branch_name,
    check_new_repository_name,
    check_new_tag_name,
    check_ref_name,
    check_repository_name,
)
from lsmstore.remote.batcher import Batcher
from lsmstore.remote.http import HttpTransport, seg
from lsmstore.staging.keys import check_key, encode_opt, make_record
from lsmstore.types import (
    STRATEGIES,
    ActionRun,
    BranchProtection,
    Change,
    Commit,
    Entry,
    HookRun,
    ImportPath,
    ImportStatus,
    LogEntry,
    MergeResult,
    ObjectStats,
    Stat,
)

PAGE = 1000
_CHUNK = 4 << 20
#: What a batch entry costs beyond its key and value (op name, framing), for the
#: coalescer's byte bound.
_ENTRY_BYTES = 8
#: The raw reads' header telling whether a value is staged (lsmstore.server.routes.kv).
_STAGED = "X-Lsm-Staged"


def _commit(d: Mapping[str, Any]) -> Commit:
    try:
        return Commit(
            metarange_id=d["meta_range_id"],
            parents=tuple(d["parents"]),
            committer=d["committer"],
            message=d["message"],
            created_at=int(d["creation_date"]),
            metadata=dict(d.get("metadata") or {}),
            generation=int(d.get("generation") or 1),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise UnavailableError(f"the server answered garbage: not a commit: {d!r:.200}") from e


def _import_status(import_id: str, d: Any) -> ImportStatus:
    try:
        commit = d.get("commit")
        error = d.get("error")
        when = datetime.fromisoformat(str(d["update_time"]).replace("Z", "+00:00"))
        return ImportStatus(
            import_id,
            bool(d["completed"]),
            when.timestamp(),
            int(d.get("ingested_objects") or 0),
            d.get("metarange_id"),
            commit["id"] if commit else None,
            _commit(commit) if commit else None,
            str(error["message"]) if error else None,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UnavailableError(
            f"the server answered garbage: not an import status: {d!r:.200}"
        ) from e


def _commit_fields(
    message: str | None,
    committer: str | None,
    metadata: Mapping[str, str] | None,
    strategy: Any,
) -> dict[str, Any]:
    """The checked fields of a merge or revert body (only those given): ``message``,
    ``metadata``, ``committer`` (who a server records: docs/server.md, "Committer"),
    ``strategy``."""
    body: dict[str, Any] = {}
    if validate.check_message(message) is not None:
        body["message"] = message
    metadata = validate.check_metadata(metadata)
    if metadata:
        body["metadata"] = dict(metadata)
    if validate.check_committer(committer) is not None:
        body["committer"] = committer
    if strategy not in STRATEGIES:
        raise InvalidInputError(
            f"unknown merge strategy {strategy!r}: expected None, 'source-wins' or 'dest-wins'"
        )
    if strategy:
        body["strategy"] = strategy
    return body


def _etag(headers: Mapping[str, str]) -> str:
    etag = headers.get("ETag") or headers.get("etag")
    if not etag:
        raise UnavailableError("the server answered branch protection rules without an ETag")
    return etag.strip('"')


def _time(text: Any) -> float:
    return datetime.fromisoformat(str(text)).timestamp() if text else 0.0


def _json(r: Any) -> Any:
    try:
        return r.json()
    except ValueError as e:
        raise UnavailableError(f"the server answered garbage: {r.body!r:.200}") from e


def _results(r: Any) -> list[Any]:
    body = _json(r)
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list):
        raise UnavailableError(f"the server answered garbage: no results: {r.body!r:.200}")
    return results


def _action_run(d: Any) -> ActionRun:
    """A run as lakeFS's ``ActionRun`` shows it."""
    try:
        return ActionRun(
            str(d["run_id"]), str(d["event_type"]), str(d["branch"]), "",
            str(d.get("commit_id") or ""), _time(d["start_time"]), _time(d.get("end_time")),
            d["status"] == "completed",
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise UnavailableError(f"the server answered garbage: not a run: {d!r:.200}") from e


def _hook_run(d: Any) -> HookRun:
    try:
        return HookRun(
            str(d["hook_run_id"]), str(d["action"]), str(d["hook_id"]),
            _time(d["start_time"]), _time(d.get("end_time")), d["status"] == "completed",
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise UnavailableError(f"the server answered garbage: not a hook run: {d!r:.200}") from e


def _protection(r: Any) -> BranchProtection:
    """Branch protection rules as ``getBranchProtectionRules`` answers them."""
    try:
        patterns = tuple(str(rule["pattern"]) for rule in r.json())
    except (KeyError, TypeError) as e:
        raise UnavailableError(
            f"the server answered garbage: no branch protection rules: {r.body!r:.200}"
        ) from e
    return BranchProtection(patterns, _etag(r.headers))


def _merge_result(d: Any) -> MergeResult:
    """A merge's or revert's result as the server reports it (``MergeResult`` with the
    fields of lsmstore.server.models.merge_result)."""
    try:
        commit = _commit(d["commit"]) if d.get("commit") is not None else None
        base = d.get("merge_base")
        return MergeResult(
            str(d["reference"]), commit, bool(d["merged"]), str(d["source"]),
            str(d["destination"]), None if base is None else str(base),
        )  # fmt: skip
    except (KeyError, TypeError, AttributeError) as e:
        raise UnavailableError(f"the server answered garbage: no merge result: {d!r:.200}") from e


def _workspace(d: Any) -> Workspace:
    try:
        return Workspace(
            str(d["name"]), str(d["branch"]), str(d["base"]), tuple(d["l2"]), tuple(d["l1"]),
            float(d["created_at"]),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise UnavailableError(f"the server answered garbage: not a workspace: {d!r:.200}") from e


def _ref_value(d: Any) -> RefValue:
    """A branch's ref value from the server's ``StagingState``."""
    try:
        return RefValue("branch", d["commit_id"], tuple(d["l2"]), tuple(d["l1"]))
    except (KeyError, TypeError) as e:
        raise UnavailableError(f"the server answered garbage: {d!r:.200}") from e


def _stats(d: Mapping[str, Any]) -> ObjectStats:
    try:
        if d["path_type"] == "common_prefix":
            return ObjectStats(d["path"], "common_prefix")
        return ObjectStats(
            path=d["path"],
            path_type="object",
            physical_address=d.get("physical_address") or "",
            checksum=d.get("checksum") or "",
            size=int(d.get("size_bytes") or 0),
            mtime=int(d.get("mtime") or 0),
            content_type=d.get("content_type") or "",
            metadata=dict(d.get("metadata") or {}),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise UnavailableError(f"the server answered garbage: not ObjectStats: {d!r:.200}") from e


_packb = msgpack.Packer(use_bin_type=True).pack
_MSGPACK = {"Content-Type": "application/msgpack"}


def encode_batch(entries: list[Any]) -> bytes:
    """A batch body (docs/server.md "Batch write"): msgpack, keys and values as bytes."""
    body: bytes = _packb(entries)
    return body


def key_param(key: bytes) -> str:
    """A key as the raw reads take it with ``encoding=base64`` (base64url, unpadded)."""
    return base64.urlsafe_b64encode(key).decode("ascii").rstrip("=")


def _key_of(text: object) -> bytes:
    if not isinstance(text, str):
        raise UnavailableError(f"the server answered garbage: not a key: {text!r:.200}")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except ValueError as e:
        raise UnavailableError(f"the server answered garbage: not a key: {text!r:.200}") from e


def _stat(d: Any) -> Stat:
    try:
        return Stat(_key_of(d["key"]), int(d["size_bytes"]), bytes.fromhex(d["identity"]),
                    bool(d["staged"]))  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise UnavailableError(f"the server answered garbage: not a stat: {d!r:.200}") from e


def _entry(d: Any) -> Entry:
    try:
        key = _key_of(d["key"])
        if d["common_prefix"]:
            return Entry(key, common_prefix=True)
        return Entry(key, int(d["size_bytes"]), bytes.fromhex(d["identity"]))
    except (KeyError, TypeError, ValueError) as e:
        raise UnavailableError(f"the server answered garbage: not an entry: {d!r:.200}") from e


class RemoteStore:
    """Repositories of one server.  ``aclose()`` flushes pending writes and closes the
    connection pool; use it as ``async with``."""

    def __init__(self, config: Config, *, url: str) -> None:
        self.config = config
        if not config.access_key_id or not config.secret_access_key:
            raise InvalidInputError(
                f"no credentials for the server {url}: set access_key_id and "
                "secret_access_key (arguments, LSMSTORE_ACCESS_KEY_ID / "
                "LSMSTORE_SECRET_ACCESS_KEY, or the configuration file)"
            )
        self.http = HttpTransport(
            url,
            access_key_id=config.access_key_id,
            secret_access_key=config.secret_access_key,
            max_connections=config.remote_max_connections,
            timeout_s=config.remote_timeout_s,
        )
        self.url = self.http.base_url
        self._batchers: dict[tuple[str, str], Batcher] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"RemoteStore({self.url!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("store is closed")

    async def create_repository(
        self, name: str, *, storage_namespace: str, default_branch: str = "main"
    ) -> RemoteRepository:
        """As the embedded ``create_repository``, one request (lakeFS ``createRepository``;
        repository metadata cannot be given over the API).  RefExistsError if the name is taken."""
        self._check_open()
        check_new_repository_name(name)
        check_new_branch_name(default_branch)
        r = await self.http.request(
            "POST",
            "/repositories",
            json_body={"name": name, "storage_namespace": storage_namespace,
                       "default_branch": default_branch, "sample_data": False},
            ok=(201,),
            kind="create",
        )  # fmt: skip
        return self._repository(r.json())

    async def get_repository(self, name: str) -> RemoteRepository:
        """One request; RepositoryNotFoundError if there is none."""
        self._check_open()
        check_repository_name(name)
        r = await self.http.request("GET", f"/repositories/{seg(name)}", kind="repository")
        return self._repository(r.json())

    async def list_repositories(
        self, *, after: str | None = None, limit: int = 1000
    ) -> list[RemoteRepository]:
        """Repositories in name order, strictly after ``after``, at most ``limit``
        (paged requests)."""
        self._check_open()
        return [
            self._repository(d) async for d in self._pages("/repositories", {"after": after}, limit)
        ]

    async def delete_repository(self, name: str) -> None:
        """One request: the server forgets the repository and its refs."""
        self._check_open()
        for key in [k for k in self._batchers if k[0] == name]:
            await self._batchers.pop(key).aclose()
        await self.http.request(
            "DELETE", f"/repositories/{seg(name)}", ok=(204,), kind="repository"
        )

    def _repository(self, d: Any) -> RemoteRepository:
        try:
            info = RepositoryInfo(
                d["id"], d["storage_namespace"], d["default_branch"],
                created_at=float(d.get("creation_date") or 0),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise UnavailableError(
                f"the server answered garbage: not a repository: {d!r:.200}"
            ) from e
        return RemoteRepository(self, info)

    async def _pages(
        self, path: str, params: Mapping[str, Any], limit: int | None, kind: str = ""
    ) -> AsyncIterator[Any]:
        """Every result of a paginated lakeFS listing (at most ``limit``)."""
        validate.check_optional_int(limit, "listing limit", min_value=0)
        q = dict(params)
        n = 0
        while True:
            amount = PAGE if limit is None else min(PAGE, limit - n)
            if amount <= 0:
                return
            q["amount"] = amount
            body = (await self.http.request("GET", path, params=q, kind=kind)).json()
            try:
                results = body["results"]
                pagination = body["pagination"]
                has_more = bool(pagination["has_more"])
                next_offset = pagination["next_offset"]
            except (KeyError, TypeError) as e:
                raise UnavailableError(
                    f"the server answered garbage: not a listing: {body!r:.200}"
                ) from e
            for item in results:
                yield item
                n += 1
            if not has_more or not results:
                return
            q["after"] = next_offset

    def batcher(self, repo: str, branch: str) -> Batcher:
        """The coalescer of ``repo``/``branch``'s raw writes and links (one per branch,
        made on first use).  At most ``remote_batchers_max`` are kept: making one past
        it drops every idle one (nothing pending or in flight, so nothing is lost or
        reordered); busy ones stay, each held by a caller waiting on it.  Callers
        submit to the coalescer at once (``await store.batcher(...).submit(...)``), so
        it is never idle while handed out."""
        key = (repo, branch)
        b = self._batchers.get(key)
        if b is None:
            self._check_open()
            if len(self._batchers) >= self.config.remote_batchers_max:
                for k in [k for k, v in self._batchers.items() if v.idle]:
                    del self._batchers[k]
            path = f"/lsm/repositories/{seg(repo)}/branches/{seg(branch)}/batch"

            async def send(entries: list[Any]) -> None:
                await self.http.request(
                    "POST", path, data=encode_batch(entries), headers=_MSGPACK,
                    ok=(200, 201, 204), kind="ref",
                )  # fmt: skip

            cfg = self.config
            b = self._batchers[key] = Batcher(
                send,
                window_s=cfg.remote_batch_window_ms / 1000,
                max_entries=cfg.remote_batch_max_entries,
                max_bytes=cfg.remote_batch_max_bytes,
                max_inflight=cfg.remote_max_inflight_batches,
            )
        return b

    @property
    def closed(self) -> bool:
        """Whether ``aclose()`` was called."""
        return self._closed

    async def aclose(self) -> None:
        """Send and wait for every coalesced write, then close the connections."""
        if self._closed:
            return
        try:
            await asyncio.gather(*(b.aclose() for b in self._batchers.values()),
                                 return_exceptions=True)  # fmt: skip
        finally:
            self._closed = True
            await self.http.aclose()

    async def __aenter__(self) -> Self:
        self._check_open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class RemoteRepository:
    def __init__(self, store: RemoteStore, info: RepositoryInfo) -> None:
        self.store = store
        self.info = info
        self.name = info.name
        self.storage_namespace = info.storage_namespace
        self.default_branch = info.default_branch
        self._base = f"/repositories/{seg(info.name)}"
        self._workspaces = f"/lsm/repositories/{seg(info.name)}/workspaces"

    def __repr__(self) -> str:
        return f"RemoteRepository({self.name!r}, {self.store.url!r})"

    @property
    def created_at(self) -> float:
        """When the repository was created (seconds since the epoch)."""
        return self.info.created_at

    @property
    def http(self) -> HttpTransport:
        """The store's HTTP transport."""
        return self.store.http

    def branch(self, name: str | None = None) -> RemoteBranch:
        """A handle on a branch (the default branch when ``name`` is None). No I/O."""
        return RemoteBranch(self, check_ref_name(self.default_branch if name is None else name))

    def _expression(self, expression: object) -> str:
        """A ref expression (the default branch for None), checked before it is sent."""
        if expression is None:
            return self.default_branch
        return str(refexpr.parse(expression))  # type: ignore[arg-type]  # raises on junk

    def ref(self, expression: str) -> RemoteRef:
        """A read-only view of a branch, tag or commit (:class:`RemoteRef`). No I/O."""
        if not isinstance(expression, str) or not expression:
            raise InvalidInputError(f"invalid ref expression {expression!r}")
        return RemoteRef(self, expression)

    async def list_branches(
        self, *, prefix: str = "", after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """Branch names in order, with ``prefix``, strictly after ``after``, at most ``limit``."""
        return await self._ref_names("/branches", prefix, after, limit)

    async def _ref_names(self, path: str, prefix: str, after: str | None, limit: int) -> list[str]:
        """The names a lakeFS listing of branches or tags (``path``) pages through."""
        return [
            d["id"]
            async for d in self.store._pages(
                self._base + path, {"prefix": prefix or None, "after": after}, limit,
                kind="repository",
            )
        ]  # fmt: skip

    async def create_branch(self, name: str, *, source: str | None = None) -> RemoteBranch:
        """One request (lakeFS ``createBranch``): branch ``name`` at the commit ``source``
        names (default: the default branch).  RefExistsError if the name is taken."""
        check_new_branch_name(name)
        await self.http.request(
            "POST", self._base + "/branches",
            json_body={"name": name, "source": self._expression(source)},
            ok=(201,), kind="create",
        )  # fmt: skip
        return self.branch(name)

    async def delete_branch(self, name: str) -> None:
        """One request; the server drops the branch's staged writes.  InvalidInputError
        for the default branch, RefNotFoundError if there is none."""
        check_ref_name(name)
        await self.branch(name).flush()
        await self.http.request(
            "DELETE", f"{self._base}/branches/{seg(name)}", ok=(204,), kind="ref"
        )

    async def create_tag(self, name: str, target: str) -> str:
        """One request: tag the commit ``target`` names; the commit ID.  RefExistsError."""
        check_new_tag_name(name)
        r = await self.http.request(
            "POST", self._base + "/tags", json_body={"id": name, "ref": target},
            ok=(201,), kind="create",
        )  # fmt: skip
        return str(r.json()["commit_id"])

    async def delete_tag(self, name: str) -> None:
        """One request; RefNotFoundError if there is no such tag."""
        await self.http.request("DELETE", f"{self._base}/tags/{seg(name)}", ok=(204,), kind="ref")

    async def list_tags(
        self, *, prefix: str = "", after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """Tag names in order, with ``prefix``, strictly after ``after``, at most ``limit``."""
        return await self._ref_names("/tags", prefix, after, limit)

    # --- workspaces (docs/client.md, "Workspaces") ------------------------------------

    async def workspaces(self, *, after: str | None = None, limit: int = 1000) -> list[Workspace]:
        """The repository's workspaces in name order (paged requests)."""
        validate.check_optional_str(after, "workspaces after")
        return [
            _workspace(d)
            async for d in self.store._pages(
                self._workspaces, {"after": after}, limit, kind="repository"
            )
        ]

    async def get_workspace(self, name: str) -> Workspace:
        """One request; WorkspaceNotFoundError if there is none."""
        check_ref_name(name, "workspace")
        r = await self.http.request(
            "GET", f"{self._workspaces}/{seg(name)}", kind="workspace", what=name
        )
        return _workspace(r.json())

    async def drop_workspace(self, name: str) -> None:
        """One request: delete a workspace (its changes are lost).  WorkspaceNotFoundError."""
        check_ref_name(name, "workspace")
        await self.http.request(
            "DELETE", f"{self._workspaces}/{seg(name)}", ok=(204,), kind="workspace", what=name
        )

    async def resolve_commit(self, expression: str) -> tuple[str, Commit]:
        """One request: the commit ID ``expression`` names and the commit.  RefNotFoundError."""
        r = await self.http.request("GET", f"{self._base}/commits/{seg(expression)}", kind="ref")
        d = r.json()
        return str(d["id"]), _commit(d)

    async def log(
        self,
        ref: str | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
        first_parent: bool = True,
    ) -> AsyncIterator[LogEntry]:
        """Commits from ``ref`` (default: the default branch) back, newest first, as the
        embedded ``log`` (paged requests)."""
        validate.check_optional_str(after, "log after")
        validate.check_bool(first_parent, "log first_parent")
        validate.check_optional_int(limit, "log limit", min_value=0)
        path = f"{self._base}/refs/{seg(self._expression(ref))}/commits"
        async for d in self.store._pages(
            path, {"after": after, "first_parent": first_parent}, limit, kind="ref"
        ):
            yield LogEntry(str(d["id"]), _commit(d))

    async def diff(self, left: str, right: str) -> AsyncIterator[Change]:
        """Changes from the committed state ``left`` names to ``right``'s, in key order
        (paged requests; a Change carries no records)."""
        path = f"{self._base}/refs/{seg(left)}/diff/{seg(right)}"
        async for d in self.store._pages(path, {"type": "two_dot"}, None, kind="ref"):
            yield Change(d["path"].encode(), d["type"], None, None)

    async def diff_uncommitted(self, branch: str | None = None) -> list[Change]:
        """What committing ``branch`` (default: the default branch) now would change."""
        return await self.branch(branch).diff_uncommitted()

    async def branch_protection(self) -> BranchProtection:
        """As the embedded ``branch_protection``: lakeFS's
        ``getBranchProtectionRules`` (the ETag from its header)."""
        r = await self.http.request(
            "GET", f"{self._base}/settings/branch_protection", kind="repository"
        )
        return _protection(r)

    async def set_branch_protection(
        self, patterns: Sequence[str], *, if_match: str | None = None
    ) -> BranchProtection:
        """As the embedded ``set_branch_protection``: lakeFS's
        ``setBranchProtectionRules`` with ``If-Match``."""
        checked = check_patterns(patterns)
        headers = {"If-Match": f'"{if_match.strip(chr(34))}"'} if if_match is not None else None
        r = await self.http.request(
            "PUT", f"{self._base}/settings/branch_protection",
            json_body=[{"pattern": p} for p in checked], headers=headers, ok=(204,),
            kind="repository",
        )  # fmt: skip
        return BranchProtection(checked, _etag(r.headers))

    async def action_runs(
        self,
        *,
        branch: str | None = None,
        commit: str | None = None,
        after: str | None = None,
        amount: int = 100,
    ) -> list[ActionRun]:
        """As the embedded ``action_runs``: lakeFS's ``listRepositoryRuns``."""
        validate.check_int(amount, "amount", min_value=1, max_value=1000)
        params = {"branch": branch, "commit": commit, "after": after, "amount": amount}
        r = await self.http.request(
            "GET", f"{self._base}/actions/runs",
            params={k: v for k, v in params.items() if v}, kind="repository",
        )  # fmt: skip
        return [_action_run(d) for d in _results(r)]

    async def action_run(self, run_id: str) -> ActionRun:
        """As the embedded ``action_run``: lakeFS's ``getRun``."""
        r = await self.http.request("GET", f"{self._base}/actions/runs/{seg(run_id)}", kind="run")
        return _action_run(_json(r))

    async def run_hooks(
        self, run_id: str, *, after: str | None = None, amount: int = 100
    ) -> list[HookRun]:
        """As the embedded ``run_hooks``: lakeFS's ``listRunHooks``."""
        validate.check_int(amount, "amount", min_value=1, max_value=1000)
        params: dict[str, Any] = {"amount": amount}
        if after:
            params["after"] = after
        r = await self.http.request(
            "GET", f"{self._base}/actions/runs/{seg(run_id)}/hooks", params=params, kind="run"
        )
        return [_hook_run(d) for d in _results(r)]

    async def hook_output(self, run_id: str, hook_run_id: str) -> bytes:
        """As the embedded ``hook_output``: lakeFS's ``getRunHookOutput``."""
        r = await self.http.request(
            "GET", f"{self._base}/actions/runs/{seg(run_id)}/hooks/{seg(hook_run_id)}/output",
            kind="run",
        )  # fmt: skip
        return r.body

    async def merge(
        self,
        source: str,
        *,
        into: str | None = None,
        strategy: Any = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
        squash: bool = False,
    ) -> MergeResult:
        """As the embedded ``merge``, one request; the MergeResult is the server's own
        (``merged`` False when there was nothing to merge).  MergeConflictError."""
        dest = self.branch(into).name
        refexpr.parse(source)
        body = _commit_fields(message, committer, metadata, strategy)
        if validate.check_bool(squash, "merge squash"):
            body["squash_merge"] = True
        body["allow_empty"] = True  # "already merged" is an answer (merged False), not 400
        r = await self.http.request(
            "POST", f"{self._base}/refs/{seg(source)}/merge/{seg(dest)}",
            json_body=body, ok=(200,), kind="merge",
        )  # fmt: skip
        return _merge_result(r.json())

    async def revert(
        self,
        commit: str,
        *,
        branch: str | None = None,
        parent: int = 1,
        strategy: Any = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> MergeResult:
        """As the embedded ``revert``, one request (lsmstore's revert route, which answers
        the revert's MergeResult)."""
        dest = self.branch(branch).name
        refexpr.parse(commit)
        validate.check_int(parent, "revert parent", min_value=1, max_value=2)
        fields = _commit_fields(message, committer, metadata, strategy)
        body: dict[str, Any] = {"ref": commit, "parent_number": parent}
        body["commit_overrides"] = {
            k: fields.pop(k) for k in ("message", "metadata") if k in fields
        }
        body.update(fields)
        r = await self.http.request(
            "POST", f"/lsm/repositories/{seg(self.name)}/branches/{seg(dest)}/revert",
            json_body=body, ok=(200,), kind="merge",
        )  # fmt: skip
        return _merge_result(r.json())


class _RemoteReads:
    repository: RemoteRepository
    _ref: str

    async def _at(self) -> str:
        """The ref the next read names (a branch's name; a Ref's resolved commit)."""
        return self._ref

    async def _obj_path(self) -> str:
        return f"{self.repository._base}/refs/{seg(await self._at())}/objects"

    @property
    def _max_key(self) -> int:
        return self.repository.store.config.max_key_bytes

    async def _kv_path(self) -> str:
        r = self.repository
        return f"/lsm/repositories/{seg(r.name)}/refs/{seg(await self._at())}/kv"

    async def lookup(self, key: str | bytes) -> tuple[bytes, Stat]:
        """The value of ``key`` and its :class:`Stat`, from one request; NotFoundError
        (a KeyError) when absent or deleted."""
        k = check_key(key, self._max_key)
        r = await self.repository.http.request(
            "GET", await self._kv_path(), params={"key": key_param(k), "encoding": "base64"},
            what=validate.preview(k),
        )  # fmt: skip
        try:
            identity = bytes.fromhex(r.headers["ETag"].strip('"'))
            staged = r.headers[_STAGED] == "true"
        except (KeyError, ValueError) as e:
            raise UnavailableError(
                f"the server answered garbage: headers {r.headers!r:.200}"
            ) from e
        return r.body, Stat(k, len(r.body), identity, staged)

    async def get(self, key: str | bytes) -> bytes:
        """The value of ``key`` (one request); NotFoundError when absent or deleted."""
        return (await self.lookup(key))[0]

    async def exists(self, key: str | bytes) -> bool:
        """Whether ``key`` holds a value (one request); RefNotFoundError for a missing ref."""
        try:
            await self.stat(key)
        except RefNotFoundError:
            raise
        except NotFoundError:
            return False
        return True

    async def stat(self, key: str | bytes) -> Stat:
        """Size, identity and whether the newest record is staged (one request); NotFoundError."""
        k = check_key(key, self._max_key)
        r = await self.repository.http.request(
            "GET", await self._kv_path() + "/stat",
            params={"key": key_param(k), "encoding": "base64"}, what=validate.preview(k),
        )  # fmt: skip
        return _stat(r.json())

    async def list(
        self,
        prefix: str | bytes = b"",
        *,
        after: str | bytes | None = None,
        limit: int | None = None,
        delimiter: str | bytes | None = None,
    ) -> AsyncIterator[Entry]:
        """Entries in key order, as the embedded ``list`` (paged requests; keys travel as
        base64url, so any bytes work)."""
        p = encode_opt(prefix, "prefix") or b""
        a = encode_opt(after, "after")
        d = encode_opt(delimiter, "delimiter")
        validate.check_optional_int(limit, "list limit", min_value=0)
        if d is not None and not d:
            raise InvalidInputError("list delimiter must be non-empty")
        params = {
            "prefix": key_param(p) if p else None,
            "after": key_param(a) if a else None,
            "delimiter": key_param(d) if d else None,
            "encoding": "base64",
        }
        path = await self._kv_path() + "/ls"
        pages = self.repository.store._pages(path, params, limit, kind="ref")
        async for item in pages:
            yield _entry(item)

    def _object_path(self, path: object) -> str:
        """``path`` checked as the embedded object calls check it (InvalidNameError)."""
        check_path(path, self._max_key)
        return cast(str, path)

    async def stat_object(self, path: str) -> ObjectStats:
        """The object at ``path`` (one request); ObjectNotFoundError, InvalidNameError."""
        r = await self.repository.http.request(
            "GET",
            await self._obj_path() + "/stat",
            params={"path": self._object_path(path)},
            kind="object",
            what=path,
        )
        return _stats(r.json())

    async def open(self, path: str) -> RemoteObjectReader:
        """A reader of the object (one request for its stats; ranged requests to read).  It
        reads the path at this ref, not the data it opened (docs/decisions.md)."""
        stats = await self.stat_object(path)
        return RemoteObjectReader(self.repository, await self._at(), stats)

    async def list_objects(
        self,
        prefix: str = "",
        delimiter: str = "",
        after: str | None = None,
        amount: int | None = None,
    ) -> AsyncIterator[ObjectStats]:
        """Objects under ``prefix`` in path order, as the embedded ``list_objects``
        (paged requests)."""
        check_listing(prefix, delimiter, after, amount)
        params = {"prefix": prefix or None, "delimiter": delimiter or None, "after": after}
        async for d in self.repository.store._pages(
            await self._obj_path() + "/ls", params, amount, kind="ref"
        ):
            yield _stats(d)

    def _where(self) -> str:
        return f"{self.repository.name}/{self._ref}"


class RemoteRef(_RemoteReads):
    """A read-only view of a branch, tag or commit on the server, as the embedded
    ``Ref``: a bare branch name stays live (each read sees the branch as of that read);
    a tag, commit ID or expression with modifiers is resolved once, on the first read
    (one request), and then read as that commit."""

    def __init__(self, repository: RemoteRepository, expression: str) -> None:
        self.repository = repository
        self.expression = expression
        self._ref = expression
        self._id: str | None = None
        self._resolved = False
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"RemoteRef({self.repository.name!r}, {self.expression!r})"

    async def _at(self) -> str:
        if not self._resolved:
            async with self._lock:
                if not self._resolved:
                    await self._resolve()
        return self._ref

    async def _resolve(self) -> None:
        expr = self.expression
        repo = self.repository
        if "~" not in expr and "^" not in expr:
            try:
                await repo.http.request(
                    "GET", f"{repo._base}/branches/{seg(expr)}", kind="ref"
                )  # fmt: skip
                self._resolved = True  # a branch: stays live
                return
            except (NotFoundError, InvalidInputError):
                pass  # a tag or a commit (or nothing: resolve_commit says so)
        self._id, _ = await repo.resolve_commit(expr)
        self._ref = self._id
        self._resolved = True

    async def commit(self) -> Commit:
        """The commit this view names: for a tag, commit ID or expression with
        modifiers the resolved commit; for a bare branch name its current base."""
        return (await self.repository.resolve_commit(await self._at()))[1]

    @property
    def id(self) -> str | None:
        """The commit this view reads, once resolved (a first read); None before, and
        for a live branch."""
        return self._id


class RemoteBranch(_RemoteReads):
    """Reads and writes of one branch on the server; writes are coalesced."""

    def __init__(self, repository: RemoteRepository, name: str) -> None:
        self.repository = repository
        self.name = name
        self._ref = name
        self._b = f"{repository._base}/branches/{seg(name)}"
        self._lsm = f"/lsm/repositories/{seg(repository.name)}/branches/{seg(name)}"

    def __repr__(self) -> str:
        return f"RemoteBranch({self.repository.name!r}, {self.name!r})"

    def _batcher(self) -> Batcher:
        return self.repository.store.batcher(self.repository.name, self.name)

    # --- coalesced writes --------------------------------------------------------------

    @staticmethod
    def _kv(
        key: object, value: object, identity: object, max_key: int, max_value: int
    ) -> tuple[list[Any], bytes, int]:
        """The ``kv`` entry of a put, checked as the embedded put checks it (the identity
        is sent only when given: the server's encoder derives the default, as the
        embedded writer's does); its key and size."""
        rec = make_record(key, value, identity, max_key, max_value, defer_identity=True)
        k, ident, v = rec[0], rec[1], cast(bytes, rec[2])
        entry = ["kv", k, v] if identity is None else ["kv", k, v, ident]
        return entry, k, len(k) + len(v) + _ENTRY_BYTES

    async def put(self, key: str | bytes, value: bytes, *, identity: bytes | None = None) -> None:
        """As the embedded ``put``: a ``kv`` entry of the batch endpoint, coalesced with this
        client's other writes to the branch; returns once the server acknowledged it."""
        cfg = self.repository.store.config
        entry, k, n = self._kv(key, value, identity, cfg.max_key_bytes, cfg.max_value_bytes)
        await self._batcher().submit([entry], [k], n)

    async def put_many(self, items: Any) -> None:
        """As the embedded ``put_many``: ``kv`` entries sent together; one bad item sends none."""
        cfg = self.repository.store.config
        max_key, max_value = cfg.max_key_bytes, cfg.max_value_bytes
        entries: list[Any] = []
        keys: list[bytes] = []
        n = 0
        for key, value, identity in validate.put_items(items):
            entry, k, size = self._kv(key, value, identity, max_key, max_value)
            entries.append(entry)
            keys.append(k)
            n += size
        if entries:
            await self._batcher().submit(entries, keys, n)

    async def delete(self, key: str | bytes) -> None:
        """As the embedded ``delete``: a coalesced ``kvdelete`` entry."""
        k = check_key(key, self._max_key)
        await self._batcher().submit([["kvdelete", k]], [k], len(k) + _ENTRY_BYTES)

    async def delete_many(self, keys: Iterable[str | bytes]) -> None:
        """As the embedded ``delete_many``: ``kvdelete`` entries sent together."""
        max_key = self._max_key
        ks = [check_key(k, max_key) for k in validate.check_items(keys, "delete_many keys")]
        if ks:
            await self._batcher().submit(
                [["kvdelete", k] for k in ks], ks, sum(map(len, ks)) + _ENTRY_BYTES * len(ks)
            )

    async def link(
        self,
        path: str,
        physical_address: str,
        *,
        size: int,
        checksum: str,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        mtime: int | None = None,
        if_absent: bool = False,
        verify: bool = False,
    ) -> ObjectStats:
        """As the embedded ``link``, in one request (lakeFS's ``linkPhysicalAddress``):
        with ``if_absent`` the server checks and stages as one step
        (``If-None-Match: *``; ObjectExistsError when the path holds an object).
        ``verify`` asks the server to check the data (a ``verify`` query parameter,
        lsmstore's own: lakeFS's call has none)."""
        p = self._object_path(path)
        check_address(physical_address)
        body: dict[str, Any] = {
            "staging": {"physical_address": physical_address},
            "checksum": check_checksum(checksum),
            "size_bytes": check_size(size),
            "user_metadata": dict(check_metadata(metadata)),
        }
        if content_type is not None:
            body["content_type"] = check_content_type(content_type)
        if mtime is not None:
            body["mtime"] = check_mtime(mtime)
        headers = {"If-None-Match": "*"} if validate.check_bool(if_absent, "if_absent") else None
        await self.flush()  # after this client's coalesced writes, in call order
        params: dict[str, Any] = {"path": p}
        if validate.check_bool(verify, "verify"):
            params["verify"] = True
        r = await self.repository.http.request(
            "PUT", self._b + "/staging/backing", params=params, json_body=body,
            headers=headers, ok=(200,), kind="object", what=p,
        )  # fmt: skip
        return _stats(r.json())

    async def link_many(self, links: Iterable[LinkItem]) -> None:
        """As the embedded ``link_many``: ``link`` entries of the batch endpoint (coalesced);
        the fields checkable without the namespace are checked here, the rest by the server."""
        entries, paths = [], []
        for item in validate.check_items(links, LINKS):
            # the fields the server checks without the namespace are checked here too:
            # a bad link fails its own call, never the others coalesced with it
            link = as_link(item)
            p = self._object_path(link.path)
            check_address(link.physical_address)
            check_size(link.size)
            check_checksum(link.checksum)
            check_content_type(link.content_type)
            md = check_metadata(link.metadata)
            if link.mtime is not None:
                check_mtime(link.mtime)
            entries.append(
                ["link", p, link.physical_address, link.size, link.checksum, link.content_type,
                 md or None, link.mtime]
            )  # fmt: skip
            paths.append(p.encode())
        if entries:
            await self._batcher().submit(entries, paths, sum(len(p) + 100 for p in paths))

    async def flush(self) -> None:
        """Wait until every write this client coalesced for the branch has its answer."""
        b = self.repository.store._batchers.get((self.repository.name, self.name))
        if b is not None:
            await b.flush()

    # --- direct requests ---------------------------------------------------------------

    async def upload(
        self,
        path: str,
        data: Any,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        if_absent: bool = False,
    ) -> ObjectStats:
        """As the embedded ``upload``, in one request (lakeFS's ``uploadObject``; with
        ``if_absent``, ``If-None-Match: *``).  The arguments are checked as the embedded
        call checks them, before anything is sent; an error raised by the data source
        while it is sent is raised as itself (the server stages nothing)."""
        path = self._object_path(path)
        headers = {"Content-Type": check_content_type(content_type)}
        for k, v in check_metadata(metadata).items():
            headers[f"x-lakefs-meta-{k}"] = v
        if validate.check_bool(if_absent, "if_absent"):
            headers["If-None-Match"] = "*"
        source = Source(data)
        failed: list[BaseException] = []

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in source:
                    yield chunk
            except BaseException as e:
                failed.append(e)
                raise

        small = source.small()
        try:
            r = await self.repository.http.request(
                "POST", self._b + "/objects", params={"path": path},
                data=small if small is not None else body(), headers=headers, ok=(201,),
                kind="upload", what=path,
            )  # fmt: skip
        except UnavailableError:
            if failed:
                raise failed[0] from None
            raise
        return _stats(r.json())

    async def delete_object(self, path: str) -> None:
        """One request; ObjectNotFoundError when there is no object at ``path``."""
        await self.repository.http.request(
            "DELETE", self._b + "/objects", params={"path": self._object_path(path)}, ok=(204,),
            kind="object",
            what=path,
        )  # fmt: skip

    async def delete_objects(self, paths: Iterable[str]) -> None:
        """Delete many objects (a request per 1,000 paths); absent paths are ignored."""
        batch = list(validate.check_items(paths, "delete_objects paths"))
        for i in range(0, len(batch), 1000):
            await self.repository.http.request(
                "POST", self._b + "/objects/delete", json_body={"paths": batch[i : i + 1000]},
                ok=(200,), kind="ref",
            )  # fmt: skip

    async def copy_object(
        self, src_path: str, dst_path: str, *, src_ref: str | None = None
    ) -> ObjectStats:
        """One request (lakeFS ``copyObject``): ``dst_path`` gets the data of ``src_path``
        (read on ``src_ref``, default this branch).  ObjectNotFoundError."""
        self._object_path(src_path)
        r = await self.repository.http.request(
            "POST", self._b + "/objects/copy", params={"dest_path": self._object_path(dst_path)},
            json_body={"src_path": src_path, "src_ref": src_ref or self.name},
            ok=(201,), kind="object", what=src_path,
        )  # fmt: skip
        return _stats(r.json())

    async def commit(
        self,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        committer: str | None = None,
        allow_empty: bool = False,
    ) -> Commit:
        """One request (lakeFS ``commit``); the server flushes its writes to the branch
        first.  NothingToCommitError unless ``allow_empty``."""
        validate.check_str(message, "commit message", empty_ok=True)
        metadata = validate.check_metadata(metadata, "commit metadata")
        body: dict[str, Any] = {
            "message": message,
            "metadata": dict(metadata or {}),
            "allow_empty": validate.check_bool(allow_empty, "allow_empty"),
        }
        if validate.check_committer(committer) is not None:
            body["committer"] = committer
        r = await self.repository.http.request(
            "POST", self._b + "/commits", json_body=body, ok=(201,), kind="ref"
        )  # fmt: skip
        return _commit(r.json())

    async def cherry_pick(
        self,
        ref: str,
        *,
        parent_number: int = 1,
        strategy: Any = None,
        message: str | None = None,
        committer: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Commit:
        """As the embedded ``cherry_pick``: one request (lakeFS ``cherryPick``)."""
        refexpr.parse(ref)
        validate.check_int(parent_number, "cherry-pick parent", min_value=1, max_value=2)
        fields = _commit_fields(message, None, None, strategy)
        overrides: dict[str, Any] = {}
        if "message" in fields:
            overrides["message"] = fields.pop("message")
        if metadata is not None:
            overrides["metadata"] = validate.check_metadata(metadata, "commit metadata")
        body: dict[str, Any] = {"ref": ref, "parent_number": parent_number, **fields}
        if overrides:
            body["commit_overrides"] = overrides
        if validate.check_committer(committer) is not None:
            body["committer"] = committer
        r = await self.repository.http.request(
            "POST", self._b + "/cherry-pick", json_body=body, ok=(201,), kind="merge"
        )  # fmt: skip
        return _commit(r.json())

    async def import_start(
        self,
        paths: Sequence[ImportPath],
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        committer: str | None = None,
    ) -> str:
        """As the embedded ``import_start``: one request (lakeFS ``importStart``); the
        import runs in the server's background."""
        checked = check_import_paths(paths)
        validate.check_str(message, "commit message", empty_ok=True)
        commit: dict[str, Any] = {"message": message}
        if metadata is not None:
            commit["metadata"] = validate.check_metadata(metadata, "commit metadata")
        if validate.check_committer(committer) is not None:
            commit["committer"] = committer
        body = {
            "paths": [
                {"path": p.path, "destination": p.destination, "type": p.type} for p in checked
            ],
            "commit": commit,
        }
        r = await self.repository.http.request(
            "POST", self._b + "/import", json_body=body, ok=(202,), kind="ref"
        )
        d = r.json()
        if not isinstance(d, dict) or not isinstance(d.get("id"), str):
            raise UnavailableError(f"the server answered garbage: not an import: {d!r:.200}")
        return str(d["id"])

    async def import_status(self, import_id: str) -> ImportStatus:
        """As the embedded ``import_status``: one request (lakeFS ``importStatus``)."""
        validate.check_str(import_id, "import id")
        r = await self.repository.http.request(
            "GET", self._b + "/import", params={"id": import_id}, kind="import"
        )
        return _import_status(import_id, r.json())

    async def import_cancel(self, import_id: str) -> None:
        """As the embedded ``import_cancel``: one request (lakeFS ``importCancel``)."""
        validate.check_str(import_id, "import id")
        await self.repository.http.request(
            "DELETE", self._b + "/import", params={"id": import_id}, ok=(204,), kind="import"
        )

    async def diff_uncommitted(self) -> list[Change]:
        """The branch's staged changes (paged requests; a Change carries no records)."""
        return [
            Change(d["path"].encode(), d["type"], None, None)
            async for d in self.repository.store._pages(self._b + "/diff", {}, None, kind="ref")
        ]

    async def head(self) -> RefValue:
        """The branch's ref value: base commit, L2 and L1 file ids (one request)."""
        r = await self.repository.http.request("GET", self._lsm + "/staging", kind="ref")
        return _ref_value(r.json())

    async def stash(self, name: str) -> Workspace:
        """As the embedded ``stash``; this client's coalesced writes are sent first.  A
        lost answer (UnavailableError with ``outcome_unknown``) is resolved by reading
        the workspace back with ``repository.get_workspace(name)``."""
        check_ref_name(name, "workspace")
        await self.flush()
        r = await self.repository.http.request(
            "POST", self._lsm + "/stash", json_body={"name": name}, ok=(201,),
            kind="workspace", what=name,
        )  # fmt: skip
        return _workspace(r.json())

    async def pop(self, name: str) -> RefValue:
        """As the embedded ``pop`` (one request); this client's coalesced writes are sent
        first.  WorkspaceNotFoundError."""
        check_ref_name(name, "workspace")
        await self.flush()
        r = await self.repository.http.request(
            "POST", self._lsm + "/pop", json_body={"name": name}, kind="workspace", what=name
        )
        return _ref_value(r.json())

    async def reset(self) -> RefValue:
        """As the embedded ``reset`` (one request); this client's coalesced writes are
        sent first.  Returns the branch's ref value after the reset."""
        await self.flush()
        r = await self.repository.http.request("POST", self._lsm + "/reset", kind="ref")
        return _ref_value(r.json())

    async def stage_sst(self, sst: str | os.PathLike[str] | bytes) -> str:
        """As the embedded ``stage_sst``: one request with the SST's bytes; the L1 file id."""
        data = await validate.sst_argument(sst)
        r = await self.repository.http.request(
            "POST", self._lsm + "/sst", data=data,
            headers={"Content-Type": "application/octet-stream"}, ok=(201,), kind="ref",
        )  # fmt: skip
        return str(r.json()["file_id"])


def _body(data: Any) -> Any:
    """An upload body aiohttp can send: bytes, a file, or chunks."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str | os.PathLike):
        return _file_chunks(Path(data))
    if isinstance(data, AsyncIterable):
        return data
    if hasattr(data, "read"):
        return _reader_chunks(data)
    raise InvalidInputError(f"cannot upload {type(data).__name__}: bytes, a path, a file or chunks")


async def _file_chunks(path: Path) -> AsyncIterator[bytes]:
    try:
        f = await asyncio.to_thread(path.open, "rb")
    except OSError as e:
        raise InvalidInputError(f"cannot read {path}: {e}") from e
    async for chunk in _reader_chunks(f):
        yield chunk
    f.close()


async def _reader_chunks(f: Any) -> AsyncIterator[bytes]:
    while True:
        chunk = await asyncio.to_thread(f.read, _CHUNK)
        if not chunk:
            return
        yield chunk


class RemoteObjectReader(AsyncCloseable):
    """Ranged reads of one object through the server (``Range`` requests).  Each read
    names the path at the reader's ref with ``If-Match`` of the ETag it opened: once
    the path holds other data (an overwrite on a branch), a read raises
    PreconditionFailedError rather than return bytes of another object (the lakeFS API
    reads by path, not by data object)."""

    def _headers(self, offset: int, end: int) -> dict[str, str]:
        headers = {"Range": f"bytes={offset}-{end - 1}"}
        if self.stats.checksum:
            headers["If-Match"] = f'"{self.stats.checksum}"'
        return headers

    def __init__(self, repository: RemoteRepository, ref: str, stats: ObjectStats) -> None:
        self.repository = repository
        self.stats = stats
        self.path = stats.path
        self.size = stats.size
        self._url = f"{repository._base}/refs/{seg(ref)}/objects"
        self._closed = False

    def _span(self, offset: int, length: int | None) -> tuple[int, int]:
        if self._closed:
            raise ClosedError(f"reader of {self.path!r} is closed")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"read offset must be an int >= 0, not {offset!r}")
        if length is not None and (
            isinstance(length, bool) or not isinstance(length, int) or length < 0
        ):
            raise InvalidInputError(f"read length must be None or an int >= 0, not {length!r}")
        end = self.size if length is None else min(self.size, offset + length)
        return offset, max(offset, end)

    async def read(self, offset: int = 0, length: int | None = None) -> bytes:
        """Bytes ``[offset, offset + length)`` (to the end without ``length``), fewer
        past the end of the object, empty at or past it: one ranged request."""
        offset, end = self._span(offset, length)
        if end <= offset:
            return b""
        r = await self.repository.http.request(
            "GET", self._url, params={"path": self.path},
            headers=self._headers(offset, end), ok=(200, 206), kind="object", what=self.path,
        )  # fmt: skip
        if r.status == 200:
            return r.body[offset:end]
        return r.body

    async def iter_chunks(
        self, offset: int = 0, length: int | None = None, *, chunk_size: int = _CHUNK
    ) -> AsyncIterator[bytes]:
        """Stream bytes ``[offset, offset + length)`` in chunks of at most ``chunk_size``
        (one ranged request each)."""
        pos, end = self._span(offset, length)
        validate.check_int(chunk_size, "chunk_size", min_value=1)
        while pos < end:
            data = await self.read(pos, min(chunk_size, end - pos))
            if not data:
                return
            pos += len(data)
            yield data

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.iter_chunks()

    async def aclose(self) -> None:
        """Close the reader (it holds no connection between reads)."""
        self._closed = True
