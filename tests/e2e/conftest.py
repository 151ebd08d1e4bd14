from __future__ import annotations

import pytest


@pytest.fixture
def results(tmp_path, monkeypatch, airflow_db, artifact_root):
    """Where test DAGs leave what they saw; the env var reaches tasks run by dag.test()."""
    out = tmp_path / "results"
    out.mkdir()
    monkeypatch.setenv("STEPOP_TEST_RESULTS", str(out))
    return out
