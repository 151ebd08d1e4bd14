# Targets of the emulated clouds (see docs/testing.md). `up` reuses a stack that still answers
# and writes .cloud/env; `down` stops every process `up` started, by PID.
.PHONY: cloud-up cloud-down cloud-status

cloud-up: install
	$(PY) -m cloud.stack up

cloud-down:
	$(PY) -m cloud.stack down

cloud-status:
	$(PY) -m cloud.stack status
