# Targets of the emulated clouds (see docs/testing.md). `up` starts the engine, the registry
# (with the base image) if they do not answer, reuses a stack that still answers and writes
# .cloud/env; `down` stops every process of the stack, by PID (the engine stays: engine-down).
.PHONY: cloud-up cloud-down cloud-status

cloud-up: install
	scripts/engine.sh up >/dev/null
	$(PY) -m cloud.stack up

cloud-down:
	$(PY) -m cloud.stack down

cloud-status:
	$(PY) -m cloud.stack status
