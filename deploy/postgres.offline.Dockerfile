# PostgreSQL for docker-compose.offline.yaml, where no image can be pulled: Debian's package on
# the offline-built base (scripts/engine.sh). Elsewhere docker-compose.yaml uses postgres:16.
ARG BASE_IMAGE=stepop-base/python:3.11-bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -q && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-15 && \
    rm -rf /var/lib/apt/lists/* && \
    mkdir -p /var/lib/postgresql/data && chown postgres: /var/lib/postgresql/data
ENV PATH=/usr/lib/postgresql/15/bin:$PATH
USER postgres
