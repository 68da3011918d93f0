#!/usr/bin/env bash
# The project's two entry points, each usable on a fresh machine:
#   ./dev.sh run    set up, then run the demo workload on the embedded default
#   ./dev.sh test   set up (incl. Debian packages the tests need), then ruff, mypy, pytest
#   ./dev.sh bench  set up with the benchmark extras, then run bench/ (see BENCHMARKS.md)
#   ./dev.sh proto  regenerate the Python code of the .proto files (committed with them)
set -euo pipefail
cd "$(dirname "$0")"
VENV=${LSMSTORE_VENV:-.venv}
PY=${PYTHON:-python3}

ensure_venv() {  # $1 = extras ("" | "dev" | "dev,bench")
  local extras=$1 stamp want
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  want="$(sha256sum pyproject.toml | cut -c1-16)-$extras"
  stamp="$VENV/.lsmstore-installed"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    # One install command for everything keeps aiobotocore's botocore pin and moto consistent.
    if [ -n "$extras" ]; then
      "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$extras]"
    else
      "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e .
    fi
    "$VENV/bin/python" -m pip check
    echo "$want" >"$stamp"
  fi
}

ensure_hadoop_aws() {  # hadoop-aws matching PySpark's Hadoop, from Maven Central, for s3a://
  # (lsmstore/spark/s3a.py); resolved once into the venv, no network afterwards
  "$VENV/bin/python" -m lsmstore.spark.s3a "$VENV/spark-ivy" >/dev/null
}

ensure_debs() {  # Debian packages the tests talk to: a real redis-server, RocksDB's sst_dump,
  # a Java runtime for Spark (local mode and a loopback standalone cluster), a headless
  # chromium for the web UI's browser tests (driven by playwright, no browser download)
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v sst_dump >/dev/null || missing+=(rocksdb-tools)
  command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
  command -v rclone >/dev/null || missing+=(rclone)  # an S3 client of the gateway's tests
  command -v chromium >/dev/null || missing+=(chromium)
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null; then
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "dev.sh: missing ${missing[*]} and no apt-get to install them" >&2
    exit 1
  fi
}

case "${1:-}" in
  run)
    shift
    ensure_venv ""
    exec "$VENV/bin/python" -m lsmstore demo "$@"
    ;;
  test)
    shift
    ensure_debs
    ensure_venv "dev,spark"
    ensure_hadoop_aws
    "$VENV/bin/ruff" check lsmstore compactor committer tests bench
    "$VENV/bin/mypy"
    exec "$VENV/bin/pytest" "$@"
    ;;
  bench)
    shift
    ensure_debs
    # bench serve drives the server with wrk (a load generator in C)
    command -v wrk >/dev/null || { [ "$(id -u)" -eq 0 ] && apt-get install -y -qq wrk >/dev/null \
      || sudo -n apt-get install -y -qq wrk >/dev/null || echo "dev.sh: wrk missing" >&2; }
    ensure_venv "dev,bench,spark"
    ensure_hadoop_aws
    exec "$VENV/bin/python" -m bench "$@"
    ;;
  proto)
    shift
    ensure_venv "dev,proto"
    for f in lsmstore/*/proto/*.proto; do
      "$VENV/bin/python" -m grpc_tools.protoc -I . --python_out=. --pyi_out=. "$f"
    done
    ;;
  *)
    echo "usage: ./dev.sh run|test|bench|proto [args]" >&2
    exit 2
    ;;
esac
