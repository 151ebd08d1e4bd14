"""The step spec: the one contract between the operator (worker side) and the runtime (job side).

A spec is a versioned JSON document written next to a step's inputs. The run directory of one
attempt holds::

    spec.json      what to run (this module describes it)
    inputs/        arguments that did not fit inline
    outputs/       artifacts the step returned
    result.json    the result manifest, written LAST: its presence means success
    error.json     written instead when the step failed (type, message, traceback)

Spec fields (version 1):
    spec_version   1
    python         "MAJOR.MINOR" of the worker that packaged the step
    step           {"dag_id", "run_id", "task_id", "map_index", "try_number"}
    code           {"uri", "sha256"}: the code bundle (zip) to fetch and verify
    callable       {"kind": "import", "module", "qualname"} or {"kind": "pickle", "member"}
    args, kwargs   value nodes (see values.py)
    multiple_outputs, inline_limit_bytes
    mapped_downstream  (optional) a task is mapped over the result: a list or dict result stays
                   one, item by item, however large
"""

from __future__ import annotations

import sys
from typing import Any

SPEC_VERSION = 1
SPEC_NAME = "spec.json"
RESULT_NAME = "result.json"
ERROR_NAME = "error.json"
INPUTS_DIR = "inputs"
OUTPUTS_DIR = "outputs"

# Inside the code bundle (a zip the runtime extracts and puts on sys.path):
BUNDLE_CODE_DIR = "code/"  # the callable's module and the local modules it imports
BUNDLE_DEPS_DIR = "deps/"  # the worker's cloudpickle, when the callable travels pickled
BUNDLE_CALLABLE = "callable.pkl"  # the callable pickled by value
BUNDLE_SOURCES = "sources.json"  # with it, the lines of its code, for tracebacks in the job

# Seconds the job may run before the runtime ends it itself: set by a backend whose service has
# no runtime limit of its own (the local one), as the backstop for a job no trigger watches.
MAX_RUNTIME_ENV = "STEPOP_MAX_RUNTIME_S"
MAX_RUNTIME_EXIT_CODE = 124  # as coreutils' timeout; the runtime exits 0, 1 or 143 otherwise

# The sha256 (hex) of spec.json's bytes as the worker wrote them, set by every backend in the
# job's environment, which the service stores with the job: a spec rewritten in the bucket after
# submit no longer matches it, and the runtime refuses to run it.
SPEC_SHA256_ENV = "STEPOP_SPEC_SHA256"


class SpecError(ValueError):
    """A spec this runtime cannot run."""


class SpecTamperedError(SpecError):
    """A spec whose bytes are not those the job was submitted with (``SPEC_SHA256_ENV``)."""


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def check(spec: dict[str, Any]) -> dict[str, Any]:
    version = spec.get("spec_version")
    if version != SPEC_VERSION:
        raise SpecError(
            f"Step spec version {version!r} is not supported by this runtime (it reads version "
            f"{SPEC_VERSION}); the worker and the code bundle come from different airflow-stepop "
            "releases."
        )
    for field in ("python", "step", "code", "callable", "args", "kwargs"):
        if field not in spec:
            raise SpecError(f"Step spec is missing the field {field!r}.")
    return spec
