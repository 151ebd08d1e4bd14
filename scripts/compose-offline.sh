#!/usr/bin/env bash
# docker-compose.yaml on a machine that pulls no image and has no bridge network (our CI
# machines, after `scripts/engine.sh up`): merges docker-compose.offline.yaml into it, drops the
# published ports (every service uses the host's network, where ports need no publishing, and
# docker-compose 1.29 refuses both at once) and the `registry` service (scripts/engine.sh runs
# the registry; compose would try to pull registry:2), and runs docker-compose with the
# arguments given:
#
#   scripts/compose-offline.sh build
#   COMPOSE_PROFILES=emulated scripts/compose-offline.sh up -d
#   scripts/compose-offline.sh down -v
set -euo pipefail
cd "$(dirname "$0")/.."

merged=.compose-offline.yaml
# Creating a container of a large image takes minutes on the vfs storage driver.
export COMPOSE_HTTP_TIMEOUT=${COMPOSE_HTTP_TIMEOUT:-900}
docker-compose -f docker-compose.yaml -f docker-compose.offline.yaml config \
  | .venv/bin/python -c '
import sys, yaml
config = yaml.safe_load(sys.stdin)
del config["services"]["registry"]
for service in config["services"].values():
    service.pop("ports", None)
yaml.safe_dump(config, sys.stdout, sort_keys=False)
' >"$merged"
exec docker-compose -p airflow-stepop -f "$merged" "$@"
