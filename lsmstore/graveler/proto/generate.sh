#!/usr/bin/env bash
# Regenerate the protobuf modules of this directory from their .proto files.
# Needs grpcio-tools (protoc) and mypy-protobuf (typed stubs) in a scratch venv, e.g.
#   python3 -m venv /tmp/protoc && /tmp/protoc/bin/pip install grpcio-tools==1.85.1 mypy-protobuf==5.1.0
#   PROTOC_PY=/tmp/protoc/bin/python lsmstore/graveler/proto/generate.sh
# The generated code must not need a newer protobuf runtime than pyproject.toml pins.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PROTOC_PY:-python3}
"$PY" -m grpc_tools.protoc -I . \
  --python_out=. --mypy_out=. \
  --plugin=protoc-gen-mypy="$(dirname "$PY")/protoc-gen-mypy" \
  lsmstore/graveler/proto/*.proto
