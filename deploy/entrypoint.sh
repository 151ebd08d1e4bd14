#!/usr/bin/env bash
# Entry point of the airflow-stepop image: `airflow <command>`. With the `emulated` profile
# (COMPOSE_PROFILES=emulated), first read the endpoints and connections the `clouds` service
# writes to the shared volume, and deploy/emulated.env (the [stepop] options of the demo).
set -euo pipefail

CLOUD_ENV=${STEPOP_CLOUD_DIR:-/opt/airflow/cloud}/env
if [[ ,${STEPOP_COMPOSE_PROFILES:-}, == *,emulated,* ]]; then
  for _ in $(seq 180); do [[ -s $CLOUD_ENV ]] && break; sleep 1; done
  [[ -s $CLOUD_ENV ]] || { echo "the clouds service wrote no $CLOUD_ENV" >&2; exit 1; }
  set -a
  . "$CLOUD_ENV"
  . /opt/airflow-stepop/deploy/emulated.env
  set +a
fi

if [[ -x /entrypoint ]]; then exec /usr/bin/dumb-init -- /entrypoint "$@"; fi  # official image
exec airflow "$@"
