"""execution_timeout counts from execute(), as Airflow's own does, not from the submit."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from airflow.sdk.bases.operator import ExecutorSafeguard
from airflow.sdk.exceptions import TaskDeferred

from airflow_stepop import LocalStepOperator


def test_the_trigger_s_deadline_is_execution_timeout_after_execute_began(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", f"file://{tmp_path}/artifacts")
    monkeypatch.setenv("AIRFLOW__STEPOP__LOCAL_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    operator = LocalStepOperator(
        task_id="t", python_callable=json.dumps, op_args=[1], execution_timeout=timedelta(hours=1)
    )
    backend = operator.make_backend()
    slow_submit = backend.submit

    def submit(request):  # staging and a submit that take a while (a slow cloud API)
        clock["now"] += 600
        return slow_submit(request)

    clock = {"now": time.time()}
    began = clock["now"]
    monkeypatch.setattr("airflow_stepop.operators.base.time.time", lambda: clock["now"])
    backend.submit = submit
    monkeypatch.setattr(operator, "make_backend", lambda: backend)
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)

    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)

    assert deferred.value.trigger.serialize()[1]["deadline"] == began + 3600
