"""execute() defers with a stand-in that Airflow stores exactly as the StepJobTrigger itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import structlog
from airflow.sdk.bases.operator import ExecutorSafeguard
from airflow.sdk.exceptions import TaskDeferred
from airflow.sdk.execution_time.task_runner import _defer_task
from airflow.sdk.module_loading import import_string
from airflow.sdk.serde import deserialize

from airflow_stepop import LocalStepOperator
from airflow_stepop.triggers.deferral import StepJobDeferral
from airflow_stepop.triggers.process_identity import this_process
from airflow_stepop.triggers.step_job import StepJobTrigger

KWARGS = {
    "backend_path": "airflow_stepop.backends.local.backend.LocalBackend",
    "backend_kwargs": {"jobs_dir": "/tmp/jobs", "python": sys.executable},
    "handle": {"job_id": "dag-task-t1", "run_uri": "file:///tmp/run", "pid": 1},
    "poll_interval": 2.0,
    "time_left": 3600.0,
    "storage_conn_id": None,
    "resume_hold": 10,
    "deferred_by": "123-0f1e2d3c4b5a6978",
}


def test_the_task_runner_stores_what_the_triggerer_rebuilds_as_the_step_trigger():
    ti = SimpleNamespace(dag_id="dag", run_id="run", task_id="task", task=SimpleNamespace())
    deferred = TaskDeferred(trigger=StepJobDeferral(**KWARGS), method_name="execute_complete")
    message, _ = _defer_task(deferred, ti, structlog.get_logger("test"))
    trigger = import_string(message.classpath)(**deserialize(message.trigger_kwargs))
    assert isinstance(trigger, StepJobTrigger)
    assert trigger.serialize() == StepJobDeferral(**KWARGS).serialize()
    assert message.next_method == "execute_complete"


def test_execute_defers_without_importing_the_trigger_machinery(tmp_path):
    """The worker only serializes the trigger: Airflow's trigger base and models stay out."""
    script = textwrap.dedent(
        """
        import json, sys
        from types import SimpleNamespace
        from airflow.sdk.bases.operator import ExecutorSafeguard
        from airflow.sdk.exceptions import TaskDeferred
        from airflow_stepop import LocalStepOperator

        op = LocalStepOperator(task_id="t", python_callable=json.dumps, op_args=[1])
        ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)
        try:
            op.execute({"ti": ti}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)
        except TaskDeferred as deferred:
            assert deferred.trigger.serialize()[0].endswith("StepJobTrigger")
        assert "airflow.triggers.base" not in sys.modules, "imported"
        """
    )
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__STEPOP__ARTIFACT_ROOT": f"file://{tmp_path}/artifacts",
    }
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path, env=env)


@pytest.mark.parametrize(("configured", "hold"), [(None, 10), ("0", 0), ("30", 30)])
def test_the_deferral_names_its_process_and_the_configured_resume_hold(
    monkeypatch, tmp_path, configured, hold
):
    """The trigger waits out the hold only where it runs in another process than the try that
    deferred (a triggerer; dag.test() runs it in the same one)."""
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", f"file://{tmp_path}/artifacts")
    monkeypatch.setenv("AIRFLOW__STEPOP__LOCAL_JOBS_DIR", str(tmp_path / "jobs"))
    if configured is not None:
        monkeypatch.setenv("AIRFLOW__STEPOP__RESUME_HOLD_SECONDS", configured)
    op = LocalStepOperator(task_id="t", python_callable=json.dumps, op_args=[1])
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)

    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": ti}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)

    kwargs = deferred.value.trigger.serialize()[1]
    assert kwargs["resume_hold"] == hold and kwargs["deferred_by"] == this_process()
    trigger = StepJobTrigger(**kwargs)
    assert trigger._hold_seconds() == 0.0  # here, in the process that deferred
    trigger.deferred_by = "1-" + this_process().split("-")[1]  # another process, same token
    assert trigger._hold_seconds() == hold
