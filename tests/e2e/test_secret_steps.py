"""Under dag.test(): a step that uses a connection its DAG file read at module level (``CONN =
BaseHook.get_connection(...)``) is pickled by value with it. The task fails before anything is
uploaded or a job starts, naming the global, never showing the secret."""

from __future__ import annotations

import importlib
import sys
import uuid


def test_a_connection_read_at_module_level_is_not_uploaded_with_the_step(
    results, artifact_root, monkeypatch, tmp_path
):
    password = f"PW-{uuid.uuid4().hex}-stepop"
    uri = f"postgresql://app:{password}@warehouse.example:5432/app"
    monkeypatch.setenv("AIRFLOW_CONN_STEPOP_WAREHOUSE", uri)
    sys.modules.pop("secret_dags", None)  # read afresh: its module level sees the connection
    dags = importlib.import_module("secret_dags")

    run = dags.connection_read_at_module_level().test()

    assert run.state == "failed"
    said = (results / "failure.txt").read_text()
    assert said.startswith("SettingsError: The step 'count_rows' is pickled by value")
    assert "its global 'WAREHOUSE'.password holds a value Airflow masks as a secret" in said
    assert password not in said
    assert not artifact_root.exists() or not any(artifact_root.rglob("*"))  # no bundle
    jobs = tmp_path / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())  # no job
