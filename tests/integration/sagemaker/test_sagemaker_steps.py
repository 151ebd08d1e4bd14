"""SageMaker steps end to end through dag.test() on the emulated cloud (process mode)."""

from __future__ import annotations

import json

from airflow_stepop import ArtifactRef
from tests.integration.sagemaker.conftest import dags, training_jobs, xcoms


def _read(results, name):
    return json.loads((results / f"{name}.json").read_text())


def test_a_step_runs_as_a_training_job_and_a_plain_task_loads_its_result(aws, ctl):
    run = dags().sm_pipeline().test()
    assert run.state == "success"
    assert _read(aws["results"], "check") == {
        "summary": {"sum": float(sum(range(100_000))), "n": 100_000},
        "loaded": float(sum(range(100_000))),
    }
    rows = xcoms(run)
    stored = rows[("train", "return_value", -1)]
    assert stored["__classname__"] == "airflow_stepop.artifacts.ref.ArtifactRef"
    ref = ArtifactRef.from_record(stored["__data__"])
    assert ref.uri.startswith(aws["root"] + "/") and ref.size > 800_000
    assert "/output/model/outputs/" in ref.uri  # uploaded by the service, not by the worker
    assert len(json.dumps(stored)) < 1024
    billing = rows[("train", "sagemaker_billing", -1)]
    assert billing["instance_type"] == "ml.t3.medium"  # the cheapest with 2 vCPU and 4 GiB
    assert billing["billable_seconds"] >= 1 and billing["estimated_cost_usd"] > 0
    assert ctl.counters().get("CreateTrainingJob") == 2


def test_a_raising_step_fails_with_the_remote_exception_and_the_failure_reason(aws, ctl):
    run = dags().sm_step_raises().test()
    assert run.state == "failed"
    failure = _read(aws["results"], "failure")
    assert failure.startswith("StepFailedError: Step job ")
    assert "AlgorithmError: ValueError: bad value 42" in failure  # the service's FailureReason
    assert "in explode" in failure  # the traceback, from the job's log tail
