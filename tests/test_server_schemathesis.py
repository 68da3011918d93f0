"""schemathesis against the served OpenAPI document: generated requests (valid and
invalid) to every operation, on a repository, branch, tag and object that exist, give
no server error (5xx), and every response has a documented status, content type and a
body that conforms to its schema.  A bounded number of examples per operation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from lsmstore.testing.server_process import ServerProcess

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "8"))


@pytest.mark.timeout(1500)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    server: ServerProcess, admin: httpx.Client, tmp_path: Path
) -> None:
    repo = "schemathesis"
    assert admin.post("/repositories", json={"name": repo,
                      "storage_namespace": f"local://{repo}"}).status_code == 201  # fmt: skip
    assert (
        admin.post(f"/repositories/{repo}/tags", json={"id": "v1", "ref": "main"}).status_code
        == 201
    )
    up = admin.post(f"/repositories/{repo}/branches/main/objects", params={"path": "obj"},
                    content=b"data")  # fmt: skip
    assert up.status_code == 201
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        "[parameters]\n"
        f'"path.repository" = "{repo}"\n'
        '"path.branch" = "main"\n'
        '"path.ref" = "main"\n'
        '"path.leftRef" = "main"\n'
        '"path.rightRef" = "v1"\n'
        '"path.sourceRef" = "v1"\n'
        '"path.destinationBranch" = "main"\n'
        '"path.commitId" = "main"\n'
        '"path.tag" = "v1"\n'
    )
    key, secret = server.admin
    cmd = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
        f"{server.api}/openapi.json", "--auth", f"{key}:{secret}",
        "--checks", "not_a_server_error,response_schema_conformance,"
                    "status_code_conformance,content_type_conformance",
        "--max-examples", str(EXAMPLES), "--workers", "1", "--seed", "20261124",
        "--phases", "examples,coverage,fuzzing", "--suppress-health-check", "all",
        "--exclude-operation-id", "deleteRepository",
        "--request-timeout", "60",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=1800)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
