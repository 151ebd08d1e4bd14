# Targets of the emulated clouds (see docs/testing.md).
.PHONY: cloud-up cloud-down

cloud-up:
	@echo "emulated clouds: not built yet"

cloud-down:
	@true
