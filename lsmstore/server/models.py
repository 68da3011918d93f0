"""lakeFS JSON shapes (docs/server.md, "The lakeFS API subset"), every required field always present
with its JSON type: the SDK's pydantic models reject null or missing fields."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lsmstore.client import Repository
from lsmstore.config import Config
from lsmstore.errors import LsmError
from lsmstore.objects.entry import decode_entry
from lsmstore.refstore.base import Ref
from lsmstore.types import ActionRun, Change, Commit, HookRun, MergeResult

#: What ``version_config.version`` says: numeric (lakefs-spec parses it), >= 1.3.1.
LAKEFS_VERSION = "1.70.0"


def repository(repo: Repository) -> dict[str, Any]:
    return {
        "id": repo.name,
        "creation_date": int(repo.info.created_at),
        "default_branch": repo.default_branch,
        "storage_namespace": repo.storage_namespace,
        "storage_id": "",
        "read_only": False,
    }


def ref(name: str, commit_id: str) -> dict[str, Any]:
    return {"id": name, "commit_id": commit_id}


def commit(commit_id: str, c: Commit) -> dict[str, Any]:
    return {
        "id": commit_id,
        "parents": list(c.parents),
        "committer": c.committer,
        "message": c.message,
        "creation_date": c.created_at,
        "meta_range_id": c.metarange_id,
        "metadata": dict(c.metadata),
        "generation": c.generation,
        "version": 1,
    }


def merge_result(r: MergeResult) -> dict[str, Any]:
    """lakeFS's ``MergeResult`` (``reference``: the commit the destination is now at)
    with the fields of the merge or revert that made it: whether a commit was written,
    that commit (when one was), and the three commits of the three-way merge
    (``merge_base`` left out when the histories share none)."""
    out: dict[str, Any] = {
        "reference": r.commit_id,
        "merged": r.merged,
        "source": r.source,
        "destination": r.destination,
    }
    if r.commit is not None:
        out["commit"] = commit(r.commit_id, r.commit)
    if r.merge_base is not None:
        out["merge_base"] = r.merge_base
    return out


def staging_state(branch: str, value: Ref, commit: Commit | None = None) -> dict[str, Any]:
    """The ``StagingState`` of a branch's ref value; with the base ``commit``, also
    ``last_commit_id``/``last_commit_date``."""
    out: dict[str, Any] = {
        "branch": branch,
        "commit_id": value.base,
        "l1_files": len(value.l1),
        "l2_files": len(value.l2),
        "l1": list(value.l1),
        "l2": list(value.l2),
    }
    if commit is not None or not value.base:
        out["last_commit_id"] = value.base
        out["last_commit_date"] = commit.created_at if commit is not None else 0
    return out


_DIFF_TYPE = {"added": "added", "removed": "removed", "changed": "changed"}


def diff(change: Change) -> dict[str, Any]:
    path = change.key.decode("utf-8", "surrogateescape")
    out: dict[str, Any] = {"type": _DIFF_TYPE[change.kind], "path": path, "path_type": "object"}
    rec = change.right if change.right is not None else change.left
    if rec is not None and rec.value:
        try:
            out["size_bytes"] = decode_entry(rec.value, path).size
        except LsmError:  # a raw value written with put(), not an object entry
            out["size_bytes"] = len(rec.value)
    return out


def diff_prefix(path: str) -> dict[str, Any]:
    return {"type": "prefix_changed", "path": path, "path_type": "common_prefix"}


def config(settings: Config) -> dict[str, Any]:
    return {
        "version_config": {
            "version": LAKEFS_VERSION,
            "version_context": "lakeFS",
            "latest_version": LAKEFS_VERSION,
            "upgrade_recommended": False,
            "upgrade_url": "",
        },
        "storage_config": storage_config(settings),
        "storage_config_list": [],
        "capabilities_config": {},
        "ui_config": {},
    }


def storage_config(settings: Config) -> dict[str, Any]:
    """What the API accepts as a storage namespace (repositories.check_api_namespace):
    ``local://`` (the default kind: a directory of the server) and ``s3://``, ``mem://``
    only when the server allows it; pre-signing is advertised when the operator says
    every repository is on S3 (``server_presign_advertise``)."""
    schemes = "local|s3|mem" if settings.server_mem_namespaces == "on" else "local|s3"
    presign = settings.server_presign_advertise == "on"
    return {
        "blockstore_type": "local",
        "blockstore_namespace_example": "local://my-repository",
        "blockstore_namespace_ValidityRegex": f"^({schemes})://",
        "default_namespace_prefix": "",
        "pre_sign_support": presign,
        "pre_sign_support_ui": False,
        "import_support": True,
        "import_validity_regex": f"^({schemes}|file)://",
        "pre_sign_multipart_upload": False,
        "blockstore_id": "",
        "blockstore_description": "",
    }


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(r: ActionRun) -> dict[str, Any]:
    """lakeFS's ``ActionRun``."""
    out = {
        "run_id": r.run_id, "branch": r.branch, "start_time": _time(r.start_time),
        "event_type": r.event_type, "status": r.status, "commit_id": r.commit_id,
    }  # fmt: skip
    if r.end_time:
        out["end_time"] = _time(r.end_time)
    return out


def hook_run(h: HookRun) -> dict[str, Any]:
    """lakeFS's ``HookRun``."""
    out = {
        "hook_run_id": h.hook_run_id, "action": h.action, "hook_id": h.hook_id,
        "start_time": _time(h.start_time), "status": h.status,
    }  # fmt: skip
    if h.end_time:
        out["end_time"] = _time(h.end_time)
    return out
