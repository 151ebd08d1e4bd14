"""The fault matrix names real tests: a renamed or deleted test must not leave a row "not run"."""

from __future__ import annotations

import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _matrix():
    return importlib.import_module("bench.fault_matrix")


def test_every_row_names_a_test_that_exists():
    matrix = _matrix()
    missing = []
    for row in matrix.ROWS:
        path, name = row.test.split("::")
        source = ROOT / path
        if not source.exists() or f"def {name}(" not in source.read_text():
            missing.append(row.test)
    assert not missing


def test_every_backend_has_a_row_for_each_fault_its_service_can_meet():
    matrix = _matrix()
    rows = {(row.fault, row.backend) for row in matrix.ROWS}
    every_backend = {
        "worker killed between submit and defer",
        "failure in execute() after submit, no retry left",
        "worker killed after the job succeeded",
        "triggerer killed and restarted mid-job",
        "job failure (the step raises)",
        "user kill",
        "execution_timeout",
    }
    missing = [
        (fault, backend)
        for fault in sorted(every_backend)
        for backend in matrix.BACKENDS
        if (fault, backend) not in rows
    ]
    assert not missing
