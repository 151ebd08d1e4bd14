# Two set-up commands for a fresh machine: `make demo` and `make test`.
# Everything lives in .venv at the repository root; installs go through uv.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
PYTEST_ARGS ?=

.PHONY: demo test install install-core lint engine-up engine-down clean

$(UV):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check uv

# Installs compile bytecode, as pip does: where Python may not write it (a read-only
# site-packages, PYTHONDONTWRITEBYTECODE), every process would otherwise compile what it imports
# from source (Airflow and a cloud SDK: 3-4x slower imports, seconds per task process).
UV_INSTALL := $(UV) pip install -q --compile-bytecode --python $(PY)

# The provider with the local backend, numpy for the example DAG: what `make demo` needs.
install-core: $(UV)
	$(UV_INSTALL) -e '.[docker,examples]'

# Everything the test suite uses: all cloud extras, test tools and the emulated clouds.
install: $(UV)
	$(UV_INSTALL) -e '.[all,examples,test,cloud]'

demo: install-core
	scripts/demo.sh

# Starts what the suite needs and is not running yet (engine, registry, base image, emulated
# clouds; Chromium and PostgreSQL from Debian), runs ruff and pytest, stops what it started.
test: install
	scripts/test.sh $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check airflow_stepop tests bench dags_examples cloud
	$(PY) -m ruff format --check airflow_stepop tests bench dags_examples cloud
	$(VENV)/bin/lint-imports

# A container engine, a registry and the offline-built base image (needs root, as in CI).
engine-up:
	scripts/engine.sh up

engine-down:
	scripts/engine.sh down

include cloud/cloud.mk

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
