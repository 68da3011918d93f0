"""JSON schemas of lakeFS's models (swagger ``components.schemas``) as the OpenAPI
document and the route table share them.  ``ref(name)`` points into components."""

from __future__ import annotations

from typing import Any

STR: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer", "format": "int64"}
BOOL: dict[str, Any] = {"type": "boolean"}
TIME: dict[str, Any] = {"type": "string", "format": "date-time"}
STR_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    props = {**required, **(optional or {})}
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


def listing(item: str) -> dict[str, Any]:
    return obj({"pagination": ref("Pagination"), "results": {"type": "array", "items": ref(item)}})


COMPONENTS: dict[str, dict[str, Any]] = {
    "Error": obj({"message": STR}),
    "Pagination": obj(
        {
            "has_more": BOOL,
            "next_offset": STR,
            "results": {"type": "integer", "minimum": 0},
            "max_per_page": {"type": "integer", "minimum": 0},
        }
    ),
    "Repository": obj(
        {"id": STR, "creation_date": INT, "default_branch": STR, "storage_namespace": STR},
        {"storage_id": STR, "read_only": BOOL},
    ),
    "RepositoryList": listing("Repository"),
    "RepositoryCreation": obj(
        {"name": STR, "storage_namespace": STR},
        {"default_branch": STR, "sample_data": BOOL, "read_only": BOOL, "storage_id": STR},
    ),
    "RepositoryMetadata": STR_MAP,
    "Ref": obj({"id": STR, "commit_id": STR}),
    "RefList": listing("Ref"),
    "BranchCreation": obj({"name": STR, "source": STR}, {"force": BOOL, "hidden": BOOL}),
    "TagCreation": obj({"id": STR, "ref": STR}, {"force": BOOL}),
    "Commit": obj(
        {
            "id": STR,
            "parents": {"type": "array", "items": STR},
            "committer": STR,
            "message": STR,
            "creation_date": INT,
            "meta_range_id": STR,
        },
        {"metadata": STR_MAP, "generation": INT, "version": {"type": "integer"}},
    ),
    "CommitList": listing("Commit"),
    # ``committer`` (and RevertCreation's and CherryPickCreation's ``strategy``) are our
    # extensions
    # (docs/server.md, "Committer").
    "CommitCreation": obj(
        {"message": STR},
        {"metadata": STR_MAP, "date": INT, "allow_empty": BOOL, "force": BOOL, "committer": STR},
    ),
    "ResetCreation": obj(
        {"type": {"type": "string", "enum": ["object", "common_prefix", "reset"]}},
        {"path": STR, "force": BOOL},
    ),
    "BranchProtectionRule": obj({"pattern": STR}, {}),
    "ImportLocation": obj(
        {
            "type": {"type": "string", "enum": ["common_prefix", "object"]},
            "path": STR,
            "destination": STR,
        }
    ),
    "ImportCreation": obj(
        {
            "paths": {"type": "array", "items": ref("ImportLocation")},
            "commit": ref("CommitCreation"),
        },
        {"force": BOOL},
    ),
    "ImportCreationResponse": obj({"id": STR}),
    "ImportStatus": obj(
        {"completed": BOOL, "update_time": {"type": "string", "format": "date-time"}},
        {
            "ingested_objects": INT,
            "metarange_id": STR,
            "commit": ref("Commit"),
            "error": ref("Error"),
        },
    ),
    "ActionRun": obj(
        {
            "run_id": STR,
            "branch": STR,
            "start_time": TIME,
            "commit_id": STR,
            "event_type": STR,
            "status": {"type": "string", "enum": ["failed", "completed"]},
        },
        {"end_time": TIME},
    ),
    "ActionRunList": listing("ActionRun"),
    "HookRun": obj(
        {
            "hook_run_id": STR,
            "action": STR,
            "hook_id": STR,
            "start_time": TIME,
            "status": {"type": "string", "enum": ["failed", "completed"]},
        },
        {"end_time": TIME},
    ),
    "HookRunList": listing("HookRun"),
    "RevertCreation": obj(
        {"ref": STR, "parent_number": {"type": "integer"}},
        {
            "force": BOOL,
            "allow_empty": BOOL,
            "commit_overrides": obj({}, {"message": STR, "metadata": STR_MAP}),
            "committer": STR,
            "strategy": STR,
        },
    ),
    "CherryPickCreation": obj(
        {"ref": STR},
        {
            "parent_number": {"type": "integer"},
            "force": BOOL,
            "commit_overrides": obj({}, {"message": STR, "metadata": STR_MAP}),
            "committer": STR,
            "strategy": STR,
        },
    ),
    "Merge": obj(
        {},
        {
            "message": STR,
            "metadata": STR_MAP,
            "strategy": STR,
            "force": BOOL,
            "allow_empty": BOOL,
            "squash_merge": BOOL,
            "committer": STR,
        },
    ),
    "MergeResult": obj(
        {"reference": STR},
        {
            "merged": BOOL,
            "commit": ref("Commit"),
            "source": STR,
            "destination": STR,
            "merge_base": STR,
        },
    ),
    "FindMergeBaseResult": obj(
        {"source_commit_id": STR, "destination_commit_id": STR, "base_commit_id": STR}
    ),
    "Diff": obj(
        {
            "type": {
                "type": "string",
                "enum": ["added", "removed", "changed", "conflict", "prefix_changed"],
            },
            "path": STR,
            "path_type": {"type": "string", "enum": ["common_prefix", "object"]},
        },
        {"size_bytes": INT},
    ),
    "DiffList": listing("Diff"),
    "ObjectStats": obj(
        {
            "path": STR,
            "path_type": {"type": "string", "enum": ["common_prefix", "object"]},
            "physical_address": STR,
            "checksum": STR,
            "mtime": INT,
        },
        {"size_bytes": INT, "metadata": STR_MAP, "content_type": STR},
    ),
    "ObjectStatsList": listing("ObjectStats"),
    "StagingLocation": obj(
        {}, {"physical_address": STR, "presigned_url": STR, "presigned_url_expiry": INT}
    ),
    "StagingMetadata": obj(
        {"staging": ref("StagingLocation"), "checksum": STR, "size_bytes": INT},
        {"user_metadata": STR_MAP, "content_type": STR, "mtime": INT, "force": BOOL},
    ),
    "ObjectCopyCreation": obj({"src_path": STR}, {"src_ref": STR, "force": BOOL, "shallow": BOOL}),
    "PathList": obj({"paths": {"type": "array", "items": STR}}),
    "ObjectErrorList": obj(
        {
            "errors": {
                "type": "array",
                "items": obj({"status_code": {"type": "integer"}, "message": STR}, {"path": STR}),
            }
        }
    ),
    "VersionConfig": obj(
        {},
        {
            "version": STR,
            "version_context": STR,
            "latest_version": STR,
            "upgrade_recommended": BOOL,
            "upgrade_url": STR,
        },
    ),
    "StorageConfig": obj(
        {
            "blockstore_type": STR,
            "blockstore_namespace_example": STR,
            "blockstore_namespace_ValidityRegex": STR,
            "pre_sign_support": BOOL,
            "pre_sign_support_ui": BOOL,
            "import_support": BOOL,
            "import_validity_regex": STR,
        },
        {
            "default_namespace_prefix": STR,
            "pre_sign_multipart_upload": BOOL,
            "blockstore_id": STR,
            "blockstore_description": STR,
        },
    ),
    "Config": obj(
        {},
        {
            "version_config": ref("VersionConfig"),
            "storage_config": ref("StorageConfig"),
            "storage_config_list": {"type": "array", "items": ref("StorageConfig")},
            "ui_config": {"type": "object"},
            "capabilities_config": {"type": "object"},
        },
    ),
    "StatsEventsList": obj(
        {
            "events": {
                "type": "array",
                "items": obj({"class": STR, "name": STR, "count": {"type": "integer"}}),
            }
        }
    ),
    "LoginInformation": obj({"access_key_id": STR, "secret_access_key": STR}),
    "AuthenticationToken": obj({"token": STR}, {"token_expiration": INT}),
    "User": obj({"id": STR, "creation_date": INT}, {"friendly_name": STR, "email": STR}),
    "UserList": listing("User"),
    # --- extensions ------------------------------------------------------------------
    "StagingState": obj(
        {
            "branch": STR,
            "commit_id": STR,
            "l1_files": {"type": "integer"},
            "l2_files": {"type": "integer"},
            "l1": {"type": "array", "items": STR},
            "l2": {"type": "array", "items": STR},
        },
        {"last_commit_date": INT, "last_commit_id": STR},
    ),
    "BatchResult": obj({"entries": {"type": "integer"}}),
    "StagedSST": obj({"file_id": STR}),
    "Workspace": obj(
        {
            "name": STR,
            "branch": STR,
            "base": STR,
            "l1": {"type": "array", "items": STR},
            "l2": {"type": "array", "items": STR},
            "created_at": {"type": "number"},
        }
    ),
    "WorkspaceList": listing("Workspace"),
    "WorkspaceName": obj({"name": STR}),
    "KvStat": obj({"key": STR, "size_bytes": INT, "identity": STR, "staged": BOOL}),
    "KvEntry": obj({"key": STR, "size_bytes": INT, "identity": STR, "common_prefix": BOOL}),
    "KvEntryList": listing("KvEntry"),
}
