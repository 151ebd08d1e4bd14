#!/usr/bin/env bash
# A local container engine, a registry and an offline-built Python base image, for the tests.
#
#   scripts/engine.sh up            install (Debian packages), start dockerd + registry if they do not
#                                   answer, build the base image and push it to the registry; prints
#                                   the pieces this call started (`dockerd`, `registry`) on stdout
#   scripts/engine.sh down [PIECE]  stop the named pieces (default: both) if `up` started them (by PID)
#   scripts/engine.sh env           print the settings tests read (KEY=VALUE)
#
# So a caller can stop exactly what it started and leave a running engine alone:
#   started=$(scripts/engine.sh up); ...; [[ -z $started ]] || scripts/engine.sh down $started
#
# No image can be pulled on our machines, so the base image is a debootstrapped Debian bookworm
# with python3 (3.11, like the workers), imported with `docker import` and cached by its recipe.
set -euo pipefail

STATE_DIR=${STEPOP_ENGINE_STATE:-/var/tmp/airflow-stepop-engine}
REGISTRY_PORT=${STEPOP_REGISTRY_PORT:-5000}
BASE_IMAGE=${STEPOP_BASE_IMAGE:-stepop-base/python:3.11-bookworm}
BASE_PACKAGES=python3,python3-pip,python3-numpy,ca-certificates
MIRROR=${STEPOP_DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { echo "[engine] $*" >&2; }

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
  fi
}

start_dockerd() {
  if docker info >/dev/null 2>&1; then log "dockerd already answers"; return; fi
  log "starting dockerd (vfs)"
  STARTED+=(dockerd)
  mkdir -p "$STATE_DIR"
  nohup dockerd --storage-driver=vfs --iptables=false --bridge=none \
    >"$STATE_DIR/dockerd.log" 2>&1 &
  echo $! >"$STATE_DIR/dockerd.pid"
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && return; sleep 1; done
  log "dockerd did not answer; see $STATE_DIR/dockerd.log"; exit 1
}

start_registry() {
  if curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null 2>&1; then
    log "registry already answers on 127.0.0.1:$REGISTRY_PORT"; return
  fi
  log "starting registry on 127.0.0.1:$REGISTRY_PORT"
  STARTED+=(registry)
  mkdir -p "$STATE_DIR/registry"
  cat >"$STATE_DIR/registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $STATE_DIR/registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$REGISTRY_PORT
YML
  nohup docker-registry serve "$STATE_DIR/registry.yml" >"$STATE_DIR/registry.log" 2>&1 &
  echo $! >"$STATE_DIR/registry.pid"
  for _ in $(seq 30); do
    curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null 2>&1 && return; sleep 0.5
  done
  log "registry did not answer; see $STATE_DIR/registry.log"; exit 1
}

build_base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then log "$BASE_IMAGE present"; return; fi
  local recipe tarball
  recipe=$(echo "bookworm $BASE_PACKAGES" | sha256sum | cut -c1-12)
  tarball="$STATE_DIR/base-$recipe.tar"
  if [[ ! -s "$tarball" ]]; then
    log "debootstrapping bookworm with $BASE_PACKAGES (a few minutes, once per machine)"
    local root="$STATE_DIR/rootfs-$recipe"
    rm -rf "$root"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$root" "$MIRROR" \
      >"$STATE_DIR/debootstrap.log" 2>&1
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  log "importing $BASE_IMAGE"
  docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' "$tarball" "$BASE_IMAGE" >/dev/null
}

registry_has() {  # REPO TAG
  curl -fsS -o /dev/null -I \
    -H "Accept: application/vnd.docker.distribution.manifest.v2+json" \
    -H "Accept: application/vnd.oci.image.manifest.v1+json" \
    "http://127.0.0.1:$REGISTRY_PORT/v2/$1/manifests/$2" 2>/dev/null
}

# The fakes run job images from the registry, and the docs name this one: push it once.
push_base_image() {
  local repo=${BASE_IMAGE%:*} tag=${BASE_IMAGE##*:}
  if registry_has "$repo" "$tag"; then log "127.0.0.1:$REGISTRY_PORT/$BASE_IMAGE present"; return; fi
  log "pushing $BASE_IMAGE to 127.0.0.1:$REGISTRY_PORT"
  docker tag "$BASE_IMAGE" "127.0.0.1:$REGISTRY_PORT/$BASE_IMAGE"
  docker push -q "127.0.0.1:$REGISTRY_PORT/$BASE_IMAGE" >/dev/null
}

stop_pidfile() {
  local pidfile=$1
  [[ -f "$pidfile" ]] || return 0
  local pid; pid=$(cat "$pidfile")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

STARTED=()
case "${1:-up}" in
  up)
    install_packages
    start_dockerd
    start_registry
    build_base_image
    push_base_image
    echo "${STARTED[*]}"
    ;;
  down)
    shift
    wanted=" ${*:-registry dockerd} "
    for piece in registry dockerd; do
      if [[ $wanted == *" $piece "* ]]; then stop_pidfile "$STATE_DIR/$piece.pid"; fi
    done
    ;;
  env)
    echo "STEPOP_TEST_BASE_IMAGE=$BASE_IMAGE"
    echo "STEPOP_TEST_REGISTRY=127.0.0.1:$REGISTRY_PORT"
    ;;
  *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
