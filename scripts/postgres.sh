#!/usr/bin/env bash
# A private PostgreSQL cluster on loopback: Airflow's metadata DB for tests and benchmarks.
#
#   scripts/postgres.sh up DIR PORT   create the cluster under DIR (once), start it on
#                                     127.0.0.1:PORT, print its SQLAlchemy URL on stdout
#   scripts/postgres.sh down DIR      stop it (fast shutdown); DIR stays for the caller to remove
#
# Uses Debian's postgresql binaries (/usr/lib/postgresql/<version>/bin). Trust auth on loopback
# only, fsync off: a throwaway database, never for data that matters. As root, the server runs as
# the `postgres` user (PostgreSQL refuses to run as root).
set -euo pipefail

bindir=$(compgen -G "/usr/lib/postgresql/*/bin" | sort -V | tail -1)
[[ -x $bindir/initdb ]] || { echo "no PostgreSQL: apt-get install postgresql" >&2; exit 1; }
as_owner() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

cmd=${1:-}; dir=${2:?usage: $0 up DIR PORT | down DIR}
data=$dir/data
case $cmd in
  up)
    port=${3:?usage: $0 up DIR PORT}
    mkdir -p "$dir" && chmod 755 "$dir"
    if [[ $(id -u) == 0 ]] && ! runuser -u postgres -- test -x "$dir"; then
      echo "postgres.sh: DIR=$dir: the server runs as the user postgres (PostgreSQL refuses" \
        "root), which cannot reach it through its parent directories; use a DIR every user" \
        "can traverse, e.g. under /tmp" >&2
      exit 1
    fi
    if [[ ! -s $data/PG_VERSION ]]; then
      mkdir -p "$data"
      [[ $(id -u) == 0 ]] && chown postgres: "$data"
      as_owner "$bindir/initdb" -D "$data" -U airflow -A trust -E UTF8 --no-sync >"$dir/initdb.log"
    fi
    [[ $(id -u) == 0 ]] && touch "$dir/server.log" && chown postgres: "$dir/server.log"
    as_owner "$bindir/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
      -o "-h 127.0.0.1 -p $port -k $data -F -c max_connections=200" start >/dev/null
    as_owner "$bindir/psql" -h 127.0.0.1 -p "$port" -U airflow -d postgres -qtAc \
      "SELECT 1 FROM pg_database WHERE datname = 'airflow'" | grep -q 1 \
      || as_owner "$bindir/createdb" -h 127.0.0.1 -p "$port" -U airflow airflow
    echo "postgresql+psycopg2://airflow@127.0.0.1:$port/airflow"
    ;;
  down)
    [[ -s $data/postmaster.pid ]] || exit 0
    as_owner "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    ;;
  *) echo "usage: $0 up DIR PORT | down DIR" >&2; exit 2 ;;
esac
