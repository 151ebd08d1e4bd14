#!/usr/bin/env bash
# `make test`: start what the suite needs and is not running yet, run ruff and pytest, then stop
# exactly what this run started. A running engine, registry or emulated cloud (a developer's
# `scripts/engine.sh up` or `make cloud-up`) is reused and left running.
#
#   scripts/test.sh [PYTEST ARGS...]     (after `make install`; `make test` does both)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

log() { echo "[test] $*" >&2; }

# Debian packages of the end-to-end tests: headless Chromium (the UI test) and PostgreSQL (the
# metadata DB of the Airflow processes). No cluster is created at install: tests start their own.
need=()
command -v chromium >/dev/null || need+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
if ((${#need[@]})); then
  if [[ $(id -u) != 0 ]]; then
    log "missing Debian packages: ${need[*]}; run as root or: sudo apt-get install ${need[*]}"
    exit 1
  fi
  log "installing ${need[*]}"
  mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/stepop-test.conf
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi

engine_started=""
stack_started=""
cleanup() {
  if [[ -n $stack_started ]]; then $PY -m cloud.stack down || true; fi
  if [[ -n $engine_started ]]; then scripts/engine.sh down $engine_started || true; fi
}
trap cleanup EXIT

engine_started=$(scripts/engine.sh up)
if $PY -m cloud.stack status >/dev/null 2>&1; then
  log "reusing the emulated clouds of ${STEPOP_CLOUD_DIR:-.cloud}/env"
else
  stack_started=yes
  $PY -m cloud.stack up
fi

# Screenshots of the browser test and other files worth keeping from a run.
export STEPOP_TEST_ARTIFACTS=${STEPOP_TEST_ARTIFACTS:-$PWD/test-artifacts}

$PY -m ruff check airflow_stepop tests bench dags_examples cloud
$PY -m pytest "$@"
